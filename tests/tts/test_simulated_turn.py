"""The SimulatedEngine's turn mode: audio for each whole word as it arrives, nothing for a stream
that waits for text (no device time), end only after finish, `text_end` on every chunk."""

import pytest

from tts import EngineError, SynthesisRequest
from tts.simulated import SimulatedEngine, SimulatedSettings
from tests.tts.test_simulated import drain, run

SR = 24000


def engine(**kw):
    return SimulatedEngine(SimulatedSettings(**kw))


async def test_turn_speaks_whole_words_pauses_and_ends_after_finish():
    eng = engine(ms_per_char=10, first_packet_ms=0, capacity_x=50, stream_rtf=0.1)
    s = eng.open_turn(SynthesisRequest(text="Hel"))
    t = run(eng, 0.5)
    assert drain(s) == [] and eng.stats()["active"] == 0  # no whole word yet: not started
    s.append("lo wor")
    t = run(eng, 0.5, start=t)
    chunks = drain(s)
    assert sum(len(c.pcm) for c in chunks) == int(0.05 * SR)  # "Hello" only
    assert not any(c.is_last for c in chunks) and not s.done  # waiting for text, not ended
    assert chunks[-1].text_end == len("Hello")
    job = eng._by_stream[id(s)]
    made = job.generated
    run(eng, 1.0, start=t)
    assert job.generated == made  # a paused stream takes no device time
    s.append("ld!")
    s.finish()
    run(eng, 1.0, start=t + 1.0)
    chunks = drain(s)
    assert chunks[-1].is_last and s.done
    assert chunks[-1].text_end == len("Hello world!")
    assert sum(len(c.pcm) for c in chunks) == int(0.07 * SR)  # " world!" minus nothing: 7 more chars


async def test_paused_turns_leave_the_device_to_others():
    eng = engine(ms_per_char=10, first_packet_ms=0, capacity_x=1.0, stream_rtf=0.1)
    waiting = [eng.open_turn(SynthesisRequest(text="Hello ")) for _ in range(20)]
    run(eng, 1.0)
    other = eng.synthesize(SynthesisRequest(text="x" * 50))
    run(eng, 1.0, start=1.0)
    assert other.done  # 20 paused turns cost the 1x device nothing
    for w in waiting:
        w.cancel()


async def test_turn_text_after_finish_is_refused():
    eng = engine()
    s = eng.open_turn(SynthesisRequest(text="Hi."))
    s.finish()
    with pytest.raises(EngineError) as e:
        s.append(" more")
    assert e.value.code == "bad_request"
    s.cancel()
    s.append  # noqa: B018 - a cancelled turn still has the method; late text is dropped silently
