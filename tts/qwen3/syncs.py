"""Counting what makes the host wait for the device, by watching what actually runs.

`HostSyncWatch` is a torch dispatch mode: entered on a thread, it sees every aten op that thread
runs and counts the ones that wait for a device value —

* `.item()` / `int(t)` / `bool(t)` (`aten._local_scalar_dense`, or `aten.item` under inference mode);
* ops whose output shape depends on the data (`nonzero`, boolean-mask indexing, `unique`, ...);
* blocking copies from a device to host memory (`.cpu()`, `.numpy()` of a CUDA tensor, `copy_`
  into a CPU tensor without `non_blocking`);
* copies from host memory to a device that make the host wait: without `non_blocking` (a stream
  synchronise, what `set_sync_debug_mode` reports; a Python scalar written into one element of a
  CUDA tensor is one of these) or from pageable memory (the driver copies it synchronously);
* `index_put_` into a device tensor with values in host memory: what `t[idx] = <Python scalar>` becomes
  on CUDA (the scalar travels as a CPU 0-dim tensor, copied with a stream synchronise);

and `wait_for(event)` counts the one explicit wait of the engine's step (an event after the
non-blocking copy of the step's results). On CPU nothing really waits, but the same ops run, so
the same count comes out: it is the number of syncs that loop would make on a GPU. Ops replayed
inside a CUDA graph are not dispatched, and a graph cannot contain a sync anyway.

On CPU there is one device, so the copies in either direction are not seen here: the Python-level
`tts.qwen3.transfers.HostDeviceCalls` catches the calls that make them. On CUDA,
`cuda_sync_warnings` adds the driver's own view (`torch.cuda.set_sync_debug_mode`).
The watch costs a Python call per op: engines run it when asked (`EngineSettings.watch_syncs`),
benches on a short level of their own.
"""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNCING_OPS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "nonzero",
        "masked_select",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "repeat_interleave",
        "equal",
        "is_nonzero",
    }
)


def _is_cpu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


NOT_DEVICES = ("cpu", "meta")  # device types that are not a device (tests may count meta as one)


def _on_device(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type not in NOT_DEVICES


def _pinned(t: torch.Tensor) -> bool:
    try:
        return t.is_pinned()
    except RuntimeError:  # no accelerator in this build: nothing is pinned
        return False


class SyncTally:
    """Counts shared by the watches of several threads (the worker and its vocoder thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0
        self.hits: list[str] = []  # what was counted, for a readable failure

    def add(self, what: str) -> None:
        with self._lock:
            self.count += 1
            if len(self.hits) < 1000:
                self.hits.append(what)


class HostSyncWatch(TorchDispatchMode):
    def __init__(self, tally: SyncTally | None = None):
        super().__init__()
        self.tally = tally or SyncTally()

    @property
    def count(self) -> int:
        return self.tally.count

    @property
    def hits(self) -> list[str]:
        return self.tally.hits

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        if name in SYNCING_OPS:
            self.tally.add(str(func))
        elif (
            name in ("index", "index_put", "index_put_")
            and len(args) > 1
            and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ()))
        ):
            self.tally.add(f"{func} with a bool mask")
        elif (
            name in ("index_put", "index_put_", "_index_put_impl_")
            and len(args) > 2
            and _on_device(args[0])
            and _is_cpu(args[2])
        ):
            self.tally.add(f"{func} host->device" + (" (a scalar)" if args[2].dim() == 0 else ""))
        elif (
            name == "_to_copy"
            and args
            and _on_device(args[0])
            and str(kwargs.get("device", "")) == "cpu"
            and not kwargs.get("non_blocking", False)
        ):
            self.tally.add(f"{func} device->host")
        elif (
            name == "copy_"
            and len(args) > 1
            and _is_cpu(args[0])
            and _on_device(args[1])
            and not (kwargs.get("non_blocking", False) or (len(args) > 2 and args[2]))
        ):
            self.tally.add(f"{func} device->host")
        elif name == "copy_" and len(args) > 1 and _on_device(args[0]) and _is_cpu(args[1]):
            self._host_to_device(func, args[1], kwargs.get("non_blocking", False) or (len(args) > 2 and args[2]))
        elif (
            name == "_to_copy"
            and args
            and _is_cpu(args[0])
            and kwargs.get("device") is not None
            and torch.device(kwargs["device"]).type not in NOT_DEVICES
        ):
            self._host_to_device(func, args[0], kwargs.get("non_blocking", False))
        return func(*args, **kwargs)

    def _host_to_device(self, func, src: torch.Tensor, non_blocking: bool) -> None:
        if not non_blocking:
            self.tally.add(f"{func} host->device" + (" (a scalar)" if src.dim() == 0 else ""))
        elif not _pinned(src):
            self.tally.add(f"{func} host->device from pageable memory")


_local = threading.local()


@contextmanager
def watching(tally: SyncTally | None):
    """Enter a watch on this thread for `tally` (no-op with None); `wait_for` counts into it too."""
    if tally is None:
        yield None
        return
    prev = getattr(_local, "tally", None)
    _local.tally = tally
    try:
        with HostSyncWatch(tally) as w:
            yield w
    finally:
        _local.tally = prev


def wait_for(event) -> None:
    """The host waits for `event` (a torch.cuda.Event; None on CPU, where the result is already there).
    Counted as one sync by the watch of this thread."""
    tally = getattr(_local, "tally", None)
    if tally is not None:
        tally.add("wait_for(event)")
    if event is not None:
        event.synchronize()


@contextmanager
def cuda_sync_warnings():
    """CUDA only: count what the driver reports as synchronising (`set_sync_debug_mode('warn')`) in the
    block, from any thread. Yields a list that fills with the warning messages."""
    seen: list[str] = []
    prev_mode = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield seen
        finally:
            torch.cuda.set_sync_debug_mode(prev_mode)
            seen.extend(str(w.message) for w in caught if "synchroniz" in str(w.message).lower())
