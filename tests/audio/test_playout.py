import json
import wave

import numpy as np

from audio import filewriter
import pytest

from audio.playout import Playout

RATE = 8000
FRAME = 160  # 20 ms at 8 kHz


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def make(prebuffer_ms=40.0, cause="engine", **kw):
    clock = FakeClock()
    events = []
    p = Playout(
        RATE, prebuffer_ms=prebuffer_ms, on_event=events.append, clock=clock, cause_provider=lambda: cause, **kw
    )
    return p, clock, events


def run_ticks(p, clock, n):
    kinds = []
    for _ in range(n):
        kinds.append(p.tick().kind)
        clock.t += 0.02
    return kinds


def audio(ms, value=0.25):
    return np.full(int(RATE * ms / 1000), value, dtype=np.float32)


def types(events):
    return [e.type for e in events]


def test_silence_before_first_audio_is_latency_not_a_gap():
    p, clock, events = make()
    p.open_utterance("t1")
    assert run_ticks(p, clock, 5) == ["latency"] * 5
    p.push("t1", 0, audio(200))
    kinds = run_ticks(p, clock, 3)
    assert kinds == ["audio"] * 3
    first = [e for e in events if e.type == "first_audio"][0]
    assert first.data["ttfa_ms"] == pytest.approx(100.0)
    assert "underrun_start" not in types(events)


def test_prebuffer_target_is_met_before_the_first_frame():
    p, clock, events = make(prebuffer_ms=60)
    p.open_utterance("t1")
    p.push("t1", 0, audio(40))
    assert run_ticks(p, clock, 2) == ["latency", "latency"]
    p.push("t1", 0, audio(40))
    assert run_ticks(p, clock, 1) == ["audio"]


def test_a_closed_utterance_shorter_than_the_prebuffer_still_plays():
    p, clock, events = make(prebuffer_ms=200)
    p.open_utterance("t1")
    p.push("t1", 0, audio(40))
    p.close_utterance("t1")
    assert run_ticks(p, clock, 3) == ["audio", "audio", "idle"]
    end = [e for e in events if e.type == "utterance_end"][0]
    assert end.data["played_ms"] == 40.0 and end.data["interrupted"] is False


@pytest.mark.parametrize("gap_ticks,kind", [(1, "micro"), (9, "micro"), (10, "audible"), (25, "audible")])
def test_underruns_are_classified_by_duration(gap_ticks, kind):
    p, clock, events = make(cause="engine")
    p.open_utterance("t1")
    p.push("t1", 0, audio(100))
    assert run_ticks(p, clock, 5) == ["audio"] * 5
    assert run_ticks(p, clock, gap_ticks) == ["gap"] * gap_ticks
    p.push("t1", 1, audio(40))  # resumes at once: no second prebuffer
    assert run_ticks(p, clock, 1) == ["audio"]
    ends = [e for e in events if e.type == "underrun_end"]
    assert len(ends) == 1
    assert ends[0].data["duration_ms"] == gap_ticks * 20
    assert ends[0].data["kind"] == kind
    assert ends[0].data["cause"] == "engine"


def test_underrun_cause_comes_from_the_producer():
    p, clock, events = make(cause="text")
    p.open_utterance("t1")
    p.push("t1", 0, audio(60))
    run_ticks(p, clock, 5)
    p.push("t1", 1, audio(60))
    run_ticks(p, clock, 1)
    assert [e.data["cause"] for e in events if e.type == "underrun_end"] == ["text"]


def test_marks_fire_when_the_chunk_has_played():
    p, clock, events = make(prebuffer_ms=0)
    p.open_utterance("t1")
    p.push("t1", 0, audio(50))
    p.mark("t1", 0)
    p.push("t1", 1, audio(30))
    p.mark("t1", 1)
    p.close_utterance("t1")
    run_ticks(p, clock, 2)
    assert [e.data["chunk"] for e in events if e.type == "mark"] == []
    run_ticks(p, clock, 1)  # frame 3 holds the end of chunk 0 (50 ms)
    marks = [e for e in events if e.type == "mark"]
    assert [(m.data["chunk"], m.data["played_ms"]) for m in marks] == [(0, 50.0)]
    run_ticks(p, clock, 2)
    marks = [e for e in events if e.type == "mark"]
    assert [m.data["chunk"] for m in marks] == [0, 1]
    assert types(events)[-1] == "utterance_end"


