"""The shared 20 ms playout clock: one asyncio task ticks every clock-driven session.

It keeps an absolute schedule: after a stall it catches up by ticking the
missed frames back to back (the far end's buffer absorbs the burst) instead
of restarting its schedule, so one stall does not delay the rest of every
utterance. A stall longer than `max_catchup` frames is dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Protocol

log = logging.getLogger("voxgate.clock")


class Ticked(Protocol):
    async def tick(self) -> None: ...

    def tick_failed(self) -> None:
        """Called once after `tick` raised (the member was removed): end what it was playing."""


class PlayoutClock:
    def __init__(self, frame_ms: int = 20, max_catchup: int = 10, on_lateness: Callable[[float], None] | None = None,
                 on_skip: Callable[[int], None] | None = None):
        self.period = frame_ms / 1000.0
        self.max_catchup = max_catchup
        self.on_lateness = on_lateness
        self.on_skip = on_skip
        self._members: dict[int, Ticked] = {}
        self._task: asyncio.Task | None = None
        self.ticks = 0

    def add(self, member: Ticked) -> None:
        self._members[id(member)] = member

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
        start = time.monotonic()
        n = 0
        while True:
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
                log.warning("playout clock stalled %.0f ms; skipped %d ticks", lateness * 1000, skip)
                continue
            if self.on_lateness:
                self.on_lateness(max(0.0, lateness))
            await self._tick_all()
            n += 1
            self.ticks += 1

    async def _tick_all(self) -> None:
        for member in list(self._members.values()):
            try:
                await member.tick()
            except Exception:  # one session's failure never stops the clock, nor leaves that session open and silent
                log.exception("tick failed; removing member")
                self.remove(member)
                failed = getattr(member, "tick_failed", None)
                if failed is not None:
                    failed()
