"""Turn mode on /v1/ws and on a Twilio call, real sockets, the SimulatedEngine's turn mode: one
engine stream per turn fed the agent's words as they come, barge-in, `played_text`."""

from __future__ import annotations

import asyncio


from tests.conftest import Client

PIECES = ["Hello", " there,", " this", " is", " one", " generation", " for", " the", " whole", " turn."]
LONG = " ".join(["this", "turn", "goes", "on", "and", "on"] * 12) + "."


async def _feed(c, turn_id, pieces, gap_s):
    for i, piece in enumerate(pieces):
        await c.send({"type": "text", "turn_id": turn_id, "text": piece, "final": i == len(pieces) - 1})
        await asyncio.sleep(gap_s)


async def test_a_turn_fed_piece_by_piece_plays_as_one_stream(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 40}})
    c = await Client.connect(gw)
    started = await c.start(mode="turn")
    assert started["mode"] == "turn" and "mode_note" not in started
    requests = gw.engine.requests
    feeder = asyncio.ensure_future(_feed(c, "t1", PIECES, 0.03))
    start = await c.until("audio.start", turn_id="t1")
    done = await c.until("turn.done", turn_id="t1")
    await feeder
    assert gw.engine.requests - requests == 1  # one engine stream for the turn, not one per sentence
    assert done["interrupted"] is False and done["played_text"] == "".join(PIECES)
    assert done["played_ms"] >= 0.9 * 40 * len("".join(PIECES))
    assert 0 <= start["ttfa_ms"] < 1000  # from the first text piece
    # a second turn right after: sentence mode's chunker never saw either
    await c.send({"type": "text", "turn_id": "t2", "text": "Second turn. With two sentences.", "final": True})
    done2 = await c.until("turn.done", turn_id="t2")
    assert done2["played_text"] == "Second turn. With two sentences."
    assert [m["chunk"] for m in c.of_type("mark")] == [0, 0]
    await c.close()


async def test_two_turns_in_flight_play_in_order(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start(mode="turn")
    await c.send({"type": "text", "turn_id": "a", "text": "First turn speaks first.", "final": True})
    await c.send({"type": "text", "turn_id": "b", "text": "Then the second.", "final": True})
    da = await c.until("turn.done", turn_id="a")
    db = await c.until("turn.done", turn_id="b")
    assert (da["played_text"], db["played_text"]) == ("First turn speaks first.", "Then the second.")
    assert [s["turn_id"] for s in c.of_type("audio.start")] == ["a", "b"]
    await c.close()


async def test_barge_in_cancels_the_turns_generation_and_reports_what_played(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 40}})
    c = await Client.connect(gw)
    await c.start(mode="turn")
    await c.send({"type": "text", "turn_id": "t", "text": LONG[:200]})  # not final: the agent is still writing
    await c.until("audio.start", turn_id="t")
    await asyncio.sleep(0.6)
    await c.send({"type": "interrupt"})
    done = await c.until("turn.done", turn_id="t")
    assert done["interrupted"] is True
    heard = done["played_text"]
    assert heard and LONG.startswith(heard) and len(heard) < 200
    # about as much text as audio played (40 ms a character), never more than was played
    assert len(heard) * 40 <= done["played_ms"] + 40 * 8
    await asyncio.sleep(0.1)
    assert gw.engine.stats()["active"] == 0 and not gw.engine._jobs  # the generation is gone
    await c.send({"type": "text", "turn_id": "t", "text": " late", "final": True})
    assert (await c.until("error"))["code"] == "turn_closed"
    await c.close()


async def test_a_bad_mode_is_refused_and_the_config_default_applies(start_gateway):
    gw = await start_gateway({"chunker": {"mode": "turn"}})
    c = await Client.connect(gw)
    await c.send({"type": "session.start", "mode": "paragraph"})
    err = await c.until("error")
    assert err["code"] == "bad_message" and "mode" in err["message"]
    assert (await c.start())["mode"] == "turn"  # chunker.mode
    await c.close()


