"""Where a stalled event-loop thread's time went: its own work, a wait for a CPU, the host, or a block.

When the shared clock wakes late by more than it can catch up, callers hear a
gap. An operator (and a test) needs to know whose fault that was:

* **ran**: the loop thread was on a CPU (a long callback, a GC pause: this process's own work);
* **waited for a CPU**: it was runnable but other threads or processes had the cores (the box is
  oversubscribed; the kernel's run delay, `/proc/thread-self/schedstat`);
* **stolen**: the hypervisor ran another guest on our virtual CPU (the `steal` column of `/proc/stat`,
  the most any one CPU lost over the window; 0 where the kernel does not report it);
* **blocked**: the rest: asleep in a blocking call, waiting on a lock or on the GIL held by another
  thread of this process.

Garbage collections inside the window are reported beside them (a collection in this thread is part of
**ran**; in another thread it holds the GIL, so it is part of **blocked**).

`LoopTimes.sample()` runs once a tick, on the loop's own thread (`/proc/thread-self` names the
thread that opened it): ~10 µs measured, two `pread`s and clock reads. `/proc/stat`'s text is kept
as read and parsed only when a stall is explained, off the 20 ms path. Where `/proc` is missing,
only `ran` is known and the rest counts as blocked.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from gateway.runtime_stats import gc_pauses

_USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Sample:
    wall: float  # monotonic seconds
    ran: float  # this thread's CPU seconds
    run_delay: float  # seconds this thread has waited runnable for a CPU, since it started
    stat: bytes  # /proc/stat as read (each CPU's steal since boot; parsed only to explain a stall)
    gc: float  # seconds of garbage collection in this process since it started


@dataclass(frozen=True)
class StallCause:
    ms: float
    ran_ms: float
    cpu_wait_ms: float
    stolen_ms: float
    gc_ms: float = 0.0

    @property
    def blocked_ms(self) -> float:
        return max(0.0, self.ms - self.ran_ms - self.cpu_wait_ms - self.stolen_ms)

    @property
    def machine(self) -> bool:
        """Mostly the box's doing (other processes, the host), not this process's: at least half the stall."""
        return self.cpu_wait_ms + self.stolen_ms >= 0.5 * self.ms

    def describe(self) -> str:
        return (
            f"the loop thread ran {self.ran_ms:.0f} ms, waited {self.cpu_wait_ms:.0f} ms for a CPU, "
            f"lost {self.stolen_ms:.0f} ms to the host, was blocked {self.blocked_ms:.0f} ms; "
            f"garbage collection took {self.gc_ms:.0f} ms"
        )


class LoopTimes:
    """Open on the event loop's thread; `sample()` there and `cause(before, after)` anywhere."""

    def __init__(self):
        self._sched = _open("/proc/thread-self/schedstat")
        self._stat = _open("/proc/stat")
        self._gc = gc_pauses()

    def sample(self) -> Sample:
        return Sample(time.monotonic(), time.thread_time(), self._run_delay(), self._read_stat(), sum(self._gc.seconds))

    @staticmethod
    def cause(before: Sample, after: Sample) -> StallCause:
        stolen = max((a - b for a, b in zip(_steal(after.stat), _steal(before.stat))), default=0.0)
        return StallCause(
            ms=1000 * (after.wall - before.wall),
            ran_ms=1000 * (after.ran - before.ran),
            cpu_wait_ms=1000 * (after.run_delay - before.run_delay),
            stolen_ms=1000 * max(0.0, stolen),
            gc_ms=1000 * (after.gc - before.gc),
        )

    def close(self) -> None:
        for fd in (self._sched, self._stat):
            if fd is not None:
                os.close(fd)
        self._sched = self._stat = None

    def _run_delay(self) -> float:
        if self._sched is None:
            return 0.0
        try:  # "<ns on a CPU> <ns waiting runnable> <timeslices>"
            return int(os.pread(self._sched, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def _read_stat(self) -> bytes:
        if self._stat is None:
            return b""
        try:
            return os.pread(self._stat, 16384, 0)
        except OSError:
            return b""


def _steal(stat: bytes) -> tuple[float, ...]:
    """Seconds stolen from each CPU since boot, from /proc/stat's cpu0, cpu1, … lines (the first line is their sum)."""
    out = []
    for line in stat.decode("ascii", "replace").splitlines()[1:]:
        if not line.startswith("cpu"):
            break
        fields = line.split()
        out.append(int(fields[8]) / _USER_HZ if len(fields) > 8 else 0.0)
    return tuple(out)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
