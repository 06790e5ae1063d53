"""Turn mode over the engine service's wire: a RemoteEngine opens a turn on an EngineServer (the
SimulatedEngine behind it, real ZeroMQ on loopback tcp://), appends pieces, finishes; chunks carry
text_end; a cancel reaches the engine; an engine without turn mode is not offered turns."""

from __future__ import annotations

import asyncio

import pytest

zmq = pytest.importorskip("zmq")

from tts import SynthesisRequest  # noqa: E402
from tts.engine import EngineError  # noqa: E402
from tts.service.remote import RemoteEngine  # noqa: E402
from tts.service.server import EngineServer  # noqa: E402
from tts.simulated import SimulatedEngine, SimulatedSettings  # noqa: E402

SECRET = b"wire-test-secret-0123456789"


async def _pair(engine):
    await engine.start()
    srv = EngineServer(engine, "tcp://127.0.0.1:0", secret=SECRET, heartbeat_s=1.0)
    await srv.start()
    remote = RemoteEngine([srv.endpoint], secret=SECRET)
    await remote.start()
    return srv, remote


async def test_a_turn_over_the_wire_streams_its_words_and_reports_text_end():
    engine = SimulatedEngine(SimulatedSettings(first_packet_ms=0, ms_per_char=10, capacity_x=100))
    srv, remote = await _pair(engine)
    try:
        assert remote.supports_turns and remote.turn_supported("default") is None
        turn = remote.open_turn(SynthesisRequest(text="Hello", tag="s/t/turn"))
        chunks = []

        async def read():
            async for c in turn:
                chunks.append(c)

        reader = asyncio.ensure_future(read())
        await asyncio.sleep(0.3)
        assert chunks == []  # "Hello" may go on: no whole word yet
        turn.append(" there, friend")
        await asyncio.sleep(0.3)
        assert chunks and not chunks[-1].is_last and chunks[-1].text_end == len("Hello there,")
        turn.append("!")
        turn.finish()
        await asyncio.wait_for(reader, 5)
        assert chunks[-1].is_last and chunks[-1].text_end == len("Hello there, friend!")
        assert sum(len(c.pcm) for c in chunks) == int(round(len("Hello there, friend!") * 10 * 24))
        # cancel of a turn waiting for text frees it on the engine
        other = remote.open_turn(SynthesisRequest(text="Wait for ", tag="s/t2/turn"))
        await asyncio.sleep(0.2)
        assert engine._jobs
        other.cancel()
        await asyncio.sleep(0.3)
        assert not engine._jobs
    finally:
        await remote.close()
        await srv.close()
        await engine.close()


async def test_an_engine_without_turn_mode_is_not_offered_turns():
    engine = SimulatedEngine()
    engine.supports_turns = False
    srv, remote = await _pair(engine)
    try:
        assert not remote.supports_turns and remote.turn_supported("default")
        with pytest.raises(EngineError) as e:
            remote.open_turn(SynthesisRequest(text="Hi"))
        assert e.value.code == "unsupported_mode"
    finally:
        await remote.close()
        await srv.close()
        await engine.close()
