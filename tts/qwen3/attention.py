"""Which scaled-dot-product-attention kernel runs, chosen by measurement and pinned.

Left to chance, torch picks a backend per call; on sm90 the cuDNN backend builds a plan for each
new shape (hundreds of ms), which would show up as first-audio spikes in traffic. At start the
engine times each backend on the decode shape of every (batch bucket, length bucket) it captures,
keeps the fastest that runs, and captures that bucket's graph under it. On CPU there is nothing
to choose (torch's CPU kernels), and `choose` says so.

The timing runs on inputs laid out as the step's are (q a view of the fused q/k heads, K/V strided
views of a [max_batch, H, max_len, D] cache), since a backend may take contiguous tensors and refuse
views. The pin covers the talker's decode attention only (`talker_pinned`): the code predictor's
causal calls keep torch's choice. `sdpa_kernel` sets process-wide flags; the engine pins only while
a graph captures, and a capture is exclusive of its other threads (tts.qwen3.gate).
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


@contextmanager
def talker_pinned(talker, name: str | None):
    """The talker's decode attention (tensor positions: its prefill and its step) runs under backend
    `name` inside the block; the code predictor's attention is left alone."""
    layers = [layer.self_attn for layer in talker.model.layers]
    before = [a.sdpa_backend for a in layers]
    for a in layers:
        a.sdpa_backend = name
    try:
        yield
    finally:
        for a, b in zip(layers, before):
            a.sdpa_backend = b


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


def decode_inputs(batch: int, kv_len: int, n_heads: int, n_kv: int, head_dim: int, dtype, device,
                  cache: tuple[torch.Tensor, torch.Tensor] | None = None):
    """The talker's decode-step attention as the step lays it out: q [B, Hq, 1, D] (a view of the
    fused [B, Hq+Hk, 1, D] heads), k/v [B, Hk, L, D] (views of `cache`, a (k, v) pair of
    [max_batch, Hk, max_len, D] tensors; a fresh pair of exactly this size when None) and a boolean
    mask [B, 1, 1, L] with live lengths spread over the bucket."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(batch, n_heads + n_kv, 1, head_dim, generator=g).to(device, dtype)[:, :n_heads]
    if cache is None:
        cache = tuple(torch.randn(batch, n_kv, kv_len, head_dim, generator=g).to(device, dtype) for _ in range(2))
    k, v = (c[:batch, :, :kv_len] for c in cache)
    live = torch.randint(1, kv_len + 1, (batch,), generator=g)
    mask = (torch.arange(kv_len).view(1, -1) < live.view(-1, 1)).view(batch, 1, 1, kv_len).to(device)
    return q, k, v, mask


def choose(shape, batches, kv_lens, dtype, device, repeats: int = 20, cache=None,
           deadline: float | None = None) -> tuple[dict, dict]:
    """For each (batch, kv_len): the fastest backend that runs the decode attention of `shape`
    (a DecoderShape). Returns ({(b, L): name}, {(b, L): {name: ms or None}}). CPU: empty (torch's own).

    `cache`: the (k, v) cache tensors of one talker layer, whose views are timed (default: a pair
    allocated here, [max batch, Hk, max kv_len, D]). `deadline` (time.monotonic()): shapes not timed by
    then keep torch's choice (picked None, timings {"skipped": ...})."""
    if torch.device(device).type != "cuda":
        return {}, {}
    if cache is None:
        g = torch.Generator(device="cpu").manual_seed(1)
        cache = tuple(torch.randn(max(batches), shape.num_key_value_heads, max(kv_lens), shape.head_dim,
                                  generator=g).to(device, dtype) for _ in range(2))
    picked, timings = {}, {}
    for b in batches:
        for kv_len in kv_lens:
            if deadline is not None and time.monotonic() > deadline:
                picked[(b, kv_len)], timings[(b, kv_len)] = None, {"skipped": "time budget spent"}
                continue
            q, k, v, mask = decode_inputs(b, kv_len, shape.num_attention_heads, shape.num_key_value_heads,
                                          shape.head_dim, dtype, device, cache)
            ms = {}
            for name in BACKEND_NAMES:
                t = time_backend(name, q, k, v, mask, repeats)
                ms[name] = None if t is None else round(t * 1e3, 4)
            runnable = {n: t for n, t in ms.items() if t is not None}
            picked[(b, kv_len)] = min(runnable, key=runnable.get) if runnable else None
            timings[(b, kv_len)] = ms
    return picked, timings
