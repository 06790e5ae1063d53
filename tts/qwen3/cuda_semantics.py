"""What a CUDA run does that a CPU run does not, made to happen on CPU (tests, `gpu_check --smoke
--cuda-semantics`, `voxgate bench --cuda-semantics`).

A CPU run hides three things that break the engine's first GPU run:

* SDPA's layout and refusals (`CudaSdpa`). Flash, memory-efficient and cuDNN attention allocate
  their output as [B, M, H, K] and hand it back transposed to [B, H, M, K]: the same values with
  other strides, so a `.view` that merges heads and positions raises on CUDA and works on CPU. Each
  fused kernel also refuses some calls (flash: an explicit mask, fp32, a causal call with fewer
  query rows than keys; memory-efficient: grouped-query heads; cuDNN: fp32, grouped-query heads).
  `CudaSdpa` replaces `F.scaled_dot_product_attention`: it works out which CUDA kernels could take
  each call (and which the pinned backends, `sdpa_kernel`, allow), raises "No available kernel" as
  CUDA does when none may, and answers in that kernel's layout. Every call is tallied by call site
  and kernel, so a test can require that a site never falls to MATH.
* Host<->device traffic (`Transfers`): the calls that copy between host and device on a GPU
  (`tts.qwen3.transfers.HostDeviceCalls`), counted on every thread of the engine that runs its
  sync watch (the worker and the vocoder lane), plus the planned copies: staged sends
  (`.to(device, non_blocking=True)`) and the step's copy into its pinned buffer.
* CUDA graph capture (`cuda_graphs_on_cpu`): `torch.cuda.CUDAGraph`, `graph`, streams and events
  are replaced by stand-ins, so the engine's real capture code runs. The stand-in graph records
  the aten ops of the captured block and replays them on the same tensors (what a CUDA graph
  does: Python values are frozen at capture), and it records what a capture forbids: an op that
  waits for a device value, a host<->device copy or host read, and, at each replay, a tensor
  the graph reads whose owner now holds another tensor (on CUDA the graph reads the old address).

These are models of CUDA's rules (PyTorch's `sdp_utils` constraints for sm80/sm90, the CUDA graph
rules), written from their documented behaviour; a GPU run remains the final word.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from tts.qwen3 import syncs
from tts.qwen3.transfers import HostDeviceCalls, _where

FLASH, EFFICIENT, CUDNN, MATH = "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"
PRIORITY = (FLASH, EFFICIENT, MATH, CUDNN)  # torch's order when nothing is pinned (cuDNN last since 2.5.1)
HALF = (torch.float16, torch.bfloat16)


def refusals(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False, dtype=None) -> dict[str, str | None]:
    """For each CUDA kernel: why it would refuse this call (None: it takes it). `dtype`: judge as if the
    tensors had this dtype (a float32 CPU run standing for the GPU's bfloat16)."""
    dtype = dtype or q.dtype
    d, hq, hk = q.shape[-1], q.shape[-3], k.shape[-3]
    gqa = enable_gqa and hq != hk
    strided = any(t.stride(-1) != 1 for t in (q, k, v))
    out = {}
    why = []
    if dtype not in HALF:
        why.append(f"dtype {dtype}")
    if attn_mask is not None:
        why.append("an explicit mask")
    if is_causal and q.shape[-2] != k.shape[-2]:
        why.append("causal with fewer query rows than keys")
    if d % 8 or d > 256:
        why.append(f"head dim {d}")
    if strided:
        why.append("a last dimension that is not contiguous")
    out[FLASH] = "; ".join(why) or None
    why = []
    if dtype not in (*HALF, torch.float32):
        why.append(f"dtype {dtype}")
    if gqa:
        why.append("grouped-query heads (enable_gqa)")
    if d % (8 if dtype in HALF else 4):
        why.append(f"head dim {d}")
    if strided:
        why.append("a last dimension that is not contiguous")
    out[EFFICIENT] = "; ".join(why) or None
    why = []
    if dtype not in HALF:
        why.append(f"dtype {dtype}")
    if gqa:
        why.append("grouped-query heads (enable_gqa)")
    if d % 8 or d > 128:
        why.append(f"head dim {d}")
    if strided:
        why.append("a last dimension that is not contiguous")
    out[CUDNN] = "; ".join(why) or None
    out[MATH] = None
    return out


def _enabled() -> set[str]:
    b = torch.backends.cuda
    on = {FLASH: b.flash_sdp_enabled(), EFFICIENT: b.mem_efficient_sdp_enabled()}
    on.update({CUDNN: b.cudnn_sdp_enabled(), MATH: b.math_sdp_enabled()})
    return {name for name, yes in on.items() if yes}


def _site(depth: int = 2) -> str:
    """file:function of the caller's caller (cheap: no traceback)."""
    f = sys._getframe(depth)
    return f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_code.co_name}"


