"""The talker's decode attention, laid out for a fused kernel; which SDPA kernel runs, chosen by
measurement, pinned, and observed.

Layout (`decode_attention`). The talker has 16 query heads on 8 KV heads and a per-row live length
(a boolean mask over cache columns). On CUDA, flash attention refuses an explicit mask and the
memory-efficient kernel refuses grouped-query attention (`enable_gqa`), so the plain GQA call falls to
cuDNN or MATH (which expands K/V and upcasts). Here the query heads that share a KV head become that
head's query rows: q [B, Hq, T, D] -> [B, Hk, (Hq/Hk)*T, D], one mask row per query row. The call is
then plain multi-head attention with a mask, which the memory-efficient kernel (and cuDNN) take at
bf16; each K/V column is read once for both query heads, and the cache keeps its [B, Hk, L, D] size
(gpt-fast's repeat-at-write doubles the cache and the bytes read per step; FlexAttention needs
torch.compile). Same sums per output element as the GQA call: tests/qwen3/test_attention.py.

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
def pinned_sdpa(name: str | tuple[str, ...] | None):
    """Run the block with one SDPA backend, or only those of a tuple (None: torch's choice)."""
    if name is None:
        with nullcontext():
            yield
        return
    from torch.nn.attention import sdpa_kernel

    names = (name,) if isinstance(name, str) else name
    with sdpa_kernel([_backend(n) for n in names if _backend(n) is not None]):
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


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [B, Hq, T, D], keys/values [B, Hk, L, D], mask [B, 1, T, L] (bool, True: attend) -> [B, Hq, T, D].

    Query head h reads KV head h // (Hq/Hk), as `enable_gqa` (and the reference's repeat_kv) has it."""
    b, hq, t, d = q.shape
    hk, length = keys.shape[1], keys.shape[2]
    group = hq // hk
    if group == 1:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    rows = q.reshape(b, hk, group * t, d)  # row j*T + i of KV head k: query head k*G + j at position i
    rows_mask = mask.expand(b, 1, group, length) if t == 1 else mask.repeat(1, 1, group, 1)
    out = F.scaled_dot_product_attention(rows, keys, values, attn_mask=rows_mask)
    return out.reshape(b, hq, t, d)  # fused CUDA kernels return [B, M, H, K] storage: a view would raise


def prefill_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask=None) -> torch.Tensor:
    """A prefill: q [B, Hq, T, D] at positions 0..T-1 over keys/values [B, Hk, T, D] -> [B, Hq, T, D].

    Causal without a mask (right padding only writes columns past a prompt's end, which decoding overwrites
    before reading them): flash attention takes it with grouped-query heads at bf16, where a mask would
    leave the memory-efficient kernel (which builds no plan) or cuDNN (a plan per new shape in traffic)."""
    return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=q.shape[1] != keys.shape[1])


# What the batch pins its prefill to on CUDA: cuDNN left out (a plan per new (rows, length) shape, hundreds of
# ms each in traffic), so flash, first in torch's order, takes it. Not flash alone: `sdpa_kernel` flags are
# process-wide, and the vocoder lane's masked attention may run during a prefill; flash would refuse it.
PREFILL_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def prefill_backend(shape, dtype, device) -> tuple[tuple[str, ...] | None, str]:
    """The backends to pin the talker's prefill to on `device` -> (names or None: torch's choice, why).
    Flash is tried alone on a small call of the talker's head layout; only a refusal (`refused`) leaves
    torch's choice; any other error propagates."""
    if torch.device(device).type != "cuda":
        return None, "CPU: torch's own kernels"
    g = torch.Generator(device="cpu").manual_seed(2)
    q = torch.randn(1, shape.num_attention_heads, 16, shape.head_dim, generator=g).to(device, dtype)
    k, v = (torch.randn(1, shape.num_key_value_heads, 16, shape.head_dim, generator=g).to(device, dtype) for _ in "kv")
    try:
        with pinned_sdpa(PREFILL_BACKENDS[0]):
            prefill_attention(q, k, v)
    except RuntimeError as e:
        if not refused(e):
            raise
        return None, f"{PREFILL_BACKENDS[0]} refuses the prefill ({first_line(e)}): torch's choice"
    return PREFILL_BACKENDS, "causal, no mask: flash"


def refused(e: BaseException) -> bool:
    """An SDPA backend's refusal of a call, not a bug in the call: CUDA's "No available kernel", or the CPU's
    "No viable backend" when the pinned backends are none it has."""
    return isinstance(e, RuntimeError) and ("No available kernel" in str(e) or "No viable backend" in str(e))


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:200]


# the aten op each SDPA backend runs as (what the profiler names), and marks of their CUDA kernels
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
    "aten::_scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
    "aten::_scaled_dot_product_attention_math": "MATH",
    "aten::_scaled_dot_product_fused_attention_overrideable": "OVERRIDEABLE",
}
KERNEL_MARKS = (
    ("cudnn", "CUDNN_ATTENTION"),
    ("fmha", "EFFICIENT_ATTENTION"),
    ("memeff", "EFFICIENT_ATTENTION"),
    ("flash", "FLASH_ATTENTION"),
)