async def test_an_engine_without_turn_mode_falls_back_to_sentence_mode(start_gateway):
    gw = await start_gateway()
    gw.engine.supports_turns = False  # as the espeak engine
    c = await Client.connect(gw)
    started = await c.start(mode="turn")
    assert started["mode"] == "sentence" and "no turn mode" in started["mode_note"]
    await c.send({"type": "text", "turn_id": "t", "text": "Still spoken. In sentences.", "final": True})
    assert (await c.until("turn.done"))["played_text"] == "Still spoken. In sentences."
    await c.close()


async def test_a_late_agent_word_is_a_text_underrun_not_an_engine_one(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start(mode="turn")
    await c.send({"type": "text", "turn_id": "t", "text": "Hello there "})
    await c.until("audio.start")
    await asyncio.sleep(1.2)  # the LLM stalls: the engine has spoken every word it got
    await c.send({"type": "text", "turn_id": "t", "text": "my friend.", "final": True})
    done = await c.until("turn.done")
    underruns = c.of_type("underrun")
    assert underruns and all(u["cause"] == "text" for u in underruns)
    assert done["played_text"] == "Hello there my friend."
    await c.close()


async def test_the_speech_route_speaks_a_request_as_one_turn_in_turn_mode(start_gateway):
    import aiohttp

    gw = await start_gateway({"chunker": {"mode": "turn"}})
    opened = []
    real = gw.engine.open_turn
    gw.engine.open_turn = lambda request: opened.append(request) or real(request)
    text = "Hello there. This is the speech route, with a second sentence."
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{gw.port}/v1/audio/speech",
            json={"model": "tts-1", "input": text, "voice": "default", "response_format": "pcm"},
        ) as r:
            assert r.status == 200
            pcm = await r.read()
    assert len(opened) == 1  # one turn, not one request per sentence
    # 20 ms a character at 24 kHz, 16-bit (the simulated engine speaks the whole text in one stream)
    assert abs(len(pcm) / 2 / 24000 - 0.020 * len(text)) < 0.1


async def test_a_turn_whose_stream_failed_still_ends_when_its_text_does(start_gateway):
    """The engine fails a turn's stream while the agent is still writing: engine_error, and once the agent's
    final text comes the turn ends (turn.done) and the session's next turn plays (it hung before: nothing closed
    a turn-mode turn whose only chunk was already over)."""
    gw = await start_gateway({"simulated": {"ms_per_char": 40}})
    c = await Client.connect(gw)
    await c.start(mode="turn")
    await c.send({"type": "text", "turn_id": "t1", "text": "these words keep the stream speaking " * 4, "final": False})
    await c.until("audio.start", turn_id="t1")
    gw.core.engine.inject_fault("raise")
    err = await asyncio.wait_for(c.until("error"), 10)
    assert err["code"] == "engine_error", err
    await c.send({"type": "text", "turn_id": "t1", "text": "and the end.", "final": True})
    # paced silence keeps coming, so the helper's own timeout never fires: bound the wait here
    done = await asyncio.wait_for(c.until("turn.done", turn_id="t1"), 10)
    assert done["interrupted"] is False
    await c.send({"type": "text", "turn_id": "t2", "text": "The next turn plays.", "final": True})
    assert (await asyncio.wait_for(c.until("turn.done", turn_id="t2"), 10))["played_text"] == "The next turn plays."


async def test_turn_mode_sends_each_word_once_in_order_with_estimated_times(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 40}})
    c = await Client.connect(gw)
    await c.start(mode="turn", word_timings=True, output={"encoding": "pcm16", "sample_rate": 24000, "pacing": "none"})
    await _feed(c, "t1", PIECES, 0.03)
    done = await c.until("turn.done", turn_id="t1")
    words = [w for e in c.of_type("audio.words") for w in e["words"]]
    assert [w["text"] for w in words] == "".join(PIECES).split()
    assert {e["source"] for e in c.of_type("audio.words")} == {"estimate"} and done["timing_source"] == "estimate"
    assert all(a["end_ms"] <= b["start_ms"] + 1e-6 for a, b in zip(words, words[1:]))  # in order, no overlap
    assert words[-1]["end_ms"] <= done["played_ms"] + 1e-6
    await c.close()
