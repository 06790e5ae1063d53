"""RMSNorm as one function, shared by the talker's modules and the code predictor's lean steps."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, times `weight` (None: no weight).

    float32 on the CPU: x * rsqrt(|x|^2 / n + eps) in five aten ops. `F.rms_norm` computes the same in ~24
    there (a composite with dtype round trips), and a decoder step is small enough on a CPU that op count
    is its cost. Elsewhere: normalise in float32, scale in the input dtype (the reference's order)."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or (weight is not None and weight.dtype != torch.float32):
        y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
        return y if weight is None else weight * y
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    y = x * torch.rsqrt(torch.addcmul(_eps_tensor(eps, x.device), norm, norm, value=1.0 / x.shape[-1]))
    return y if weight is None else y * weight


@functools.lru_cache(maxsize=None)
def _eps_tensor(eps: float, device: torch.device) -> torch.Tensor:
    """eps as a one-element float32 tensor, made once (addcmul's addend; a Python scalar there would
    be wrapped into a tensor on every call)."""
    return torch.full((1,), eps, dtype=torch.float32, device=device)
