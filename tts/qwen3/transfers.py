"""Catching host<->device traffic on CPU, by the calls that would make it on a GPU.

On CPU there is one device, so a copy that synchronises on CUDA takes another path or none at all:
assigning a Python scalar to one element of a CUDA tensor becomes a copy from a CPU 0-dim tensor
(`cudaMemcpyAsync` + a stream synchronise, forbidden while a graph is capturing), and the same line
on CPU is a plain store. Neither the dispatch-level watch (`tts.qwen3.syncs`) nor fake/meta tensors
see it. `HostDeviceCalls` watches the Python calls instead (a `TorchFunctionMode`) and records each
one that moves data between host and device on a GPU:

* `t[i, j] = 3` — a Python scalar into a single element;
* `t[idx] = 0` — a Python scalar through a tensor (or list) index: `index_put_` takes its value as a
  tensor, so the scalar becomes a CPU 0-dim tensor copied to the device with a stream synchronise
  (`index_fill_(dim, idx, 0)` passes it as a kernel argument instead; a slice `t[:, 0] = 0` is a fill);
* `torch.tensor` / `as_tensor` / `asarray` with a `device` (host data copied, synchronously, to it);
* `.item()`, `.tolist()`, `.numpy()`, `.cpu()`, `bool(t)`, `int(t)`, `float(t)`, `t.__index__()`;
* `.to(device)` / `.cuda()` without `non_blocking=True` (on CUDA the source must be pinned as well).

Host-side tensors the code reads on purpose (the pinned output buffer of the step) are named in
`host_buffers`, and copies into them are counted as `planned` instead: the engine's step makes one.
Host tensors are made without a `device` argument (`torch.tensor(rows, pin_memory=cuda)`), which is
what tells them apart here.
"""

from __future__ import annotations

import numbers
import traceback
import weakref

import torch
from torch.overrides import TorchFunctionMode

_T = torch.Tensor
_READS = {
    _T.item: "item()",
    _T.tolist: "tolist()",
    _T.numpy: "numpy()",
    _T.cpu: "cpu()",
    _T.__bool__: "bool(t)",
    _T.__int__: "int(t)",
    _T.__float__: "float(t)",
    _T.__index__: "t.__index__()",
}
_FACTORIES = {torch.tensor: "torch.tensor", torch.as_tensor: "torch.as_tensor", torch.asarray: "torch.asarray"}


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _is_scalar(v) -> bool:
    return isinstance(v, (bool, numbers.Number)) and not isinstance(v, torch.Tensor)


def _single_element(t: torch.Tensor, index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return len(parts) == t.dim() and all(isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in parts)


def _tensor_index(index) -> bool:
    """An index that makes `t[index] = v` an `index_put_` (a tensor or a list among its parts)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, (torch.Tensor, list)) for p in parts)


def _device_target(args, kwargs) -> bool:
    if kwargs.get("device") is not None:
        return True
    for a in args:
        if isinstance(a, (torch.device, torch.Tensor)):
            return True
        if isinstance(a, str):
            try:
                torch.device(a)
                return True
            except RuntimeError:
                pass
    return False


def _where() -> str:
    """The innermost frame outside torch and this module: the line that made the call."""
    for frame in reversed(traceback.extract_stack()):
        f = frame.filename
        if "/torch/" not in f and not f.endswith(("transfers.py", "cuda_semantics.py", "staging.py")):
            return f"{f.rsplit('/', 2)[-2]}/{f.rsplit('/', 1)[-1]}:{frame.lineno}"
    return "?"


class HostDeviceCalls(TorchFunctionMode):
    def __init__(self, host_buffers=()):
        super().__init__()
        self._host = {_storage(t) for t in host_buffers}
        self.hits: list[str] = []
        self.planned = 0

    def _host_side(self, t) -> bool:
        return isinstance(t, torch.Tensor) and _storage(t) in self._host

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        what = None
        if (
            func is _T.__setitem__
            and len(args) == 3
            and _is_scalar(args[2])
            and not self._host_side(args[0])
            and _single_element(args[0], args[1])
        ):
            what = f"t[{args[1]!r}] = {args[2]!r} (a scalar into one element)"
        elif (
            func is _T.__setitem__
            and len(args) == 3
            and _is_scalar(args[2])
            and not self._host_side(args[0])
            and _tensor_index(args[1])
        ):
            what = f"t[<tensor index>] = {args[2]!r} (a scalar through a tensor index: index_put_ copies it)"
        elif func in _FACTORIES and kwargs.get("device") is not None:
            what = f"{_FACTORIES[func]}(host data, device=...)"
        elif func in _READS and args and not self._host_side(args[0]):
            what = _READS[func]
        elif (
            func in (_T.to, _T.cuda)
            and not kwargs.get("non_blocking", False)
            and (func is _T.cuda or _device_target(args[1:], kwargs))
        ):
            what = f"{'.cuda()' if func is _T.cuda else '.to(device)'} without non_blocking"
        elif func is _T.copy_ and args and self._host_side(args[0]):
            self.planned += 1
        if what is not None:
            self.hits.append(f"{what} at {_where()}")
        return func(*args, **kwargs)


_host_buffers: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()


def host_buffer(t: torch.Tensor) -> torch.Tensor:
    """Name `t` as host memory the engine reads on purpose (a pinned output buffer): counters of
    host<->device traffic (tts.qwen3.cuda_semantics) count copies into it as planned, reads of it as
    none. Returns `t`."""
    _host_buffers[_storage(t)] = t
    return t


def is_host_buffer(t: torch.Tensor) -> bool:
    return _storage(t) in _host_buffers