def _attention_kernel(name: str) -> bool:
    low = name.lower()
    return "attention" in low or any(mark in low for mark, _ in KERNEL_MARKS)


def kernels_that_ran(fn) -> dict:
    """Run `fn` under the profiler -> which SDPA backend(s) ran: {"backends": [...] (from the aten ops),
    "kernels": [CUDA kernel names that look like attention], "kernel_backends": [...], "math": bool}.
    Eager calls only (a graph replay dispatches no aten op). Under the CUDA-semantics stand-in
    (tts.qwen3.cuda_semantics.CudaSdpa, on CPU) the kernels it says CUDA would have taken."""
    from torch.profiler import ProfilerActivity, profile

    standin = getattr(F.scaled_dot_product_attention, "calls", None)
    if standin is not None:
        before = dict(standin)
        fn()
        took = sorted({kernel for key, n in standin.items() if n > before.get(key, 0) for kernel in [key[1]]})
        return {"backends": took, "kernels": [], "kernel_backends": took, "math": "MATH" in took}

    cuda = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    events = list(prof.events())
    backends = sorted({SDPA_OPS[e.name] for e in events if e.name in SDPA_OPS})
    kernels = sorted(
        {e.name for e in events if getattr(e.device_type, "name", "") == "CUDA" and _attention_kernel(e.name)}
    )
    kernel_backends = sorted({next((b for m, b in KERNEL_MARKS if m in k.lower()), "?") for k in kernels})
    return {
        "backends": backends,
        "kernels": [k[:160] for k in kernels],
        "kernel_backends": kernel_backends,
        "math": "MATH" in backends,
    }


def time_backend(
    name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, repeats: int = 20
) -> float | None:
    """Mean seconds per call of one backend on these inputs, or None when it refuses them ("No available
    kernel"). Any other error is a bug in the call, not a refusal: it propagates."""
    if _backend(name) is None:
        return None
    try:
        with pinned_sdpa(name):
            for _ in range(3):  # warm-up: plan builds and autotuning are not what we pick on
                decode_attention(q, k, v, mask)
            if q.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(repeats):
                decode_attention(q, k, v, mask)
            if q.device.type == "cuda":
                torch.cuda.synchronize()
            return (time.perf_counter() - t0) / repeats
    except RuntimeError as e:
        if refused(e):  # "No available kernel" for this shape / dtype / mask
            return None
        raise


def decode_inputs(
    batch: int,
    kv_len: int,
    n_heads: int,
    n_kv: int,
    head_dim: int,
    dtype,
    device,
    cache: tuple[torch.Tensor, torch.Tensor] | None = None,
):
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


def choose(
    shape, batches, kv_lens, dtype, device, repeats: int = 20, cache=None, deadline: float | None = None
) -> tuple[dict, dict]:
    """For each (batch, kv_len): the fastest backend that runs `decode_attention` on the shapes of `shape`
    (a DecoderShape). Returns ({(b, L): name}, {(b, L): {name: ms, None (refused) or "error: ..."}}): an
    error that is not a refusal is not read as "kernel unusable"; it is named. CPU: empty (torch's own).

    `cache`: the (k, v) cache tensors of one talker layer, whose views are timed (default: a pair
    allocated here, [max batch, Hk, max kv_len, D]). `deadline` (time.monotonic()): shapes not timed by
    then keep torch's choice (picked None, timings {"skipped": ...})."""
    if torch.device(device).type != "cuda":
        return {}, {}
    if cache is None:  # drawn on the device: at 384 x 1024 positions a host draw and copy take seconds
        g = torch.Generator(device=device).manual_seed(1)
        cache = tuple(
            torch.randn(
                max(batches),
                shape.num_key_value_heads,
                max(kv_lens),
                shape.head_dim,
                generator=g,
                device=device,
                dtype=dtype,
            )
            for _ in range(2)
        )
    picked, timings = {}, {}
    for b in batches:
        for kv_len in kv_lens:
            if deadline is not None and time.monotonic() > deadline:
                picked[(b, kv_len)], timings[(b, kv_len)] = None, {"skipped": "time budget spent"}
                continue
            q, k, v, mask = decode_inputs(
                b, kv_len, shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim, dtype, device, cache
            )
            ms = {}
            for name in BACKEND_NAMES:
                try:
                    t = time_backend(name, q, k, v, mask, repeats)
                except RuntimeError as e:  # not a refusal: a bug in the call, named in the table
                    ms[name] = f"error: {first_line(e)}"
                    continue
                ms[name] = None if t is None else round(t * 1e3, 4)
            runnable = {n: t for n, t in ms.items() if isinstance(t, float)}
            picked[(b, kv_len)] = min(runnable, key=runnable.get) if runnable else None
            timings[(b, kv_len)] = ms
    return picked, timings