def test_flush_empties_the_buffer_within_one_tick_and_ends_turns_as_interrupted():
    p, clock, events = make(prebuffer_ms=0)
    p.open_utterance("t1")
    p.open_utterance("t2")
    p.push("t1", 0, audio(1000))
    p.push("t2", 0, audio(1000))
    run_ticks(p, clock, 10)
    ended = p.flush()
    assert [e["turn_id"] for e in ended] == ["t1", "t2"]
    assert ended[0]["played_ms"] == 200.0 and ended[0]["interrupted"]
    assert ended[1]["played_ms"] == 0.0
    assert p.buffered_ms == 0
    assert run_ticks(p, clock, 1) == ["idle"]


def test_queued_turn_latency_counts_from_the_end_of_the_previous_turn():
    p, clock, events = make(prebuffer_ms=0)
    p.open_utterance("t1")
    p.push("t1", 0, audio(100))
    p.open_utterance("t2")
    p.push("t2", 0, audio(100))  # ready long before it may play
    p.close_utterance("t1")
    p.close_utterance("t2")
    run_ticks(p, clock, 12)
    firsts = {e.turn_id: e.data["ttfa_ms"] for e in events if e.type == "first_audio"}
    assert firsts["t1"] == 0.0
    assert firsts["t2"] == pytest.approx(20.0)  # one tick after t1 ended
    assert types(events).count("utterance_end") == 2


def test_an_utterance_without_audio_ends_with_zero_played():
    p, clock, events = make()
    p.open_utterance("t1")
    p.close_utterance("t1")
    run_ticks(p, clock, 1)
    end = [e for e in events if e.type == "utterance_end"][0]
    assert end.data["played_ms"] == 0.0 and end.data["started"] is False


def test_event_log_and_wav_timeline_record_exactly_what_was_played(tmp_path):
    log_path, wav_path = tmp_path / "s.jsonl", tmp_path / "s.wav"
    p, clock, events = make(prebuffer_ms=0, session_id="s1", log_path=str(log_path), wav_path=str(wav_path))
    run_ticks(p, clock, 3)  # idle silence is part of the timeline
    p.open_utterance("t1")
    p.push("t1", 0, audio(100, value=0.5))
    run_ticks(p, clock, 3)
    run_ticks(p, clock, 4)  # 2 audio + 2 gap
    p.close_utterance("t1")
    run_ticks(p, clock, 1)
    p.close()
    assert filewriter.sync()  # the writer thread writes the files
    lines = [json.loads(l) for l in log_path.read_text().splitlines()]
    assert [l["type"] for l in lines] == [
        "utterance_start",
        "first_audio",
        "underrun_start",
        "underrun_end",
        "utterance_end",
    ]
    assert all(l["session"] == "s1" and l["turn_id"] == "t1" for l in lines)
    with wave.open(str(wav_path)) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    assert len(samples) == 11 * FRAME
    assert np.all(samples[: 3 * FRAME] == 0)
    assert np.all(samples[3 * FRAME : 8 * FRAME] == 16384)
    assert np.all(samples[8 * FRAME :] == 0)


def test_audio_of_a_later_turn_waits_for_the_earlier_turn_to_close():
    p, clock, events = make(prebuffer_ms=0)
    p.open_utterance("t1")
    p.push("t1", 0, audio(40, value=0.1))
    p.open_utterance("t2")
    p.push("t2", 0, audio(40, value=0.2))  # arrives while t1 is still open
    run_ticks(p, clock, 4)  # t1 plays, then its text is late: gap, t2 must not jump in
    p.push("t1", 1, audio(20, value=0.1))
    p.close_utterance("t1")
    p.close_utterance("t2")
    heard = []
    for _ in range(5):
        heard.append(round(float(p.tick().pcm[0]), 2))
        clock.t += 0.02
    assert heard[:1] == [0.1]
    assert 0.2 in heard[1:]
    assert [e.turn_id for e in events if e.type == "utterance_end"] == ["t1", "t2"]


def test_non_finite_engine_samples_are_cleaned_on_push():
    p, clock, events = make(prebuffer_ms=0)
    p.open_utterance("t1")
    p.push("t1", 0, np.array([np.nan, np.inf, -np.inf] + [0.5] * 157, dtype=np.float32))
    frame = p.tick().pcm
    assert np.isfinite(frame).all() and frame[:3].tolist() == [0.0, 1.0, -1.0]


def test_out_of_range_engine_samples_are_clipped_on_push():
    """The frame encoder scales without clipping: the playout is where a too-loud packet is made safe."""
    p, clock, events = make(prebuffer_ms=0)
    p.open_utterance("t1")
    loud = np.array([3.0, -2.5, 1.0001, 0.25] + [0.0] * 156, dtype=np.float32)
    p.push("t1", 0, loud)
    assert p.tick().pcm[:4].tolist() == [1.0, -1.0, 1.0, 0.25]
    assert loud[0] == 3.0  # the engine's own buffer is left alone


