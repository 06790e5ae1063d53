"""What the caller heard, as the native protocol reports it (issue 14's playback-truth fixes).

Each test is one behaviour: a real gateway on loopback, a real websockets client.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from gateway.app import Gateway
from gateway.config import load_config
from tests.conftest import FAST_SIM, Client, merge
from tts import EngineError
from tts.simulated import SimulatedEngine, SimulatedSettings

MS_PER_CHAR = 20


class FailingEngine(SimulatedEngine):
    """Simulated audio, except that a chunk whose text contains `fail_on` fails in the engine."""

    def __init__(self, fail_on: str):
        super().__init__(
            SimulatedSettings(first_packet_ms=10, capacity_x=500, ms_per_char=MS_PER_CHAR, stream_rtf=0.05)
        )
        self.fail_on = fail_on

    def synthesize(self, request):
        if self.fail_on in request.text:
            raise EngineError("engine_error", "this chunk fails")
        return super().synthesize(request)


async def read_frames(c: Client, n: int, timeout: float = 10.0) -> None:
    """Reads until the client holds `n` audio frames (events are recorded on the way)."""
    deadline = time.monotonic() + timeout
    while len(c.frames) < n and time.monotonic() < deadline:
        try:
            await asyncio.wait_for(c.next_event(), 0.1)
        except asyncio.TimeoutError:
            pass


@pytest.fixture
async def start_with_engine():
    started = []

    async def start(engine, overrides: dict | None = None) -> Gateway:
        gw = Gateway(load_config(None, merge(FAST_SIM, overrides or {})), engine=engine)
        await gw.start(host="127.0.0.1", port=0)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        await gw.stop()


async def test_text_for_an_interrupted_turn_gets_turn_closed_and_plays_nothing(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send(
        {"type": "text", "turn_id": "t1", "text": "The agent is still streaming this reply when ", "final": False}
    )
    await c.until("audio.start", turn_id="t1")
    await c.send({"type": "interrupt"})
    await c.until("turn.done", turn_id="t1")
    await c.send({"type": "text", "turn_id": "t1", "text": "the caller barged in.", "final": True})  # tokens in flight
    error = await c.until("error")
    assert error["code"] == "turn_closed"
    await c.send({"type": "text", "turn_id": "t2", "text": "Next.", "final": True})
    await c.until("turn.done", turn_id="t2")
    assert [e["turn_id"] for e in c.of_type("audio.start")] == ["t1", "t2"]


async def test_text_for_a_finished_turn_gets_turn_closed(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": "Done.", "final": True})
    await c.until("turn.done", turn_id="t1")
    await c.send({"type": "text", "turn_id": "t1", "text": "Again?", "final": True})
    assert (await c.until("error"))["code"] == "turn_closed"
    await asyncio.sleep(0.2)
    assert len(c.of_type("audio.start")) == 1 and len(c.of_type("turn.done")) == 1


async def test_a_turn_with_no_audio_ends_and_the_next_turn_plays(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send(
        {"type": "text", "turn_id": "emoji", "text": "🙂🙂", "final": True}
    )  # the frontend speaks nothing of it
    await c.send({"type": "text", "turn_id": "next", "text": "Hello.", "final": True})
    done = await c.until("turn.done", turn_id="emoji", timeout=3)
    assert done["played_ms"] == 0 and done["interrupted"] is False
    assert (await c.until("turn.done", turn_id="next", timeout=3))["played_ms"] > 0


async def test_played_text_covers_every_chunk_that_played_skipping_a_failed_one(start_with_engine):
    gw = await start_with_engine(FailingEngine(fail_on="broken"), {"chunker": {"first_chunk_words": 0}})
    c = await Client.connect(gw)
    await c.start()
    text = "The first sentence plays. The broken sentence fails. The last sentence plays too."
    await c.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    done = await c.until("turn.done")
    assert any(e["code"] == "engine_error" for e in c.of_type("error"))
    assert done["played_text"] == "The first sentence plays. The last sentence plays too."


async def test_a_session_whose_tick_raises_ends_with_internal_and_the_others_play_on(start_gateway, caplog):
    gw = await start_gateway()
    victim, bystander = await Client.connect(gw), await Client.connect(gw)
    started = await victim.start()
    await bystander.start()
    session = gw.sessions[started["session_id"]]

    real_tick = session.playout.tick

    def broken(delivered=True):  # the victim's ticks raise once it has something to play
        if session.playout.has_utterance:
            raise RuntimeError("playout broke")
        return real_tick(delivered)

    session.playout.tick = broken
    await bystander.send(
        {"type": "text", "turn_id": "b", "text": "The other call keeps talking for a while.", "final": True}
    )
    with caplog.at_level(logging.ERROR, logger="voxgate.clock"):
        await victim.send({"type": "text", "turn_id": "v", "text": "This frame cannot be played.", "final": True})
        error = await victim.until("error")
        assert error["code"] == "internal"
        await victim.until("session.ended")
    assert started["session_id"] not in gw.sessions
    done = await bystander.until("turn.done", turn_id="b")
    assert done["interrupted"] is False and done["played_ms"] > 0


async def test_frames_are_paced_when_the_disk_is_slow(start_gateway, tmp_path, monkeypatch):
    from audio import filewriter

    real = filewriter.write_item

    def slow_disk(item):
        time.sleep(0.03)  # every write takes 30 ms: one per tick would stall the shared clock
        real(item)

    monkeypatch.setattr(filewriter, "write_item", slow_disk)
    gw = await start_gateway({"server": {"log_dir": str(tmp_path), "record_wav": True}})
    c = await Client.connect(gw)
    await c.start(output={"encoding": "pcm16", "sample_rate": 8000})
    await c.send(
        {"type": "text", "turn_id": "t", "text": "A turn of a few seconds that is logged and recorded.", "final": True}
    )
    await c.until("audio.start")
    await read_frames(c, 75)
    times = [t for t, _ in c.frames[-51:]]
    assert times[-1] - times[0] < 1.3, f"50 frames took {times[-1] - times[0]:.2f} s: the disk stalled the clock"


async def test_frames_skipped_under_backpressure_are_a_network_gap_and_not_played(start_gateway, monkeypatch):
    from gateway.legs import native_ws

    window: list[float] = []  # [start, end): the client's socket counts as backed up

    def backed_up(transport, cap=None):
        return bool(window) and window[0] <= time.monotonic() < window[1]

    monkeypatch.setattr(native_ws, "frame_must_skip", backed_up)
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start(output={"encoding": "pcm16", "sample_rate": 8000})
    text = "A turn that is long enough to lose a few frames in the middle of it."
    await c.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    await c.until("audio.start")
    await asyncio.sleep(0.3)
    now = time.monotonic()
    window[:] = [now, now + 0.3]
    done = await c.until("turn.done")
    gaps = [u for u in c.of_type("underrun") if u["cause"] == "network"]
    assert len(gaps) == 1 and 260 <= gaps[0]["duration_ms"] <= 340
    spoken_ms = len(text) * MS_PER_CHAR
    assert abs(done["played_ms"] - (spoken_ms - gaps[0]["duration_ms"])) <= 40  # what was skipped was not played
    assert abs(len(c.frames) * 20 - done["played_ms"]) <= 60  # played_ms is what the client received
    assert done["gaps"]["audible"] >= 1
