"""Word timings end to end: the eSpeak engine's own word boundaries reach the client as `audio.words`, and a
barge-in cuts `played_text` after the last word whose end had played (a real gateway, a real websockets client).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import Client
from tests.espeak.espeak_words import boundaries, record
from tts.espeak_engine import espeak_available

pytestmark = pytest.mark.skipif(
    not espeak_available(), reason="espeakng-loader (the optional 'espeak' extra) is not installed"
)

ESPEAK = {"engine": {"kind": "espeak"}, "chunker": {"first_chunk_words": 0}, "playout": {"prebuffer_ms": 40}}
UNPACED = {"encoding": "pcm16", "sample_rate": 24000, "pacing": "none"}


def ms(sample: int) -> float:
    return round(sample * 1000.0 / 24000, 3)


async def speak_turn(c: Client, turn_id: str, text: str) -> tuple[list[dict], dict]:
    await c.send({"type": "text", "turn_id": turn_id, "text": text, "final": True})
    done = await c.until("turn.done", timeout=30, turn_id=turn_id)
    words = [w for e in c.of_type("audio.words") if e["turn_id"] == turn_id for w in e["words"]]
    return words, done


@pytest.mark.parametrize(
    "text",
    ["Hello there, my friend, the weather is lovely today.", "Привет, друг, сегодня прекрасная погода — не правда ли?"],
)
async def test_audio_words_are_espeaks_own_word_boundaries(start_gateway, monkeypatch, text):
    spoken = record(monkeypatch)
    gw = await start_gateway(ESPEAK)
    c = await Client.connect(gw)
    started = await c.start(output=UNPACED, word_timings=True)
    assert started["word_timings"] is True
    words, done = await speak_turn(c, "t1", text)
    assert [s["text"] for s in spoken] == [text]  # one chunk, spoken as written
    spans = iter(boundaries(spoken[0]))
    expected, end = [], 0
    for token in text.split():  # "—" has no word event: it sits, zero long, at the end of the word before it
        if token == "—":
            expected.append((ms(end), ms(end)))
            continue
        _, _, start, end = next(spans)
        expected.append((ms(start), ms(end)))
    assert [w["text"] for w in words] == text.split()  # every word once, in order, as written
    assert {e["source"] for e in c.of_type("audio.words")} == {"engine"}
    assert [(w["start_ms"], w["end_ms"]) for w in words] == expected
    assert done["timing_source"] == "engine"
    assert done["played_text"] == text


async def test_a_rewritten_group_is_one_word_timed_by_its_spoken_words(start_gateway, monkeypatch):
    text = "It costs 15% today."
    spoken = record(monkeypatch)
    gw = await start_gateway(ESPEAK)
    c = await Client.connect(gw)
    await c.start(output=UNPACED, language="en", word_timings=True)
    words, _ = await speak_turn(c, "t1", text)
    assert spoken[0]["text"].split()[2:4] == ["fifteen", "percent"]  # what the engine was given
    expected = boundaries(spoken[0])
    assert [w["text"] for w in words] == ["It", "costs", "15%", "today."]
    assert (words[2]["start_ms"], words[2]["end_ms"]) == (ms(expected[2][2]), ms(expected[3][3]))
    assert (words[3]["start_ms"], words[3]["end_ms"]) == (ms(expected[4][2]), ms(expected[4][3]))


async def test_sessions_that_do_not_ask_get_no_audio_words(start_gateway):
    gw = await start_gateway(ESPEAK)
    c = await Client.connect(gw)
    started = await c.start(output=UNPACED)
    assert "word_timings" not in started
    words, done = await speak_turn(c, "t1", "Hello there.")
    assert words == [] and not c.of_type("audio.words")
    assert done["timing_source"] == "engine"  # played_text still follows the engine's word ends


async def test_an_engine_without_timings_gives_the_estimate_each_word_once(start_gateway):
    gw = await start_gateway()  # the simulated engine: tone audio, no word timings
    c = await Client.connect(gw)
    await c.start(output=UNPACED, word_timings=True)
    text = "Good morning, it costs 15% today. See you at 5 pm!"
    words, done = await speak_turn(c, "t1", text)
    assert " ".join(w["text"] for w in words) == text
    assert {e["source"] for e in c.of_type("audio.words")} == {"estimate"}
    ends = [w["end_ms"] for w in words]
    assert ends == sorted(ends) and all(w["start_ms"] <= w["end_ms"] for w in words)
    assert done["timing_source"] == "estimate"


async def test_word_timings_must_be_a_boolean(start_gateway):
    gw = await start_gateway(ESPEAK)
    c = await Client.connect(gw)
    await c.send({"type": "session.start", "word_timings": "yes"})
    error = await c.until("error")
    assert error["code"] == "bad_message" and "word_timings" in error["message"]


async def barge_in_at(c: Client, turn_id: str, text: str, at_ms) -> tuple[list[dict], dict]:
    """Speaks `text` in real time and interrupts once the frames up to `at_ms(words)` have arrived."""
    await c.send({"type": "text", "turn_id": turn_id, "text": text, "final": True})
    words: list[dict] = []
    target = None
    while target is None or len(c.frames) * 20 < target:  # each binary message is one 20 ms frame
        raw = await asyncio.wait_for(c.ws.recv(), 30)
        if isinstance(raw, bytes):
            c.frames.append((0.0, raw))
            continue
        event = json.loads(raw)
        c.events.append((0.0, event))
        if event["type"] == "audio.words":
            words += event["words"]
            target = at_ms(words)
        elif event["type"] == "turn.done":
            pytest.fail("the turn played out before the barge-in")
    await c.send({"type": "interrupt"})
    return words, await c.until("turn.done", timeout=10, turn_id=turn_id)


def heard(words: list[dict], played_ms: float) -> str:
    return " ".join(w["text"] for w in words if w["end_ms"] <= played_ms)


async def test_a_barge_in_inside_a_long_word_leaves_it_unheard(start_gateway):
    gw = await start_gateway(ESPEAK)
    c = await Client.connect(gw)
    await c.start(output={"encoding": "pcm16", "sample_rate": 24000}, language="en", word_timings=True)
    text = "Well, incomprehensibilities abound everywhere."

    def inside(words):
        long = next((w for w in words if w["text"] == "incomprehensibilities"), None)
        return None if long is None else long["start_ms"] + 0.3 * (long["end_ms"] - long["start_ms"])

    words, done = await barge_in_at(c, "t1", text, inside)
    long = next(w for w in words if w["text"] == "incomprehensibilities")
    assert done["interrupted"] is True
    assert long["start_ms"] < done["played_ms"] < long["end_ms"], (done, long)  # the barge-in landed inside it
    assert done["played_text"] == heard(words, done["played_ms"]) == "Well,"


async def test_a_barge_in_between_two_words_keeps_the_first(start_gateway):
    gw = await start_gateway(ESPEAK)
    c = await Client.connect(gw)
    await c.start(output={"encoding": "pcm16", "sample_rate": 24000}, language="en", word_timings=True)
    text = "Good morning to you. Nice weather today."  # two chunks: a sentence's pause between "you." and "Nice"

    def between(words):
        if len(words) < 5:
            return None
        return (words[3]["end_ms"] + words[4]["start_ms"]) / 2

    words, done = await barge_in_at(c, "t1", text, between)
    assert words[3]["text"] == "you." and words[4]["text"] == "Nice"
    assert words[3]["end_ms"] < done["played_ms"] < words[4]["start_ms"], (done, words[3:5])
    # "you." had ended; the pause after it had not: its chunk is not complete, its words are
    assert done["played_text"] == heard(words, done["played_ms"]) == "Good morning to you."
    assert done["timing_source"] == "engine"
