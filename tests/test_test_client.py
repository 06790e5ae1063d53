"""The tests' protocol client (tests/conftest.py) itself: `until(timeout=)` must be able to time out while
paced audio flows, or a test waiting for an event that never comes waits out the whole turn instead."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import Client


async def test_until_times_out_while_audio_frames_keep_arriving(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send(
        {
            "type": "text",
            "turn_id": "t1",
            "text": "one long sentence with no stop in it " * 8 + "to the end.",
            "final": True,
        }
    )
    await c.until("mark", timeout=10)  # the short first chunk played; the next one takes seconds
    events, frames = len(c.events), len(c.frames)
    with pytest.raises(asyncio.TimeoutError):
        await c.until("no.such.event", timeout=0.3)
    assert len(c.frames) > frames, "paced audio was flowing meanwhile"
    # the old client restarted its wait on every frame, so it only gave up after the next event (the next mark)
    assert len(c.events) == events, [m["type"] for _, m in c.events[events:]]
    await c.close()
