"""The session's word map with timings (gateway.core.playback.SpokenChunk): the engine's words, named by
characters of the text it was given, become the agent's written words with times; played_text follows them."""

from __future__ import annotations

from gateway.core.playback import SpokenChunk
from tts import WordTiming, WordTimings


def timed(spoken: str, spans: list[tuple[int, int]]) -> WordTimings:
    """One WordTiming per spoken word, in order, with the given (start, end) samples."""
    words, at = [], 0
    for word, (start, end) in zip(spoken.split(), spans):
        at = spoken.index(word, at)
        words.append(WordTiming(at, at + len(word), start, end))
        at += len(word)
    return WordTimings(tuple(words))


def test_a_rewritten_group_takes_the_span_of_its_spoken_words():
    chunk = SpokenChunk.build("It costs 15% today.", "It costs fifteen percent today.")
    chunk = chunk.with_engine_text("It costs fifteen percent today.")
    chunk.add_timings(timed(chunk.spoken, [(0, 10), (10, 30), (30, 60), (60, 90), (95, 120)]), 1.0)
    chunk.finish(120)
    assert chunk.take_words(1000, 1000) == [
        {"text": "It", "start_ms": 1000.0, "end_ms": 1010.0},
        {"text": "costs", "start_ms": 1010.0, "end_ms": 1030.0},
        {"text": "15%", "start_ms": 1030.0, "end_ms": 1090.0},
        {"text": "today.", "start_ms": 1095.0, "end_ms": 1120.0},
    ]
    assert chunk.take_words(1000, 1000) == []  # each word once
    assert chunk.heard_text(89, 200) == "It costs"  # "percent" had not ended: the group is not heard
    assert chunk.heard_text(90, 200) == "It costs 15%"
    assert chunk.heard_text(119, 200) == "It costs 15%"  # inside "today."


def test_timings_that_come_piece_by_piece_go_out_as_they_come_and_scale_to_the_output_rate():
    chunk = SpokenChunk.build("One two three", "One two three").with_engine_text("One two three")
    words = timed("One two three", [(0, 2400), (2400, 4800), (4800, 7200)]).words
    chunk.add_timings(WordTimings(words[:1], "aligner"), 8000 / 24000)
    assert chunk.take_words(0, 8000) == [{"text": "One", "start_ms": 0.0, "end_ms": 100.0}]
    chunk.add_timings(WordTimings(words[1:], "aligner"), 8000 / 24000)
    assert [w["text"] for w in chunk.take_words(0, 8000)] == ["two", "three"]
    assert chunk.source == "aligner"


def test_stress_marks_in_the_engine_text_keep_the_words_one_for_one():
    chunk = SpokenChunk.build("Привет, мир", "Привет, мир").with_engine_text("Прив+ет, м+ир")
    chunk.add_timings(timed("Прив+ет, м+ир", [(0, 50), (70, 100)]), 1.0)
    chunk.finish(100)
    assert [(w["text"], w["end_ms"]) for w in chunk.take_words(0, 1000)] == [("Привет,", 50.0), ("мир", 100.0)]


def test_without_engine_timings_the_estimate_spreads_the_speech_by_letters():
    chunk = SpokenChunk.build("ab abcd", "ab abcd").with_engine_text("ab abcd")
    assert chunk.take_words(0, 1000) == []  # the estimate needs the chunk's length
    chunk.finish(600)  # 600 samples of speech (a trailing pause after it is not counted)
    assert chunk.source is None
    assert chunk.take_words(0, 1000) == [
        {"text": "ab", "start_ms": 0.0, "end_ms": 200.0},
        {"text": "abcd", "start_ms": 200.0, "end_ms": 600.0},
    ]
    assert chunk.heard_text(599, 900) == "ab"


def test_an_engine_text_that_does_not_split_into_the_spoken_words_keeps_the_estimate():
    chunk = SpokenChunk.build("Hello there", "Hello there").with_engine_text("Hello there again")
    chunk.add_timings(timed("Hello there again", [(0, 10), (10, 20), (20, 30)]), 1.0)
    chunk.finish(100)
    assert chunk.source is None and [w["end_ms"] for w in chunk.take_words(0, 1000)] == [50.0, 100.0]


def test_a_chunk_cut_while_the_engine_was_still_timing_it_is_heard_by_the_words_timed():
    text = "One — two three four"
    chunk = SpokenChunk.build(text, text).with_engine_text(text)
    # the aligner has timed "One", "two" and "three" so far; "—" it never times, "four" not yet
    spans = [("One", 0, 100), ("two", 100, 200), ("three", 200, 300)]
    words = tuple(WordTiming(text.index(w), text.index(w) + len(w), start, end) for w, start, end in spans)
    chunk.add_timings(WordTimings(words, "aligner"), 1.0)
    # 2000 samples of audio so far: the letters' estimate would have "three" end at 1400, far past 300
    assert chunk.heard_text(250, 2000) == "One — two"
    assert chunk.heard_text(1000, 2000) == "One — two three"  # "four" has no time yet: not heard
