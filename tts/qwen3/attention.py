"""Which scaled-dot-product-attention kernel runs, chosen by measurement and pinned.

Left to chance, torch picks a backend per call; on sm90 the cuDNN backend builds a plan for each
new shape (hundreds of ms), which would show up as first-audio spikes in traffic. At start the
engine times each backend on the decode shape of every (batch bucket, length bucket) it captures,
keeps the fastest that runs, and captures that bucket's graph under it. On CPU there is nothing
to choose (torch's CPU kernels), and `choose` says so.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F

BACKEND_NAMES = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def _backend(name: str):
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, name, None)


@contextmanager
def pinned_sdpa(name: str | None):
    """Run the block with one SDPA backend (None: torch's choice)."""
    if name is None:
        with nullcontext():
            yield
        return
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([_backend(name)]):
        yield


def time_backend(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                 repeats: int = 20) -> float | None:
    """Mean seconds per call of one backend on these inputs, or None when it cannot run them."""
    if _backend(name) is None:
        return None
    gqa = q.shape[1] != k.shape[1]
    try:
        with pinned_sdpa(name):
            for _ in range(3):  # warm-up: plan builds and autotuning are not what we pick on
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
            if q.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(repeats):
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
            if q.device.type == "cuda":
                torch.cuda.synchronize()
            return (time.perf_counter() - t0) / repeats
    except RuntimeError:  # "No available kernel" for this shape / dtype / mask
        return None


def decode_inputs(batch: int, kv_len: int, n_heads: int, n_kv: int, head_dim: int, dtype, device):
    """Random tensors of the talker's decode-step attention: q [B, Hq, 1, D], k/v [B, Hk, L, D] and a
    boolean mask [B, 1, 1, L] with live lengths spread over the bucket."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(batch, n_heads, 1, head_dim, generator=g).to(device, dtype)
    k = torch.randn(batch, n_kv, kv_len, head_dim, generator=g).to(device, dtype)
    v = torch.randn(batch, n_kv, kv_len, head_dim, generator=g).to(device, dtype)
    live = torch.randint(1, kv_len + 1, (batch,), generator=g)
    mask = (torch.arange(kv_len).view(1, -1) < live.view(-1, 1)).view(batch, 1, 1, kv_len).to(device)
    return q, k, v, mask


def choose(shape, batches, kv_lens, dtype, device, repeats: int = 20) -> tuple[dict, dict]:
    """For each (batch, kv_len): the fastest backend that runs the decode attention of `shape`
    (a DecoderShape). Returns ({(b, L): name}, {(b, L): {name: ms or None}}). CPU: empty (torch's own)."""
    if torch.device(device).type != "cuda":
        return {}, {}
    picked, timings = {}, {}
    for b in batches:
        for kv_len in kv_lens:
            q, k, v, mask = decode_inputs(b, kv_len, shape.num_attention_heads, shape.num_key_value_heads,
                                          shape.head_dim, dtype, device)
            ms = {}
            for name in BACKEND_NAMES:
                t = time_backend(name, q, k, v, mask, repeats)
                ms[name] = None if t is None else round(t * 1e3, 4)
            runnable = {n: t for n, t in ms.items() if t is not None}
            picked[(b, kv_len)] = min(runnable, key=runnable.get) if runnable else None
            timings[(b, kv_len)] = ms
    return picked, timings
