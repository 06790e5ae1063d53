"""Word timings cross the engine wire: a RemoteEngine's chunks carry the words the engine behind the
EngineServer timed (real ZeroMQ on loopback), and a malformed entry is dropped without failing the stream."""

from __future__ import annotations

import dataclasses

import pytest

zmq = pytest.importorskip("zmq")

from tts import SynthesisRequest, WordTiming, WordTimings  # noqa: E402
from tts.service import wire as W  # noqa: E402
from tts.service.link import _word_timings  # noqa: E402
from tts.service.remote import RemoteEngine  # noqa: E402
from tts.service.server import EngineServer  # noqa: E402
from tts.simulated import SimulatedEngine, SimulatedSettings  # noqa: E402

SECRET = b"wire-test-secret-0123456789"


class TimedEngine(SimulatedEngine):
    """Simulated audio whose chunks each say, as an aligner would, which words they hold (fixed spans)."""

    def synthesize(self, request):
        stream = super().synthesize(request)
        deliver, seen = stream._deliver, [0]

        def with_words(chunk):
            i = seen[0]
            seen[0] += 1
            words = WordTimings((WordTiming(i, i + 1, 100 * i, 100 * i + 50),), "aligner")
            deliver(dataclasses.replace(chunk, words=words))

        stream._deliver = with_words
        return stream


async def test_word_timings_arrive_with_their_chunks_over_the_wire():
    engine = TimedEngine(SimulatedSettings(first_packet_ms=0, ms_per_char=20, capacity_x=100, stream_rtf=0.05))
    await engine.start()
    srv = EngineServer(engine, "tcp://127.0.0.1:0", secret=SECRET, heartbeat_s=1.0)
    await srv.start()
    remote = RemoteEngine([srv.endpoint], secret=SECRET)
    await remote.start()
    try:
        chunks = [c async for c in remote.synthesize(SynthesisRequest(text="Hello there, my good friend."))]
        assert len(chunks) > 1
        for i, chunk in enumerate(chunks):
            assert chunk.words == WordTimings((WordTiming(i, i + 1, 100 * i, 100 * i + 50),), "aligner")
    finally:
        await remote.close()
        await srv.close()
        await engine.close()


def test_an_entry_for_no_chunk_or_an_unknown_source_is_dropped():
    msg = W.Packets(
        chunks=[W.Chunk(1, 0, False, 1)],
        words=[W.Words(0, "engine", [(0, 5, 0, 10)]), W.Words(3, "engine", []), W.Words(0, "psychic", [])],
    )
    decoded = W.decode_from_engine(W.encode(msg))
    assert _word_timings(decoded) == {0: WordTimings((WordTiming(0, 5, 0, 10),), "engine")}