class CudaSdpa:
    """`F.scaled_dot_product_attention` as CUDA answers it (see the module's docstring). `calls`:
    Counter of (call site, kernel taken, fused kernels that could take it)."""

    def __init__(self, dtype: torch.dtype | None = None):
        self.dtype = dtype
        self.calls: Counter = Counter()
        self.refused: list[str] = []
        self._real = None
        self._lock = threading.Lock()

    def install(self) -> "CudaSdpa":
        self._real = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = self
        return self

    def uninstall(self) -> None:
        F.scaled_dot_product_attention = self._real

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()

    def __call__(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        verdict = refusals(q, k, v, attn_mask, is_causal, enable_gqa, self.dtype)
        allowed = _enabled()
        takers = [n for n in PRIORITY if n in allowed and verdict[n] is None]
        fused = tuple(n for n in (FLASH, EFFICIENT, CUDNN) if verdict[n] is None)
        site = _site()
        if not takers:
            msg = f"No available kernel (CUDA semantics) at {site}: " + "; ".join(
                f"{n}: {'disabled' if n not in allowed else verdict[n]}" for n in PRIORITY
            )
            with self._lock:
                self.refused.append(msg)
            raise RuntimeError(msg)
        kernel = takers[0]
        with self._lock:
            self.calls[(site, kernel, fused)] += 1
        # the values, by the math kernel straight (not through `sdpa_kernel`: its flags are process-wide, and
        # another thread's call in between would see them)
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # as F.sdpa converts it before any kernel
            attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(~attn_mask, float("-inf"))
        out, _ = torch.ops.aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )
        if kernel != MATH:  # fused kernels: [B, M, H, K] storage, returned as [B, H, M, K]
            out = out.transpose(-2, -3).contiguous().transpose(-2, -3)
        return out

    def sites(self) -> dict[str, Counter]:
        """{call site: Counter(kernel -> calls)}."""
        by: dict[str, Counter] = {}
        for (site, kernel, _), n in self.calls.items():
            by.setdefault(site, Counter())[kernel] += n
        return by

    def math_only(self) -> list[str]:
        """Call sites with a call no fused kernel could take."""
        return sorted({site for (site, _, fused), _ in self.calls.items() if not fused})

    def summary(self) -> dict:
        return {
            "sites": {s: dict(c) for s, c in sorted(self.sites().items())},
            "math_only": self.math_only(),
            "refused": self.refused[:20],
        }


# ------------------------------------------------------------------ host<->device traffic
class Transfers:
    """Host<->device traffic of the engine's threads: entered wherever the engine enters its sync watch
    (`syncs.watching`, so set `watch_syncs`), and on the calling thread by `count()`. `hits`: calls
    that would copy synchronously or read a device value on a GPU; `sent`: staged non-blocking copies
    to the device; `planned`: copies into named pinned host buffers (the step's results)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.hits: list[str] = []
        self.sent = 0
        self.sent_from: Counter = Counter()  # sends by file ("qwen3/prompt.py")
        self.planned = 0
        self._real_watching = None

    def _mode(self) -> "_SharedCalls":
        return _SharedCalls(self)

    @contextmanager
    def count(self):
        """Count this thread's calls in the block."""
        with self._mode():
            yield self

    def install(self) -> "Transfers":
        self._real_watching = real = syncs.watching

        @contextmanager
        def watching(tally):
            with real(tally) as w, self._mode() if tally is not None else ExitStack():
                yield w

        syncs.watching = watching
        return self

    def uninstall(self) -> None:
        syncs.watching = self._real_watching

    def take(self) -> tuple[list[str], Counter, int]:
        """(hits, sends by file, planned) so far, and start again from zero."""
        with self._lock:
            out = (self.hits, self.sent_from, self.planned)
            self.hits, self.sent, self.sent_from, self.planned = [], 0, Counter(), 0
        return out


class _SharedCalls(HostDeviceCalls):
    def __init__(self, into: Transfers):
        super().__init__()
        self._into = into

    def _host_side(self, t) -> bool:
        from tts.qwen3.transfers import is_host_buffer

        return isinstance(t, torch.Tensor) and is_host_buffer(t)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        before, planned = len(self.hits), self.planned
        out = super().__torch_function__(func, types, args, kwargs)
        sent = func is torch.Tensor.to and kwargs.get("non_blocking", False) and self._host_side(args[0])
        where = _where().rsplit(":", 1)[0] if sent else None
        with self._into._lock:
            self._into.hits.extend(self.hits[before:])
            self._into.planned += self.planned - planned
            if sent:
                self._into.sent += 1
                self._into.sent_from[where] += 1
        del self.hits[before:]
        return out


# ------------------------------------------------------------------ CUDA graphs
@dataclass
class _Op:
    func: object
    args: tuple
    kwargs: dict
    out: object
    fresh: bool  # a new tensor (copied into `out` at replay), not a view or an in-place result


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: "GraphStandIn"):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.graph.trace.append(_Op(func, args, kwargs, out, _fresh(func, args, kwargs, out)))
        return out


def _fresh(func, args, kwargs, out) -> bool:
    """Whether `out` is new memory (to be refilled at replay). In-place ops write their argument; a view
    shares its input's storage; `reshape` / `contiguous` are views only when they can be, so the storage says."""
    if any(r.alias_info is not None and r.alias_info.is_write for r in func._schema.returns):
        return False
    inputs = {
        t.untyped_storage().data_ptr()
        for t in (*args, *kwargs.values())
        if isinstance(t, torch.Tensor) and t.device.type != "meta"
    }
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return not any(isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in inputs for o in outs)


