"""`engine.speech_transport: websocket`: calls spoken through vLLM-Omni's streaming WebSocket (a loopback server
that speaks its 0.30.0 messages, tests/openai_speech/omni_ws.py) get the server's word timestamps as `audio.words`
with source `engine`; words that do not match the text leave the estimate; a server without an aligner fails the
chunk with its own words."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import Client
from tests.openai_speech.test_chained_calls import wait_for
from tests.openai_speech.omni_ws import GAP_MS, WORD_MS, OmniWs, utterance
from tests.openai_speech.servers import served_in_loop
from tts.openai_speech.websocket import match_words

TEXT = "Hello there, this call is timed by the server itself."
WS = {"engine": {"speech_transport": "websocket"}}


@pytest.fixture
async def omni_ws():
    """`await omni_ws(mode)` → (server, base URL), served in the test's loop; all stopped afterwards."""
    async with served_in_loop(OmniWs) as start:
        yield lambda mode="aligned": start(mode)


async def _call(gw, text: str = TEXT) -> tuple[Client, dict]:
    c = await Client.connect(gw)
    await c.start(word_timings=True)
    await c.send({"type": "text", "turn_id": "t1", "text": text, "final": True})
    done = await c.until("turn.done")
    return c, done


async def test_word_timings_come_from_the_servers_aligner(omni_ws, chained_gateway):
    server, base = await omni_ws()
    gw = await chained_gateway([base], WS)
    c, done = await _call(gw)
    events = c.of_type("audio.words")
    words = [w for e in events for w in e["words"]]
    assert [w["text"] for w in words] == TEXT.split()  # in the agent's writing, punctuation included
    assert {e["source"] for e in events} == {"engine"} and done["timing_source"] == "engine"
    _, stamps = utterance(TEXT)  # where the server's audio has each word
    for w, s in zip(words, stamps, strict=True):
        assert abs(w["start_ms"] - s["start_ms"]) <= 1 and abs(w["end_ms"] - s["end_ms"]) <= 1, (w, s)
    assert done["played_text"] == TEXT and not done["interrupted"]
    audio = np.frombuffer(b"".join(f for _, f in c.frames), "<i2")
    assert len(audio) / 24000 >= len(stamps) * (WORD_MS + GAP_MS) / 1000 - 0.05  # every word's audio played
    # one session a text chunk, configured as vLLM-Omni needs for streamed audio with timestamps
    assert server.sessions == len(server.configs) == gw.engine.counters["requests"] >= 1
    for config in server.configs:
        assert config["stream_audio"] is True and config["response_format"] == "pcm"
        assert config["word_timestamps"] is True and config["split_granularity"] == "none"
        assert "input" not in config and "stream" not in config
    assert not gw.engine.endpoint_stats()[0]["errors"]
    await c.ws.close()


async def test_words_that_do_not_match_the_text_leave_the_estimate(omni_ws, chained_gateway):
    _, base = await omni_ws("misspelt")
    gw = await chained_gateway([base], WS)
    c, done = await _call(gw)
    events = c.of_type("audio.words")
    assert [w["text"] for e in events for w in e["words"]] == TEXT.split()
    assert {e["source"] for e in events} == {"estimate"} and done["timing_source"] == "estimate"
    assert done["played_text"] == TEXT
    await c.ws.close()


async def test_a_server_without_an_aligner_fails_the_chunk_with_its_answer(omni_ws, chained_gateway):
    _, base = await omni_ws("no_aligner")
    gw = await chained_gateway([base], WS)
    c = await Client.connect(gw)
    await c.start(word_timings=True)
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    error = await c.until("error")
    assert error["code"] == "engine_error" and "--forced-aligner" in error["message"], error
    await c.ws.close()


async def test_an_interrupt_closes_the_websocket_and_the_server_sees_it(omni_ws, chained_gateway):
    server, base = await omni_ws("real_time")
    gw = await chained_gateway([base], WS)
    c = await Client.connect(gw)
    await c.start(word_timings=True)
    long = "This turn is long enough to be interrupted while its only chunk still streams from the server " * 2
    await c.send({"type": "text", "turn_id": "t1", "text": long.strip(), "final": True})
    await c.until("audio.start")
    assert await wait_for(lambda: server.open_sessions == 1)
    await c.send({"type": "interrupt"})
    done = await c.until("turn.done")
    assert done["interrupted"] is True
    # the socket was closed, not left to stream the rest (about 10 s of audio made at real time)
    assert await wait_for(lambda: server.open_sessions == 0, timeout=3.0), "the WebSocket was not closed"
    assert gw.engine.counters["cancelled"] >= 1 and gw.engine.stats()["active"] == 0
    await c.ws.close()


def test_words_match_the_text_by_order_and_spelling():
    text = "Hello, World! It's 15% more."
    stamps = [
        {"word": "hello", "start_ms": 0, "end_ms": 100},
        {"word": "World", "start_ms": 150, "end_ms": 300},
        {"word": "It's", "start_ms": 400, "end_ms": 500},
    ]
    words = match_words(text, stamps, 2400, 24000)
    assert [(text[w.char_start : w.char_end], w.start, w.end) for w in words] == [
        ("Hello", 2400, 4800),
        ("World", 6000, 9600),
        ("It's", 12000, 14400),
    ]
    skipped = [stamps[0], stamps[2]]  # "World" would be passed over: not the text's words in order
    assert match_words(text, skipped, 0, 24000) is None
    assert match_words(text, [{"word": "Hello", "start_ms": 5, "end_ms": 1}], 0, 24000) is None
    assert match_words(text, None, 0, 24000) is None  # the aligner failed


def test_speech_transport_is_checked_at_load():
    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="speech_transport: must be http or websocket"):
        load_config(
            None, {"engine": {"kind": "openai-speech", "endpoints": ["http://h:1/v1"], "speech_transport": "grpc"}}
        )
    with pytest.raises(ConfigError, match="speech_transport: is only for kind: openai-speech"):
        load_config(None, {"engine": {"kind": "espeak", "speech_transport": "websocket"}})
