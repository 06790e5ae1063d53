"""One interface over the vocoder backends: torch (eager / CUDA graphs), ONNX Runtime, TensorRT.

    voc = build_vocoder("auto", decoder, device="cuda", max_batch=256, packets=(1, 2, 4))
    slots = voc.new_state(256)                      # allocated once, at start
    pcm = voc.decode_step(codes, slots_view)        # codes [B, t, 16] → float32 [B, t·1920]
    pcm = voc.decode_step(codes, slots, rows=idx)   # or: just these rows of a larger slot state

Every backend keeps the stream state as a `StreamingCodecState` in the
layout of `CodecDecoder.new_state` (the ONNX export's `state.N` inputs, in
order), on the backend's device; `decode_step` advances the rows it is given
in place and returns a fresh tensor (not a buffer the next call overwrites).
Rows are independent, so one call may mix streams at different positions.
A backend is used by one thread at a time per state; TensorRT keeps one
execution context per calling thread.

`kind` is what `engine.vocoder` names (torch | onnxruntime | tensorrt);
`name` says exactly what runs (e.g. `torch-cuda-graphs`, `onnxruntime-cpu`).
A backend that cannot run here raises `CodecError("vocoder_unavailable", one line)`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Sequence

import torch

from tts.qwen3.codec.config import CodecError
from tts.qwen3.codec.vocoder_base import Vocoder, default_cache_dir, split_packet  # noqa: F401 (re-exported)

log = logging.getLogger("voxgate.vocoder")

KINDS = ("auto", "torch", "onnxruntime", "tensorrt")
DEFAULT_PACKETS = (1, 2, 4)
# From bench/vocoder_bench.py --backends torch,onnxruntime on the released shape (docs/benchmarks.md table,
# 2026-12-01): ONNX Runtime used 13 % less CPU per frame (geometric mean of 9 cells, 1 thread) and
# kept its speed at 2 threads on a loaded machine, where torch eager slowed ~10x.
CPU_PREFERS_ONNXRUNTIME = True
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def decoder_fingerprint(decoder) -> str:
    """sha256 over the decoder's config and weights (keys the ONNX export cache)."""
    h = hashlib.sha256(repr(decoder.config).encode())
    for name, tensor in sorted(decoder.state_dict().items()):
        h.update(name.encode())
        t = tensor.detach().to("cpu").contiguous()
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def cached_onnx(decoder, cache_dir: str | os.PathLike | None, precision: str = "fp32", max_batch: int = 256) -> Path:
    """The decoder's ONNX export in the cache (written once per weights, precision and max batch)."""
    from tts.qwen3.codec.onnx_export import export_onnx

    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vocoder-{decoder_fingerprint(decoder)[:20]}-{precision}-b{max_batch}.onnx"
    if not path.is_file():
        tmp = path.with_suffix(f".tmp{os.getpid()}.onnx")
        info = export_onnx(decoder, tmp, precision=precision, max_batch=max_batch)
        os.replace(tmp, path)
        log.info("vocoder: exported ONNX %s (opset %d, %.1f MB)", path, info["opset"], info["bytes"] / 1e6)
    return path


def onnxruntime_available(device: torch.device) -> str | None:
    """None when ONNX Runtime can run on `device`, else why not (one line)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime is not installed (pip install 'voxgate[onnx]', or onnxruntime-gpu on CUDA)"
    try:
        import onnx  # noqa: F401 - the export needs it
    except ImportError:
        return "onnx is not installed (pip install 'voxgate[onnx]')"
    want = "CUDAExecutionProvider" if device.type == "cuda" else "CPUExecutionProvider"
    if want not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no {want} (install onnxruntime-gpu for CUDA)"
    return None


def tensorrt_available(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "TensorRT needs a CUDA device (engine.device is cpu)"
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:  # ImportError, or a stub package whose import fails
        return f"TensorRT is not importable here ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no module'})"
    return _onnx_missing()


def _onnx_missing() -> str | None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        return "building a TensorRT engine needs the onnx package (pip install 'voxgate[onnx]')"
    return None


def choose_auto(device: torch.device) -> tuple[str, str]:
    """(kind, why) for `engine.vocoder: auto`: the fastest backend available here.

    CUDA: TensorRT when importable (the public A/B: twice the calls within SLO of the
    eager torch vocoder), else torch with CUDA graphs. CPU: ONNX Runtime when installed
    (faster than torch eager on CPU in bench/vocoder_bench.py, see the docs/benchmarks.md table),
    else torch eager."""
    if device.type == "cuda":
        why_not = tensorrt_available(device)
        if why_not is None:
            return "tensorrt", "CUDA device and TensorRT importable"
        return "torch", f"CUDA graphs (no TensorRT: {why_not})"
    if not CPU_PREFERS_ONNXRUNTIME:
        return "torch", "CPU: torch eager (measured at least as fast as ONNX Runtime there, bench/vocoder_bench.py)"
    why_not = onnxruntime_available(device)
    if why_not is None:
        return "onnxruntime", "CPU: ONNX Runtime (measured faster than torch eager there, bench/vocoder_bench.py)"
    return "torch", f"CPU: torch eager ({why_not})"


def build_vocoder(
    kind: str,
    decoder,
    *,
    max_batch: int = 64,
    packets: Sequence[int] = DEFAULT_PACKETS,
    cache_dir: str | os.PathLike | None = None,
    onnx_path: str | os.PathLike | None = None,
    precision: str = "fp32",
    cuda_graphs: bool | None = None,
    contexts: int = 2,
) -> Vocoder:
    """The backend `kind` (auto | torch | onnxruntime | tensorrt) for `decoder` (a CodecDecoder on its device).

    Refuses with `CodecError("vocoder_unavailable", one line)` when that backend cannot run here.
    `onnx_path` uses an existing export instead of exporting `decoder` into `cache_dir`."""
    if kind not in KINDS:
        raise CodecError("vocoder_unavailable", f"engine.vocoder must be one of {', '.join(KINDS)}, got {kind!r}")
    device = decoder.device
    if kind == "auto":
        kind, why = choose_auto(device)
        log.info("vocoder: auto picked %s (%s)", kind, why)
    if kind == "torch":
        from tts.qwen3.codec.torch_vocoder import TorchVocoder

        return TorchVocoder(decoder, max_batch=max_batch, packets=packets, cuda_graphs=cuda_graphs)
    if kind == "onnxruntime":
        why_not = onnxruntime_available(device)
        if why_not:
            raise CodecError("vocoder_unavailable", f"engine.vocoder onnxruntime: {why_not}")
        from tts.qwen3.codec.ort_vocoder import OnnxRuntimeVocoder

        path = onnx_path or cached_onnx(decoder, cache_dir, precision, max_batch)
        return OnnxRuntimeVocoder(path, device=device, max_batch=max_batch, packets=packets)
    why_not = tensorrt_available(device)
    if why_not:
        raise CodecError("vocoder_unavailable", f"engine.vocoder tensorrt: {why_not}")
    from tts.qwen3.codec.trt_vocoder import TensorRTVocoder

    path = onnx_path or cached_onnx(decoder, cache_dir, precision, max_batch)
    return TensorRTVocoder(
        path, device=device, max_batch=max_batch, packets=packets, cache_dir=cache_dir, contexts=contexts
    )
