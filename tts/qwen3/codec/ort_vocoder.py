"""The ONNX Runtime vocoder backend: the exported streaming step (`onnx_export`) on CPU or CUDA.

CPU: inputs go in as NumPy views of the state tensors (no copy), outputs are
copied back into the state's own storage. CUDA: IO binding on device
pointers, so the state never leaves the GPU: inputs bind the caller's state
tensors, outputs bind scratch tensors of max_batch rows (a call uses their
first B rows: same addresses, only the shapes change), then one device copy
writes the new state back. ONNX Runtime runs on a stream of its own that is
ordered after, and before, the caller's current torch stream.

The session is refused when the CUDA provider did not load (`require_provider`): onnxruntime falls
back to CPU quietly (an onnxruntime-gpu built for another CUDA than torch's), and IO binding on
device pointers would then fail at the first decode, in traffic. cuDNN's convolution algorithms are
picked by heuristic, not by the provider's default exhaustive search, which runs again for every new
batch size (in traffic: the vocoder's batch follows the streams due).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from tts.qwen3.codec.config import CodecError
from tts.qwen3.codec.onnx_export import read_metadata, state_names
from tts.qwen3.codec.state import StreamingCodecState
from tts.qwen3.codec.vocoder_base import Vocoder

_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64}


def require_provider(session, provider: str) -> None:
    """Refuse a session that does not run on `provider` (it loaded another one instead)."""
    got = session.get_providers()
    if provider not in got:
        raise CodecError(
            "vocoder_unavailable",
            f"onnxruntime: {provider} did not load (the session runs on {got}; "
            f"an onnxruntime-gpu built for another CUDA than torch's {torch.version.cuda}?)",
        )


class OnnxRuntimeVocoder(Vocoder):
    kind = "onnxruntime"

    def __init__(
        self,
        onnx_path: str | os.PathLike,
        device: str | torch.device = "cpu",
        max_batch: int = 64,
        packets: Sequence[int] = (1, 2, 4),
        threads: int | None = None,
    ):
        import onnxruntime as ort

        meta = read_metadata(onnx_path)
        specs = [(shape, _TORCH[dtype]) for shape, dtype in meta["state"]]
        super().__init__(meta["config"], torch.device(device), specs, max_batch, packets)
        if meta["precision"] == "bf16":
            raise CodecError("vocoder_unavailable", "onnxruntime: bf16 exports are for TensorRT; export fp32 or fp16")
        self.path = Path(onnx_path)
        self.precision = meta["precision"]
        self._ins, self._outs = state_names(len(specs))
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads or torch.get_num_threads()
        opts.log_severity_level = 3  # errors only: the export's shape-inference notes are noise
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.device = torch.device("cuda", index)
            self._stream = torch.cuda.Stream(self.device)
            provider = (
                "CUDAExecutionProvider",
                {
                    "device_id": index,
                    "user_compute_stream": str(self._stream.cuda_stream),
                    "cudnn_conv_algo_search": "HEURISTIC",
                },
            )
            self._session = ort.InferenceSession(str(onnx_path), opts, providers=[provider])
            require_provider(self._session, "CUDAExecutionProvider")
            self._scratch = [
                torch.empty((self.max_batch, *shape), dtype=dtype, device=self.device) for shape, dtype in specs
            ]
            self._frames_out = torch.empty(self.max_batch, dtype=torch.long, device=self.device)
        else:
            self._session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self.providers = self._session.get_providers()

    @property
    def name(self) -> str:
        return f"onnxruntime-{self.device.type}" + ("" if self.precision == "fp32" else f"-{self.precision}")

    def describe(self) -> dict:
        return {**super().describe(), "onnx": str(self.path), "providers": self.providers, "precision": self.precision}

    def _step(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        if self.device.type == "cuda":
            return self._step_cuda(codes, state)
        feeds = {"codes": codes.contiguous().numpy(), "frames": state.frames.contiguous().numpy()}
        feeds.update({name: buf.contiguous().numpy() for name, buf in zip(self._ins, state.buffers)})
        pcm, frames, *new = self._session.run(None, feeds)
        state.frames.copy_(torch.from_numpy(frames))
        for buf, value in zip(state.buffers, new):
            buf.copy_(torch.from_numpy(value))
        return torch.from_numpy(pcm)

    def _step_cuda(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        b, t, _ = codes.shape
        index = self.device.index
        binding = self._session.io_binding()

        def bind_in(name: str, tensor: torch.Tensor) -> torch.Tensor:
            tensor = tensor.contiguous()
            binding.bind_input(name, "cuda", index, _NUMPY[tensor.dtype], tuple(tensor.shape), tensor.data_ptr())
            return tensor  # kept alive until the run ends

        def bind_out(name: str, tensor: torch.Tensor) -> None:
            binding.bind_output(name, "cuda", index, _NUMPY[tensor.dtype], tuple(tensor.shape), tensor.data_ptr())

        pcm = torch.empty(b, t * self.config.samples_per_frame, dtype=torch.float32, device=self.device)
        keep = [bind_in("codes", codes), bind_in("frames", state.frames)]
        keep += [bind_in(name, buf) for name, buf in zip(self._ins, state.buffers)]
        bind_out("pcm", pcm)
        bind_out("frames_out", self._frames_out[:b])
        for name, buf in zip(self._outs, self._scratch):
            bind_out(name, buf[:b])
        caller = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(caller)  # inputs written on the caller's stream
        self._session.run_with_iobinding(binding)
        caller.wait_stream(self._stream)
        state.frames.copy_(self._frames_out[:b])
        for buf, new in zip(state.buffers, self._scratch):
            buf.copy_(new[:b])
        del keep
        return pcm