_capturing: list = []  # the stand-in graphs capturing now (a wait inside a capture is forbidden on CUDA)


def _no_wait_in_capture(what: str) -> None:
    if _capturing:
        _capturing[-1].forbidden.append(f"capture: {what}")


@dataclass
class GraphStandIn:
    """Stands for torch.cuda.CUDAGraph on CPU: the captured block's ops, replayed on the same tensors."""

    trace: list = field(default_factory=list)
    forbidden: list = field(default_factory=list)
    replays: int = 0
    addresses: dict = field(default_factory=dict)  # tensors by name -> address at capture
    addresses_now: object = None  # a callable -> the same names' addresses now (cuda_graphs_on_cpu's `addresses`)

    def replay(self) -> None:
        if self.addresses_now is not None:
            now = self.addresses_now()
            for name, ptr in self.addresses.items():
                if name in now and now[name] != ptr:
                    self.forbidden.append(f"replay: {name} moved since capture (the graph reads its old address)")
        self.replays += 1
        with _disable_current_modes(), torch.inference_mode():  # a replay dispatches no op on CUDA
            for op in self.trace:
                res = op.func(*op.args, **op.kwargs)
                if op.fresh and not _copy_into(op.out, res):
                    self.forbidden.append(f"replay: {op.func} gave another shape than at capture (data-dependent)")


def _copy_into(dst, src) -> bool:
    """Refill a fresh output of the trace with this replay's values; False when the shapes differ."""
    if isinstance(dst, torch.Tensor):
        if dst.shape != src.shape:
            return False
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        return all([_copy_into(d, s) for d, s in zip(dst, src)])
    return True


class _Stream:
    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def synchronize(self) -> None:
        _no_wait_in_capture("stream.synchronize()")


class _Event:
    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        _no_wait_in_capture("event.synchronize()")

    def query(self) -> bool:
        return True


@dataclass
class GraphReport:
    graphs: list = field(default_factory=list)

    @property
    def forbidden(self) -> list[str]:
        return [f for g in self.graphs for f in g.forbidden]


def tensor_addresses(*owners) -> dict[str, int]:
    """{owner.attr: data_ptr} of every tensor attribute of `owners` (one level, and nn.Module buffers)."""
    out = {}
    for i, o in enumerate(owners):
        items = dict(o.named_buffers()) if isinstance(o, torch.nn.Module) else vars(o)
        for name, t in items.items():
            if isinstance(t, torch.Tensor):
                out[f"{type(o).__name__}[{i}].{name}"] = t.data_ptr()
    return out


@contextmanager
def cuda_graphs_on_cpu(addresses=None):
    """Replace torch.cuda's graph, stream and event API with CPU stand-ins for the block. `addresses`:
    a callable -> {name: data_ptr} of the tensors a graph may read (checked at each replay). Yields a
    GraphReport of every graph captured."""
    report = GraphReport()
    cuda = torch.cuda
    names = ("CUDAGraph", "graph", "graph_pool_handle", "Stream", "current_stream", "stream", "Event", "synchronize")
    saved = {n: getattr(cuda, n) for n in names}

    @contextmanager
    def graph(g, pool=None, stream=None, capture_error_mode=None):
        tally, calls = syncs.SyncTally(), HostDeviceCalls()
        if addresses is not None:
            g.addresses_now, g.addresses = addresses, addresses()
        _capturing.append(g)
        try:
            with calls, syncs.HostSyncWatch(tally), _Recorder(g):
                yield
        finally:
            _capturing.pop()
        g.forbidden.extend(f"capture: {h}" for h in tally.hits + calls.hits)
        report.graphs.append(g)

    main = _Stream()
    cuda.CUDAGraph = GraphStandIn
    cuda.graph = graph
    cuda.graph_pool_handle = lambda: ("pool",)
    cuda.Stream = lambda *a, **k: _Stream()
    cuda.current_stream = lambda device=None: main
    cuda.stream = lambda s: ExitStack()
    cuda.Event = lambda *a, **k: _Event()
    cuda.synchronize = lambda device=None: _no_wait_in_capture("torch.cuda.synchronize()")
    try:
        yield report
    finally:
        for n, v in saved.items():
            setattr(cuda, n, v)


def batch_addresses(batch):
    """The `addresses` callable for a TalkerBatch: its state, its sampling rows and the model's buffers."""
    return lambda: tensor_addresses(batch, batch.cb0, batch.cb0.rows, batch.pred_rows, batch.model)


@contextmanager
def cuda_semantics(dtype: torch.dtype | None = None):
    """SDPA as CUDA answers it and host<->device traffic counted, for a block (the benches' switch).
    Yields (CudaSdpa, Transfers)."""
    sdpa, moves = CudaSdpa(dtype), Transfers()
    with sdpa:
        moves.install()
        try:
            yield sdpa, moves
        finally:
            moves.uninstall()
