"""The caller's playback model: known arrivals and ticks in, exact heard gaps out."""

from bench.loadtest.playback import CallerPlayback

SIL = b"\0" * 8
AUD = b"\x01" * 8
T0 = 1.005  # the client clock's grid is 5 ms after the server's


def ticks(pb: CallerPlayback, n: int, start: float = T0) -> None:
    for k in range(n):
        pb.tick(start + 0.02 * k)


def feed(pb: CallerPlayback, arrivals_payloads, end_at: float):
    turn = pb.begin_turn("t1")
    for t, p in arrivals_payloads:
        pb.on_frame(t, p)
    pb.end_turn(end_at)
    return turn


def test_server_silence_inside_an_utterance_is_a_server_gap():
    heard = []
    pb = CallerPlayback(SIL, prebuffer_ms=40, on_heard=heard.append)
    frames = [(1.0 + 0.02 * i, SIL if i in (4, 5, 6) else AUD) for i in range(10)]
    turn = feed(pb, frames, end_at=1.21)
    ticks(pb, 20)
    assert heard == [turn]
    assert turn.first_play == T0 + 0.02 * 2  # first tick at least 40 ms after the first arrival
    assert turn.audio_frames == 7 and turn.silent_frames == 3
    assert [(g.duration_ms, g.source, g.kind) for g in turn.gaps] == [(60.0, "server", "micro")]
    assert turn.tail_ms == 0 and turn.lead_silence_ms == 0


def test_late_frames_are_a_delivery_gap_measured_on_the_tick_grid():
    heard = []
    pb = CallerPlayback(SIL, prebuffer_ms=40, on_heard=heard.append)
    frames = [(1.0 + 0.02 * i, AUD) for i in range(5)] + [(1.5 + 0.02 * i, AUD) for i in range(5)]
    turn = feed(pb, frames, end_at=1.6)
    # Ticks processed late (all at once) must not hide the gap: only arrival times count.
    ticks(pb, 40)
    assert heard == [turn]
    assert [(g.duration_ms, g.source, g.kind) for g in turn.gaps] == [(360.0, "delivery", "audible")]
    assert turn.audio_frames == 10


def test_silence_before_the_first_and_after_the_last_audio_is_not_a_gap():
    pb = CallerPlayback(SIL, prebuffer_ms=0)
    payloads = [SIL, AUD, AUD, SIL, SIL]
    turn = feed(pb, [(1.0 + 0.02 * i, p) for i, p in enumerate(payloads)], end_at=1.09)
    ticks(pb, 10)
    assert turn.gaps == []
    assert turn.lead_silence_ms == 20
    assert turn.tail_ms == 60  # two silent frames + the end marker's one-frame grace
    assert turn.end is not None


def test_a_gap_of_late_and_silent_ticks_is_mixed():
    pb = CallerPlayback(SIL, prebuffer_ms=0)
    frames = [(1.0, AUD), (1.02, SIL), (1.1, AUD)]
    turn = feed(pb, frames, end_at=1.11)
    ticks(pb, 10)
    # ticks 1.005 aud, 1.025 sil, 1.045/1.065/1.085 empty, 1.105 aud
    assert [(g.duration_ms, g.source) for g in turn.gaps] == [(80.0, "mixed")]


def test_turn_without_audio_is_reported_heard():
    heard = []
    pb = CallerPlayback(SIL, on_heard=heard.append)
    turn = feed(pb, [], end_at=1.0)
    ticks(pb, 2)
    assert heard == [turn] and turn.first_play is None and turn.audio_frames == 0


def test_wav_timeline_and_buffer_levels_follow_the_ticks():
    pb = CallerPlayback(SIL, prebuffer_ms=0, keep_audio=True, trace_level=True)
    feed(pb, [(1.0, AUD), (1.0, AUD)], end_at=1.0)
    ticks(pb, 4)
    assert bytes(pb.audio) == AUD + AUD + SIL + SIL
    assert list(pb.levels) == [2, 1, 0, 0]
    assert pb.idle


def test_a_frame_arriving_just_after_turn_done_is_still_heard_in_the_turn():
    heard = []
    pb = CallerPlayback(SIL, prebuffer_ms=0, on_heard=heard.append)
    turn = pb.begin_turn("t1")
    pb.on_frame(1.0, AUD)
    pb.end_turn(1.0)
    pb.on_frame(1.001, AUD)  # the gateway flushed turn.done before the tick's frame
    ticks(pb, 4)
    assert heard == [turn] and turn.audio_frames == 2 and pb.stray_frames == 0 and turn.gaps == []


def test_frames_outside_a_turn_are_counted_as_stray():
    pb = CallerPlayback(SIL)
    pb.on_frame(1.0, AUD)
    assert pb.stray_frames == 1 and pb.idle
