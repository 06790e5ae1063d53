"""ONNX export of the streaming codec decoder: one step, with the stream state as explicit tensors.

    info = export_onnx(decoder, "vocoder.onnx", precision="fp32", max_batch=256)

The graph is `CodecDecoder.step`: inputs `codes` [batch, frames, 16] int64,
`frames` [batch] int64 (codec frames each row decoded so far) and `state.0`
… `state.N-1` (the decoder's state buffers in slot order: convolution
histories and each attention layer's last window-1 keys and values);
outputs `pcm` [batch, frames·1920] float32, `frames_out` [batch] and
`state_out.0` … (the new buffers, same shapes and dtypes as the inputs).
Batch and frames are dynamic axes, so one file serves every packet length
(1, 2, 4) and any mix of rows at different positions; a runtime that wants
fixed shapes (TensorRT) makes one profile per packet length.

Precision: fp16 exports cast the 12.5 Hz part and the upsampling
convolutions, bf16 exports the upsampling convolutions only; SnakeBeta, RMSNorm and LayerNorm compute in fp32 inside the
graph (casts around them), since Snake's exp/sin/reciprocal in half
precision silence the output. The state buffers then are half precision too.

Metadata (`metadata_props`): `voxgate.codec_config` (the CodecConfig as JSON),
`voxgate.precision`, `voxgate.max_batch` (what TensorRT profiles span) and
`voxgate.state` (each buffer's shape without the batch, and dtype), so a
backend can allocate the state without torch's decoder.

Needs `onnx` (the `onnx` extra) and uses torch's TorchScript-based exporter
(no onnxscript).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from tts.qwen3.codec.config import CodecConfig, CodecError
from tts.qwen3.codec.decoder import CodecDecoder

OPSET = 17  # LayerNormalization is native from 17; TensorRT 10 and ONNX Runtime ≥1.12 run it
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_ONNX_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def state_names(count: int) -> tuple[list[str], list[str]]:
    return [f"state.{i}" for i in range(count)], [f"state_out.{i}" for i in range(count)]


class _StepGraph(nn.Module):
    """Flat tensors in and out around `CodecDecoder.step` (what the exporter traces)."""

    def __init__(self, decoder: CodecDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, codes: torch.Tensor, frames: torch.Tensor, *state: torch.Tensor):
        wav, buffers = self.decoder.step(codes, frames, list(state))
        # frames + t without a Python int: the frame axis stays dynamic in the trace.
        advanced = frames + torch.ones_like(codes[:, :, 0]).sum(dim=1)
        return (wav, advanced, *buffers)


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _half_copy(decoder: CodecDecoder, dtype: torch.dtype) -> CodecDecoder:
    import copy

    half = copy.deepcopy(decoder)
    # SnakeBeta and codebook statistics stay fp32 (set_precision). bf16: the 12.5 Hz transformer
    # stays fp32 too, because torch's TorchScript exporter cannot emit its bf16 attention
    # (a scalar-type error); it is a small share of the work next to the 24 kHz convolutions.
    half.set_precision(torch.float32 if dtype == torch.bfloat16 else dtype, dtype)
    return half.eval()


def export_onnx(
    decoder: CodecDecoder,
    out: str | os.PathLike,
    precision: str = "fp32",
    max_batch: int = 256,
    opset: int = OPSET,
) -> dict:
    """Write the streaming step of `decoder` (fp32, on any device) as ONNX; returns what was written.

    The file is checked with `onnx.checker` (by path, so files over 2 GiB work too).
    """
    try:
        import onnx
    except ImportError as exc:
        raise CodecError(
            "missing_dependency", "exporting needs the onnx package (pip install 'voxgate[onnx]')"
        ) from exc
    if precision not in PRECISIONS:
        raise CodecError("bad_precision", f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if max_batch < 1:
        raise CodecError("bad_max_batch", f"max_batch must be at least 1, got {max_batch}")
    dtype = PRECISIONS[precision]
    import copy

    # traced on the CPU; a decoder on a GPU is copied, never moved (its owner keeps using it)
    model = (decoder if decoder.device.type == "cpu" else copy.deepcopy(decoder).to("cpu")).eval()
    if dtype != torch.float32:
        model = _half_copy(model, dtype)
    cfg = model.config
    # Example inputs: 2 rows at different positions, 3 frames (any size would do: axes are dynamic).
    state = model.new_state(2)
    state.frames.copy_(torch.tensor([0, 5]))
    codes = torch.randint(0, cfg.codebook_size, (2, 3, cfg.num_quantizers), generator=torch.Generator().manual_seed(0))
    ins, outs = state_names(len(state.buffers))
    dynamic = {
        "codes": {0: "batch", 1: "frames"},
        "frames": {0: "batch"},
        "pcm": {0: "batch", 1: "samples"},
        "frames_out": {0: "batch"},
    }
    dynamic.update({name: {0: "batch"} for name in ins + outs})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        raw = Path(tmp) / "raw.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(
                _StepGraph(model),
                (codes, state.frames, *state.buffers),
                str(raw),
                dynamo=False,
                input_names=["codes", "frames", *ins],
                output_names=["pcm", "frames_out", *outs],
                dynamic_axes=dynamic,
                opset_version=opset,
                do_constant_folding=True,
            )
        proto = onnx.load(str(raw))
        specs = [[list(b.shape[1:]), _ONNX_DTYPE_NAMES[b.dtype]] for b in state.buffers]
        meta = {
            "voxgate.codec_config": json.dumps(dataclasses.asdict(cfg)),
            "voxgate.precision": precision,
            "voxgate.max_batch": str(max_batch),
            "voxgate.state": json.dumps(specs),
            "voxgate.format": "1",
        }
        del proto.metadata_props[:]
        for key, value in meta.items():
            proto.metadata_props.add(key=key, value=value)
        proto.producer_name = "voxgate"
        onnx.save(proto, str(out))
    onnx.checker.check_model(str(out))
    return {
        "path": str(out),
        "opset": opset,
        "bytes": out.stat().st_size,
        "precision": precision,
        "max_batch": max_batch,
        "state_tensors": len(specs),
        "sha256": file_sha256(out),
        "nodes": len(proto.graph.node),
    }


def read_metadata(path: str | os.PathLike) -> dict:
    """The voxgate metadata of an exported file, without loading its weights."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in proto.metadata_props}
    if props.get("voxgate.format") != "1":
        raise CodecError("bad_onnx", f"{path} is not a voxgate vocoder export (no voxgate metadata)")
    return {
        "config": CodecConfig(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(props["voxgate.codec_config"]).items()}
        ),
        "precision": props["voxgate.precision"],
        "max_batch": int(props["voxgate.max_batch"]),
        "state": [(tuple(shape), dtype) for shape, dtype in json.loads(props["voxgate.state"])],
    }
