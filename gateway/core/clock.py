"""The shared 20 ms playout clock: one asyncio task ticks every clock-driven session.

It keeps an absolute schedule: after a stall it catches up by ticking the
missed frames back to back (the far end's buffer absorbs the burst) instead
of restarting its schedule, so one stall does not delay the rest of every
utterance. A member whose far end has no buffer (`absorbs_bursts` False:
AudioSocket, where Asterisk writes each frame on arrival) is not ticked on
catch-up ticks: it gets at most one frame per 20 ms, its schedule shifts, and
the shift is reported to it (`stalled(ticks)`: a gap with cause `clock`). A
stall longer than `max_catchup` frames is dropped, counted, and reported to
every member the same way, with where the stalled time went
(`gateway/core/stall_cause.py`: the process's own work, a wait for a CPU,
the host, or a block), so a gap is known to be ours or the machine's.

With no member it does not tick at all: it waits for the next `add` and
starts a fresh schedule then. An idle gateway (and each idle worker of
`serve --workers N`) then costs no timer wake-up every 20 ms (~0.8 % of a
core on the VM measured, docs/benchmarks.md, capacity), and a call that starts after a
quiet spell is not "late" by the whole spell.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Callable, Protocol

from gateway.core.stall_cause import LoopTimes, StallCause

log = logging.getLogger("voxgate.clock")


class Ticked(Protocol):
    async def tick(self) -> None: ...

    def tick_failed(self) -> None:
        """Called once after `tick` raised (the member was removed): end what it was playing."""


class PlayoutClock:
    def __init__(
        self,
        frame_ms: int = 20,
        max_catchup: int = 10,
        on_lateness: Callable[[float], None] | None = None,
        on_skip: Callable[[int], None] | None = None,
        on_tick_cpu: Callable[[float, int], None] | None = None,
        on_stall: Callable[[StallCause], None] | None = None,
    ):
        self.period = frame_ms / 1000.0
        self.max_catchup = max_catchup
        self.on_lateness = on_lateness
        self.on_skip = on_skip
        self.on_tick_cpu = on_tick_cpu  # (CPU seconds of one tick, members ticked): two clock reads a tick, not a frame
        self.on_stall = on_stall
        self.stalls: deque[tuple[float, StallCause]] = deque(maxlen=64)  # (monotonic time seen, cause): the latest
        self._members: dict[int, Ticked] = {}
        self._task: asyncio.Task | None = None
        self._joined = asyncio.Event()  # set by `add`: wakes a clock that has no member
        self.ticks = 0

    def add(self, member: Ticked) -> None:
        self._members[id(member)] = member
        self._joined.set()

    def remove(self, member: Ticked) -> None:
        self._members.pop(id(member), None)

    def __len__(self) -> int:
        return len(self._members)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="playout-clock")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        times = LoopTimes()  # opened here: it reads this (the loop's) thread's scheduler figures
        try:
            await self._ticks(times)
        finally:
            times.close()

    async def _ticks(self, times: LoopTimes) -> None:
        start = time.monotonic()
        n = 0
        mark = times.sample()  # the start of the last tick, when the loop last answered: a stall is measured from it
        while True:
            if not self._members:
                self._joined.clear()
                await self._joined.wait()
                start, n = time.monotonic(), 0  # a fresh schedule: the idle spell is not lateness
                mark = times.sample()
            due = start + n * self.period
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            lateness = time.monotonic() - due
            if lateness > self.max_catchup * self.period:
                skip = int(lateness / self.period)
                n += skip
                if self.on_skip:
                    self.on_skip(skip)
                now = times.sample()
                cause = times.cause(mark, now)
                mark = now
                self.stalls.append((now.wall, cause))
                if self.on_stall:
                    self.on_stall(cause)
                log.warning(
                    "playout clock stalled %.0f ms; skipped %d ticks (%s)", lateness * 1000, skip, cause.describe()
                )
                for member in list(self._members.values()):
                    stalled = getattr(member, "stalled", None)
                    if stalled is not None:
                        stalled(skip)  # silence at every caller mid-utterance
                continue
            if self.on_lateness:
                self.on_lateness(max(0.0, lateness))
            members = len(self._members)
            mark = times.sample()  # before the tick: a member's tick can be what holds the loop
            await self._tick_all(catching_up=lateness >= self.period)
            if self.on_tick_cpu:
                self.on_tick_cpu(time.thread_time() - mark.ran, members)
            n += 1
            self.ticks += 1

    async def _tick_all(self, catching_up: bool = False) -> None:
        """One tick of every member; on a catch-up tick (the next one is already due) members whose far end
        cannot absorb a burst skip it and are told so."""
        for member in list(self._members.values()):
            if catching_up and not getattr(member, "absorbs_bursts", True):
                member.stalled(1)
                continue
            try:
                await member.tick()
            except Exception:  # one session's failure never stops the clock, nor leaves that session open and silent
                log.exception("tick failed; removing member")
                self.remove(member)
                failed = getattr(member, "tick_failed", None)
                if failed is not None:
                    failed()
