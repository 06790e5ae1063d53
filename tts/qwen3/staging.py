"""Per-row host values (slots, lengths, sampling settings) sent to the device in one transfer.

Writing a Python scalar into one element of a CUDA tensor is a synchronising host->device copy each
time (the scalar travels as a CPU 0-dim tensor), and `torch.tensor(list, device=cuda)` copies from
pageable memory. Admission gathers every value it writes here instead, in a pinned host tensor
(float64: exact for the slots, lengths and token ids it carries), copies it once with
`non_blocking=True`, and scatters it on the device. The caching host allocator keeps the pinned block
until that copy has finished, so a fresh host tensor per batch of values is safe to let go. A request's
other host values (token ids, codes, row indices) go the same way (`to_device`). The host tensors are
named as host buffers, so the CUDA-semantics harness counts each send (tts.qwen3.cuda_semantics).
"""

from __future__ import annotations

import torch

from tts.qwen3.transfers import host_buffer


class Staged:
    """Values added in pieces on the host, then one device vector; each piece is read back by its slice."""

    def __init__(self):
        self._values: list[float] = []

    def add(self, values) -> slice:
        start = len(self._values)
        self._values.extend(float(v) for v in values)
        return slice(start, len(self._values))

    def send(self, device) -> torch.Tensor:
        """One non-blocking copy of everything added (pinned on CUDA) -> a float64 vector on `device`."""
        device = torch.device(device)
        host = host_buffer(torch.tensor(self._values, dtype=torch.float64, pin_memory=device.type == "cuda"))
        return host.to(device, non_blocking=True, copy=True)  # copy: on CPU too, device values are not the host's


def to_device(values, device, dtype=torch.float64) -> torch.Tensor:
    """Host values (a list, nested lists or an array) as a `dtype` tensor on `device`, in one non-blocking
    copy from pinned memory (token ids, codes, row indices: what a request sends)."""
    device = torch.device(device)
    host = torch.as_tensor(values, dtype=dtype)
    if device.type == "cuda":
        host = host.pin_memory()
    return host_buffer(host).to(device, non_blocking=True, copy=True)
