"""A long clock stall says where the loop thread's time went: its own work, a block, or a wait for a CPU.

Figures are compared with each other within one run (ratios), never with a wall-clock limit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from gateway.core.clock import PlayoutClock
from gateway.core.stall_cause import LoopTimes, StallCause


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds  # this thread's CPU time: a busy loop that gets its share, however long
    while time.thread_time() < end:
        pass


class Member:
    def __init__(self, stall):
        self.stall = stall  # called once, inside a tick: what holds the loop

    async def tick(self) -> None:
        if self.stall is not None:
            stall, self.stall = self.stall, None
            stall()

    def stalled(self, ticks: int) -> None:
        pass


def _one_stall(stall) -> StallCause:
    async def main():
        clock = PlayoutClock()
        clock.start()
        clock.add(Member(stall))
        await asyncio.sleep(0.1)
        await clock.stop()
        return clock

    clock = asyncio.run(main())
    assert len(clock.stalls) == 1, list(clock.stalls)
    return clock.stalls[0][1]


def test_a_stall_of_the_loop_threads_own_work_is_counted_as_ran():
    cause = _one_stall(lambda: _spin(0.4))
    assert cause.ran_ms > cause.blocked_ms and cause.ran_ms > cause.cpu_wait_ms, cause
    assert not cause.machine


def test_a_stall_in_a_blocking_call_is_counted_as_blocked():
    cause = _one_stall(lambda: time.sleep(0.4))
    assert cause.blocked_ms > 5 * cause.ran_ms, cause
    assert not cause.machine


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="no /proc/thread-self/schedstat here")
def test_time_spent_runnable_behind_other_processes_is_counted_as_a_wait_for_a_cpu():
    """This thread and two busy processes share one CPU: of the wall time, about a third is this thread's
    and two thirds its wait for the CPU; counted as ran it would read as the gateway's own fault."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    before_affinity = os.sched_getaffinity(0)
    hogs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.monotonic() + 20\n"
                "while time.monotonic() < end: pass",
            ]
        )
        for _ in range(2)
    ]
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.3)  # the hogs are running
        times = LoopTimes()
        before = times.sample()
        _spin(0.3)
        cause = times.cause(before, times.sample())
        times.close()
    finally:
        os.sched_setaffinity(0, before_affinity)
        for h in hogs:
            h.kill()
            h.wait()
    assert cause.cpu_wait_ms > cause.ran_ms, cause
    assert cause.machine, cause


def test_the_description_names_every_part():
    cause = StallCause(ms=481, ran_ms=12, cpu_wait_ms=300, stolen_ms=160, gc_ms=3)
    assert cause.blocked_ms == 9 and cause.machine
    assert cause.describe() == (
        "the loop thread ran 12 ms, waited 300 ms for a CPU, lost 160 ms to the host, was blocked 9 ms; "
        "garbage collection took 3 ms"
    )


def test_a_garbage_collection_inside_the_stall_is_reported():
    """A full collection over a large heap is the loop thread's own work (ran), and named as such."""
    import gc

    heap = [{"n": i} for i in range(300_000)]  # tracked containers for the collector to walk

    def collect_for(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            gc.collect()

    cause = _one_stall(lambda: collect_for(0.4))
    del heap
    assert cause.gc_ms > 0.5 * cause.ran_ms and cause.ran_ms > cause.blocked_ms, cause
    assert not cause.machine
