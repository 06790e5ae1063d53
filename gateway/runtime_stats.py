"""The process's own health for /metrics: memory, file descriptors, asyncio tasks, threads, GC pauses.

A soak (bench/soak.py) reads these every few seconds to show that nothing
grows with the calls served: after the calls end, fds and tasks are back
where they started and memory is flat. GC pauses are timed with
`gc.callbacks` (a start and a stop per collection: two clock reads), since
long full collections stall the shared clock.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
GC_THRESHOLDS_ENV = "VOXGATE_GC_THRESHOLDS"  # "g0,g1,g2": overrides GC_THRESHOLDS (for measuring)
# gen0 at 20,000 net new tracked objects instead of CPython's 700: a call's objects live seconds, so at the default
# they outlive two young collections and are promoted, and promotions are what trigger full collections (a walk of
# every call's objects: 60-180 ms at 400 calls, one per ~12 s). Measured (docs/benchmarks.md, capacity): at 400 calls no full
# and no young collection in 3 windows of 12 s, against one full one per window at the default; a young collection
# of 20,000 objects is still a few ms.
GC_THRESHOLDS = (20000, 10, 10)


def settle_gc() -> tuple[int, int, int]:
    """After start-up: collect once, freeze what is left (start-up objects never need collecting again, and
    every full collection would walk them: a pause that stalls the shared clock), set the thresholds."""
    gc.collect()
    gc.freeze()
    env = os.environ.get(GC_THRESHOLDS_ENV)
    thresholds = tuple(int(x) for x in env.split(",")) if env else GC_THRESHOLDS
    gc.set_threshold(*thresholds)
    return gc.get_threshold()


class _GcPauses:
    """Process-wide: count, total and longest pause per generation since start."""

    def __init__(self):
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        g = min(int(info.get("generation", 0)), 2)
        self.count[g] += 1
        self.seconds[g] += pause
        self.longest = max(self.longest, pause)


_pauses: _GcPauses | None = None
_pauses_lock = threading.Lock()


def gc_pauses() -> _GcPauses:
    global _pauses
    with _pauses_lock:
        if _pauses is None:
            _pauses = _GcPauses()
        return _pauses


def resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def asyncio_tasks() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # scraped from outside the loop (tests)
        return 0


class RuntimeCollector:
    def __init__(self):
        self.pauses = gc_pauses()

    def describe(self):
        return []

    def collect(self):
        yield GaugeMetricFamily(
            "voxgate_process_resident_bytes", "Resident memory of the gateway process", value=resident_bytes()
        )
        yield GaugeMetricFamily(
            "voxgate_process_open_fds", "Open file descriptors (sockets, logs, …)", value=open_fds()
        )
        yield GaugeMetricFamily(
            "voxgate_asyncio_tasks", "asyncio tasks alive on the gateway's loop", value=asyncio_tasks()
        )
        yield GaugeMetricFamily("voxgate_threads", "Threads of the gateway process", value=threading.active_count())
        count = CounterMetricFamily(
            "voxgate_gc_collections", "Garbage collections, by generation", labels=["generation"]
        )
        seconds = CounterMetricFamily(
            "voxgate_gc_pause_seconds", "Time spent inside garbage collections, by generation", labels=["generation"]
        )
        for g in range(3):
            count.add_metric([str(g)], self.pauses.count[g])
            seconds.add_metric([str(g)], self.pauses.seconds[g])
        yield count
        yield seconds
        yield GaugeMetricFamily(
            "voxgate_gc_pause_longest_seconds",
            "The longest garbage-collection pause since start",
            value=self.pauses.longest,
        )