def test_pause_holds_the_utterance_without_an_underrun_and_resume_goes_on():
    import numpy as np

    from audio.playout import Playout

    events = []
    p = Playout(1000, frame_ms=20, prebuffer_ms=0, on_event=lambda e: events.append(e))
    assert p.pause() is False  # nothing playing
    p.open_utterance("t")
    p.push("t", 0, np.arange(1, 101, dtype=np.float32) / 1000)
    p.close_utterance("t")
    assert p.tick().kind == "audio"
    assert p.pause(max_ms=40) and p.paused
    frames = [p.tick() for _ in range(2)]
    assert [f.kind for f in frames] == ["paused", "paused"] and not frames[0].pcm.any()
    f = p.tick()  # the hold ran out: the audio goes on where it stopped
    assert f.kind == "audio" and f.pcm[0] == np.float32(21 / 1000)
    assert p.pause()
    p.tick()
    p.resume()
    assert p.tick().kind == "audio"
    assert not [e for e in events if e.type.startswith("underrun")]
    assert p.paused_total_ms == 60


def test_frames_without_audio_are_zeros_and_an_audio_frame_after_them_is_exact():
    """Idle, latency, gap and paused ticks share one read-only frame of zeros (nothing filled per tick);
    audio frames, including a partial last one, carry exactly what was pushed, zero-padded."""
    p, clock, _ = make(prebuffer_ms=40.0)
    idle = p.tick()
    assert idle.kind == "idle" and not idle.pcm.any() and not idle.pcm.flags.writeable
    p.open_utterance("t")
    p.push("t", 0, audio(20, 0.5))
    assert p.tick().kind == "latency" and not p.tick().pcm.any()  # below the 40 ms prebuffer
    p.push("t", 0, audio(30, -0.25))  # 50 ms in all: 20 ms of 0.5, then 30 ms of -0.25
    first = p.tick()
    assert first.kind == "audio" and np.all(first.pcm == 0.5)
    second = p.tick()
    assert second.kind == "audio" and np.all(second.pcm == -0.25)
    gap = p.tick()  # 10 ms left: a partial frame, the rest zeros
    assert gap.kind == "audio" and np.all(gap.pcm[:80] == -0.25) and not gap.pcm[80:].any()
    underrun = p.tick()
    assert underrun.kind == "gap" and not underrun.pcm.any()
    p.push("t", 0, audio(40, 0.75))
    back = p.tick()
    assert back.kind == "audio" and np.all(back.pcm == 0.75)  # the reused buffer holds no trace of the earlier audio
    assert p.pause(100) and p.tick().kind == "paused" and not p.tick().pcm.any()
    with pytest.raises(ValueError):
        underrun.pcm[0] = 1.0  # no consumer can dirty the shared zeros


@pytest.mark.parametrize("encoding,rate", [("mulaw", 8000), ("alaw", 8000), ("pcm16", 8000), ("pcm16", 24000)])
def test_frames_encoded_at_push_are_byte_for_byte_what_the_frame_encoder_makes(encoding, rate):
    """With `encoding`, a frame's wire bytes are slices of its packets' bytes, encoded once at push: they must be
    exactly FrameEncoder's bytes of the same frame, across packet boundaries, marks, a frame the utterance ends in,
    and audio the playout had to clean (out of range, NaN)."""
    from audio.encode import FrameEncoder, OutputFormat

    encoder = FrameEncoder(OutputFormat(encoding, rate))
    clock = FakeClock()
    p = Playout(rate, prebuffer_ms=20.0, clock=clock, encoding=encoding)
    rng = np.random.default_rng(7)
    p.open_utterance("t1")
    for i, n in enumerate((37, rate // 50, 1000, 3, rate // 10 + 11)):  # packets that never line up with a frame
        pcm = rng.uniform(-1.3, 1.3, n).astype(np.float32)
        pcm[::17] = np.nan
        p.push("t1", i, pcm)
        p.mark("t1", i)
    p.close_utterance("t1")
    compared = 0
    for _ in range(40):
        frame = p.tick()
        if frame.kind == "audio":
            assert frame.data == encoder.encode(frame.pcm)
            compared += 1
        else:
            assert frame.data is None
        clock.t += 0.02
    assert compared >= 8 and p.tick().kind == "idle"
    # without an encoding, no bytes: the caller encodes the float frame itself
    plain = Playout(rate, prebuffer_ms=20.0, clock=clock)
    plain.open_utterance("t1")
    plain.push("t1", 0, rng.uniform(-1, 1, rate).astype(np.float32))
    assert plain.tick().data is None
