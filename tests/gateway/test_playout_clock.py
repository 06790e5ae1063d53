"""The shared playout clock: it ticks its members every 20 ms, and nobody while it has none."""

from __future__ import annotations

import asyncio

from gateway.core.clock import PlayoutClock


class Member:
    def __init__(self):
        self.ticks = 0
        self.stalls = 0

    async def tick(self) -> None:
        self.ticks += 1

    def stalled(self, ticks: int) -> None:
        self.stalls += ticks


def test_a_clock_without_members_does_not_tick_and_starts_fresh_when_one_joins():
    async def main():
        lateness, skips, ticks = [], [], []
        clock = PlayoutClock(
            on_lateness=lateness.append, on_skip=skips.append, on_tick_cpu=lambda cpu, n: ticks.append((cpu, n))
        )
        clock.start()
        await asyncio.sleep(0.3)  # 15 periods with nobody to tick
        assert clock.ticks == 0 and lateness == []
        member = Member()
        clock.add(member)
        await asyncio.sleep(0.2)
        # up to ~10 ticks for the member (fewer on a busy box), none of them catch-up for the idle spell, nothing skipped or stalled
        assert 1 <= member.ticks <= 12 and clock.ticks == member.ticks
        assert skips == [] and member.stalls == 0
        # every tick's CPU is reported with the members it ticked (the bench's per-frame path figure)
        assert len(ticks) == clock.ticks and all(n == 1 and cpu >= 0 for cpu, n in ticks)
        clock.remove(member)
        await asyncio.sleep(0.05)
        idle_from = clock.ticks
        await asyncio.sleep(0.2)
        assert clock.ticks == idle_from  # idle again: no more ticks
        again = Member()
        clock.add(again)
        await asyncio.sleep(0.1)
        assert again.ticks >= 2 and skips == []
        await clock.stop()

    asyncio.run(main())
