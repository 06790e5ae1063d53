"""The TensorRT vocoder backend: an engine built from the ONNX export, cached on disk.

Build (TensorRT Python API, 10.x): a strongly typed network parsed from the
ONNX file, so each layer keeps the export's precision (SnakeBeta and the
norms fp32 inside fp16/bf16 exports); one optimisation profile per (caller
context, packet length) with batch 1..max_batch and the packet's frames fixed.
TensorRT lets a profile serve one execution context at a time, hence the
profiles per context. The serialized engine is cached under
`<cache>/trt/` keyed by GPU name, TensorRT version, the ONNX file's sha256,
max batch, packets and contexts; a later start deserializes it (seconds, not
the minutes a build takes).

Run: one execution context per calling thread (up to `contexts`), each with
its own input and output tensors of max_batch rows. Per packet length the
tensor addresses are bound once (a call with B rows uses the first B rows of
the same tensors, so only the input shapes change); switching packet length
switches the profile and rebinds. A call copies its rows' codes and state
in, runs `execute_async_v3` on the caller's current torch stream, and copies
the new state back on that stream: no host sync.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from pathlib import Path
from typing import Sequence

import torch

from tts.qwen3.codec.config import CodecError
from tts.qwen3.codec.onnx_export import file_sha256, read_metadata, state_names
from tts.qwen3.codec.state import StreamingCodecState
from tts.qwen3.codec.vocoder_base import Vocoder, default_cache_dir, split_packet

log = logging.getLogger("voxgate.vocoder")

_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
WORKSPACE_BYTES = 8 << 30


def engine_cache_key(
    gpu_name: str, trt_version: str, onnx_sha256: str, max_batch: int, packets: Sequence[int], contexts: int
) -> str:
    """File name of a cached engine: everything an engine depends on, readable, plus a short hash."""
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", gpu_name).strip("-").lower()
    parts = f"{gpu}|{trt_version}|{onnx_sha256}|{max_batch}|{tuple(packets)}|{contexts}"
    digest = hashlib.sha256(parts.encode()).hexdigest()[:12]
    return f"vocoder-{onnx_sha256[:12]}-{gpu}-trt{trt_version}-b{max_batch}-p{'_'.join(map(str, packets))}-c{contexts}-{digest}.plan"


class _Context:
    """One execution context and the tensors bound to it (one calling thread)."""

    def __init__(self, owner: "TensorRTVocoder", index: int):
        self.owner = owner
        self.index = index
        self.context = owner.engine.create_execution_context()
        if self.context is None:
            raise CodecError("vocoder_unavailable", "tensorrt: cannot create an execution context (GPU memory?)")
        n, dev, cfg = owner.max_batch, owner.device, owner.config
        self.codes = {t: torch.zeros(n, t, cfg.num_quantizers, dtype=torch.long, device=dev) for t in owner.packets}
        self.pcm = {
            t: torch.zeros(n, t * cfg.samples_per_frame, dtype=torch.float32, device=dev) for t in owner.packets
        }
        self.frames = torch.zeros(n, dtype=torch.long, device=dev)
        self.frames_out = torch.zeros(n, dtype=torch.long, device=dev)
        self.state = [torch.zeros((n, *s), dtype=d, device=dev) for s, d in owner.state_specs]
        self.state_out = [torch.zeros((n, *s), dtype=d, device=dev) for s, d in owner.state_specs]
        self.bound: tuple[int, int] | None = None  # (packet, rows) the context is set up for

    def _bind(self, t: int, rows: int, stream: int) -> None:
        ctx, owner = self.context, self.owner
        if self.bound is None or self.bound[0] != t:
            profile = self.index * len(owner.packets) + owner.packets.index(t)
            ctx.set_optimization_profile_async(profile, stream)  # invalidates the bindings: all again
            addresses = {
                "codes": self.codes[t],
                "frames": self.frames,
                "pcm": self.pcm[t],
                "frames_out": self.frames_out,
            }
            addresses.update(zip(owner.inputs, self.state))
            addresses.update(zip(owner.outputs, self.state_out))
            for name, tensor in addresses.items():
                ctx.set_tensor_address(name, tensor.data_ptr())
            self.bound = (t, -1)
        if self.bound[1] != rows:
            q = owner.config.num_quantizers
            ctx.set_input_shape("codes", (rows, t, q))
            ctx.set_input_shape("frames", (rows,))
            for name, (shape, _) in zip(owner.inputs, owner.state_specs):
                ctx.set_input_shape(name, (rows, *shape))
            self.bound = (t, rows)

    def run(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        b, t = codes.shape[0], codes.shape[1]
        stream = torch.cuda.current_stream(self.owner.device)
        self._bind(t, b, stream.cuda_stream)
        self.codes[t][:b].copy_(codes)
        self.frames[:b].copy_(state.frames)
        for mine, theirs in zip(self.state, state.buffers):
            mine[:b].copy_(theirs)
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise CodecError("vocoder_failed", "tensorrt: execute_async_v3 failed")
        state.frames.copy_(self.frames_out[:b])
        for theirs, new in zip(state.buffers, self.state_out):
            theirs.copy_(new[:b])
        return self.pcm[t][:b].clone()


class TensorRTVocoder(Vocoder):
    kind = "tensorrt"

    def __init__(
        self,
        onnx_path: str | os.PathLike,
        device: str | torch.device = "cuda",
        max_batch: int = 64,
        packets: Sequence[int] = (1, 2, 4),
        cache_dir: str | os.PathLike | None = None,
        contexts: int = 2,
    ):
        try:
            import tensorrt as trt
        except Exception as exc:
            raise CodecError("vocoder_unavailable", f"tensorrt is not importable here ({exc})") from exc
        meta = read_metadata(onnx_path)
        specs = [(shape, _TORCH[dtype]) for shape, dtype in meta["state"]]
        device = torch.device(device)
        if device.type != "cuda":
            raise CodecError("vocoder_unavailable", "tensorrt needs a CUDA device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(meta["config"], device, specs, max_batch, packets)
        if self.max_batch > meta["max_batch"]:
            log.warning("vocoder: max_batch %d exceeds the export's %d", self.max_batch, meta["max_batch"])
        self.trt = trt
        self.precision = meta["precision"]
        self.contexts = int(contexts)
        self.inputs, self.outputs = state_names(len(specs))
        self.logger = trt.Logger(trt.Logger.WARNING)
        sha = file_sha256(onnx_path)
        folder = (Path(cache_dir) if cache_dir else default_cache_dir()) / "trt"
        folder.mkdir(parents=True, exist_ok=True)
        self.plan_path = folder / engine_cache_key(
            torch.cuda.get_device_name(device), trt.__version__, sha, self.max_batch, self.packets, self.contexts
        )
        with torch.cuda.device(device):
            plan = self._load_or_build(Path(onnx_path))
            self.engine = trt.Runtime(self.logger).deserialize_cuda_engine(plan)
        if self.engine is None:
            raise CodecError(
                "vocoder_unavailable", f"tensorrt: cannot deserialize {self.plan_path} (delete it to rebuild)"
            )
        self._local = threading.local()
        self._lock = threading.Lock()
        self._made = 0

    @property
    def name(self) -> str:
        return f"tensorrt-{self.precision}"

    def describe(self) -> dict:
        return {
            **super().describe(),
            "plan": str(self.plan_path),
            "tensorrt": self.trt.__version__,
            "contexts": self.contexts,
            "precision": self.precision,
        }

    def _load_or_build(self, onnx_path: Path) -> bytes:
        if self.plan_path.is_file():
            log.info("vocoder: TensorRT engine from cache %s", self.plan_path)
            return self.plan_path.read_bytes()
        trt = self.trt
        log.info("vocoder: building a TensorRT engine from %s (minutes; cached in %s)", onnx_path, self.plan_path)
        builder = trt.Builder(self.logger)
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise CodecError("vocoder_unavailable", f"tensorrt cannot parse {onnx_path}: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
        q = self.config.num_quantizers
        opt = max(1, min(self.max_batch, 64))
        for _ in range(self.contexts):
            for t in self.packets:
                profile = builder.create_optimization_profile()
                profile.set_shape("codes", (1, t, q), (opt, t, q), (self.max_batch, t, q))
                profile.set_shape("frames", (1,), (opt,), (self.max_batch,))
                for name, (shape, _) in zip(self.inputs, self.state_specs):
                    profile.set_shape(name, (1, *shape), (opt, *shape), (self.max_batch, *shape))
                config.add_optimization_profile(profile)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise CodecError(
                "vocoder_unavailable", f"tensorrt could not build an engine from {onnx_path} (see its log)"
            )
        data = bytes(plan)
        tmp = self.plan_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, self.plan_path)
        return data

    def _context(self) -> _Context:
        ctx = getattr(self._local, "context", None)
        if ctx is None:
            with self._lock:
                if self._made >= self.contexts:
                    raise CodecError(
                        "vocoder_failed",
                        f"tensorrt: more than {self.contexts} threads call the vocoder "
                        "(each needs its own execution context; raise contexts)",
                    )
                index, self._made = self._made, self._made + 1
            ctx = self._local.context = _Context(self, index)
        return ctx

    def _step(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        ctx = self._context()
        parts, start = [], 0
        for t in split_packet(codes.shape[1], self.packets):
            parts.append(ctx.run(codes[:, start : start + t], state))
            start += t
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
