import numpy as np
import pytest

from tts import EngineError, SynthesisRequest
from tts.simulated import SimulatedEngine, SimulatedSettings, tone

SR = 24000


def engine(**kw):
    return SimulatedEngine(SimulatedSettings(**kw))


def drain(stream):
    items = []
    while not stream._queue.empty():
        item = stream._queue.get_nowait()
        if isinstance(item, object) and hasattr(item, "pcm"):
            items.append(item)
    return items


def run(eng, seconds, dt=0.01, start=0.0):
    t = start
    for _ in range(int(round(seconds / dt))):
        t += dt
        eng._step(t, dt)
    return t


async def test_audio_length_is_ms_per_char_times_characters():
    eng = engine(ms_per_char=70, first_packet_ms=0)
    s = eng.synthesize(SynthesisRequest(text="x" * 10))
    run(eng, 1.0)
    chunks = drain(s)
    assert sum(len(c.pcm) for c in chunks) == int(0.7 * SR)
    assert chunks[-1].is_last and s.done


async def test_audio_is_deterministic_and_voiced():
    a, b = tone(0, 4800, 7), tone(0, 4800, 7)
    assert np.array_equal(a, b)
    assert 0.05 < float(np.sqrt(np.mean(a**2))) < 0.5
    # continuity across packet boundaries: the same samples whichever way they are cut
    assert np.allclose(np.concatenate([tone(0, 1000, 3), tone(1000, 3800, 3)]), tone(0, 4800, 3), atol=1e-5)


async def test_first_packet_waits_for_the_first_packet_latency():
    eng = engine(first_packet_ms=100, stream_rtf=0.1)
    s = eng.synthesize(SynthesisRequest(text="hello world"))
    run(eng, 0.09)
    assert drain(s) == []
    run(eng, 0.03, start=0.09)
    assert len(drain(s)) == 1


async def test_one_stream_runs_at_its_stream_rtf_under_capacity():
    eng = engine(capacity_x=100, stream_rtf=0.1, first_packet_ms=0, ms_per_char=100)
    s = eng.synthesize(SynthesisRequest(text="x" * 20))  # 2 s of audio at RTF 0.1 = 0.2 s
    run(eng, 0.1)
    assert not s.done
    run(eng, 0.11, start=0.1)
    assert s.done


async def test_shared_capacity_goes_to_the_earliest_deadline_first():
    eng = engine(capacity_x=10, stream_rtf=0.1, first_packet_ms=0, scheduling="edf")
    late = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=50.0))
    urgent = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=1.0))
    run(eng, 0.3)
    assert len(drain(urgent)) > 0 and drain(late) == []
    assert eng.stats()["active"] == 1 and eng.stats()["queued"] == 1


async def test_fcfs_serves_in_arrival_order_whatever_the_deadline():
    eng = engine(capacity_x=10, stream_rtf=0.1, first_packet_ms=0, scheduling="fcfs")
    first = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=50.0))
    second = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=1.0))
    run(eng, 0.3)
    assert len(drain(first)) > 0 and drain(second) == []


async def test_deadline_updates_reorder_the_queue():
    eng = engine(capacity_x=10, stream_rtf=0.1, first_packet_ms=0)
    a = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=1.0))
    b = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=2.0))
    a.set_deadline(10.0)
    run(eng, 0.3)
    assert len(drain(b)) > 0 and drain(a) == []


async def test_cancel_frees_the_slot():
    eng = engine(capacity_x=10, stream_rtf=0.1, first_packet_ms=0)
    a = eng.synthesize(SynthesisRequest(text="x" * 1000, deadline=1.0))
    b = eng.synthesize(SynthesisRequest(text="x" * 100, deadline=2.0))
    a.cancel()
    run(eng, 0.3)
    assert a.cancelled and len(drain(b)) > 0
    assert eng.stats()["active"] + eng.stats()["queued"] == 1


async def test_a_full_queue_refuses_with_overloaded():
    eng = engine(max_queued=2)
    eng.synthesize(SynthesisRequest(text="a"))
    eng.synthesize(SynthesisRequest(text="b"))
    with pytest.raises(EngineError) as err:
        eng.synthesize(SynthesisRequest(text="c"))
    assert err.value.code == "overloaded"


async def test_empty_text_ends_with_an_empty_last_chunk():
    eng = engine(first_packet_ms=0)
    s = eng.synthesize(SynthesisRequest(text="   "))
    run(eng, 0.02)
    chunks = drain(s)
    assert len(chunks) == 1 and chunks[0].is_last and len(chunks[0].pcm) == 0


async def test_streaming_through_the_public_iterator():
    eng = engine(first_packet_ms=10, capacity_x=100, stream_rtf=0.05)
    await eng.start()
    try:
        s = eng.synthesize(SynthesisRequest(text="streamed text"))
        chunks = [c async for c in s]
        assert chunks[-1].is_last
        assert sum(len(c.pcm) for c in chunks) == int(round(13 * 0.07 * SR))
    finally:
        await eng.close()


async def test_tone_is_seamless_across_its_table_period():
    from tts.simulated import _TONE_PERIOD

    x = tone(_TONE_PERIOD - 100, 200, 2)
    assert np.max(np.abs(np.diff(x))) < 0.05  # no click where the table wraps
    assert np.array_equal(tone(5, 10, 2), tone(_TONE_PERIOD + 5, 10, 2))
