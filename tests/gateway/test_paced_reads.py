"""A paced call reads the engine's streams no further than `playout.max_ahead_ms` ahead of what plays, with the
simulated engine (20x real time) over the native WebSocket: the turn still plays whole with no gap, chunk after
chunk (the later chunk's held audio counts, and its wait to become the head ends with the head), and an interrupt
while the reads wait empties the playout, the held audio and the engine at once."""

from __future__ import annotations

import asyncio

from tests.conftest import Client

SENTENCES = [
    "The first sentence of this turn is long enough to take a while.",
    "Then a second one follows it, also of a fair length to speak.",
    "A third sentence comes after, so that there are several chunks.",
    "And the fourth one closes the turn with a few more words here.",
]
TEXT = " ".join(SENTENCES)
BOUND_MS = 1000  # 20 ms a character: the turn is about 5 s of audio, five times the bound
OVERRIDES = {"playout": {"max_ahead_ms": BOUND_MS}}


def record_packets(engine) -> list[int]:
    """The length of every packet the engine delivers from now on."""
    sizes, synthesize = [0], engine.synthesize

    def recording(request):
        stream = synthesize(request)
        deliver = stream._deliver

        def record(chunk):
            sizes.append(len(chunk.pcm))
            deliver(chunk)

        stream._deliver = record
        return stream

    engine.synthesize = recording
    return sizes


async def watch_ahead(session, until: asyncio.Future) -> list[int]:
    """session.ahead_samples every 20 ms until `until` is done."""
    seen = []
    while not until.done():
        seen.append(session.ahead_samples)
        await asyncio.sleep(0.02)
    return seen


async def test_a_paced_turn_plays_whole_with_its_reads_held_to_max_ahead(start_gateway):
    gw = await start_gateway(OVERRIDES)
    c = await Client.connect(gw)
    await c.start()
    session = next(iter(gw.core.registry.sessions.values()))
    rate = session.output.sample_rate  # the engine's too (24 kHz): no resampling in between
    packets = record_packets(gw.engine)
    done = asyncio.get_running_loop().create_future()
    watcher = asyncio.create_task(watch_ahead(session, done))
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    turn_done = await c.until("turn.done", timeout=30)
    done.set_result(None)
    ahead = await watcher
    print(f"\npaced turn: ahead at most {max(ahead) / rate:.2f} s (bound {BOUND_MS / 1000:g} s), {len(ahead)} samples")
    print(f"largest engine packet {max(packets) / rate:.2f} s")
    # unpaced, the whole turn (~5 s) is ahead at once; the head and the held chunk may each overshoot by a packet
    assert rate == gw.engine.sample_rate and max(ahead) <= BOUND_MS * rate // 1000 + 2 * max(packets)
    assert turn_done["interrupted"] is False and turn_done["gaps"] == {"micro": 0, "audible": 0}
    assert turn_done["played_text"] == TEXT
    assert turn_done["played_ms"] > 4 * BOUND_MS
    assert not c.of_type("underrun") and not c.of_type("error")
    await c.close()


async def test_an_interrupt_while_reads_wait_empties_everything_and_cancels_the_engine(start_gateway):
    gw = await start_gateway(OVERRIDES)
    c = await Client.connect(gw)
    await c.start()
    session = next(iter(gw.core.registry.sessions.values()))
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    await c.until("audio.start", timeout=10)
    await asyncio.sleep(0.5)
    assert any(job.pacing for job in session._inflight)  # the reads are waiting for the playout
    streams = [job.stream for job in session._inflight]
    await c.send({"type": "interrupt"})
    turn_done = await c.until("turn.done", timeout=5)
    assert turn_done["interrupted"] is True
    assert not session._inflight and session.ahead_samples == 0 and session.playout.buffered_ms == 0
    assert all(s.cancelled or s.done for s in streams)
    assert gw.engine.stats()["active"] == 0
    await c.close()
