"""The native protocol end to end: a real server on loopback, a real websockets client."""

import asyncio
import json
import time

import aiohttp
import pytest
import websockets

from audio import filewriter
from tests.conftest import Client

FORMATS = [
    ("pcm16", 8000, 320),
    ("pcm16", 16000, 640),
    ("pcm16", 24000, 960),
    ("pcm16", 48000, 1920),
    ("mulaw", 8000, 160),
    ("alaw", 8000, 160),
]


@pytest.mark.parametrize("encoding,rate,frame_bytes", FORMATS)
async def test_two_turn_conversation_receives_paced_audio_in_every_format(start_gateway, encoding, rate, frame_bytes):
    gw = await start_gateway()
    c = await Client.connect(gw)
    started = await c.start(output={"encoding": encoding, "sample_rate": rate})
    assert started["output"] == {"encoding": encoding, "sample_rate": rate, "frame_ms": 20, "pacing": "realtime"}
    assert started["session_id"]
    await c.send({"type": "text", "turn_id": "t1", "text": "Hello there. How are ", "final": False})
    await c.send({"type": "text", "turn_id": "t1", "text": "you today?", "final": True})
    done1 = await c.until("turn.done", turn_id="t1")
    await c.send({"type": "text", "turn_id": "t2", "text": "Second turn here.", "final": True})
    done2 = await c.until("turn.done", turn_id="t2")
    await c.close()

    assert all(len(f) == frame_bytes for _, f in c.frames)
    for done in (done1, done2):
        assert done["interrupted"] is False
        assert done["gaps"] == {"micro": 0, "audible": 0}
    assert done1["played_text"] == "Hello there. How are you today?"
    assert done2["played_text"] == "Second turn here."
    total_ms = done1["played_ms"] + done2["played_ms"]
    # one frame per 20 ms of played audio (the last frame of a turn may be partly silence)
    assert abs(len(c.frames) * 20 - total_ms) <= 2 * 20 + 20
    starts = c.of_type("audio.start")
    assert [s["turn_id"] for s in starts] == ["t1", "t2"] and all(s["ttfa_ms"] >= 0 for s in starts)
    marks = c.of_type("mark")
    assert [(m["turn_id"], m["chunk"]) for m in marks] == [("t1", 0), ("t1", 1), ("t2", 0)]
    assert marks[1]["played_ms"] == done1["played_ms"]
    # Paced in real time: turn 1's frames span about its duration (generous: shared, noisy machines).
    t1_frames = [t for t, _ in c.frames][: int(done1["played_ms"] // 20)]
    span = t1_frames[-1] - t1_frames[0]
    assert 0.6 * done1["played_ms"] / 1000 <= span <= 3.0 * done1["played_ms"] / 1000 + 0.5


async def test_audio_start_comes_before_the_turns_first_frame(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "a", "text": "Just one sentence.", "final": True})
    await c.until("turn.done")
    first_frame_at = c.frames[0][0]
    audio_start_at = [t for t, m in c.events if m["type"] == "audio.start"][0]
    assert audio_start_at <= first_frame_at


async def test_slow_engine_yields_underruns_and_a_fast_one_none(start_gateway):
    slow = await start_gateway(
        {"simulated": {"stream_rtf": 2.0, "first_packet_ms": 20, "packet_ms": 80}, "playout": {"prebuffer_ms": 20}}
    )
    fast = await start_gateway()
    results = {}
    for name, gw in (("slow", slow), ("fast", fast)):
        c = await Client.connect(gw)
        await c.start()
        await c.send({"type": "text", "turn_id": "t", "text": "A sentence that takes a while to say.", "final": True})
        done = await c.until("turn.done", timeout=30)
        results[name] = (done, c.of_type("underrun"))
        await c.close()
    slow_done, slow_underruns = results["slow"]
    assert slow_underruns, "an engine slower than real time must produce underruns"
    assert all(u["cause"] == "engine" and u["kind"] in ("micro", "audible") for u in slow_underruns)
    assert sum(slow_done["gaps"].values()) == len(slow_underruns)
    fast_done, fast_underruns = results["fast"]
    assert fast_underruns == [] and fast_done["gaps"] == {"micro": 0, "audible": 0}
    text = await (await aiohttp.ClientSession().__aenter__()).get(f"http://127.0.0.1:{slow.port}/metrics")
    assert "voxgate_underruns_total" in await text.text()


async def test_text_that_arrives_late_is_a_gap_caused_by_text(start_gateway):
    gw = await start_gateway({"chunker": {"first_chunk_words": 0}})
    c = await Client.connect(gw)
    await c.start()
    # The chunker confirms a sentence end when the next sentence's first letter arrives.
    await c.send({"type": "text", "turn_id": "t", "text": "First sentence. Sec", "final": False})
    await c.until("mark", chunk=0)
    await asyncio.sleep(0.3)  # the agent's LLM is slow with the rest of the next sentence
    await c.send({"type": "text", "turn_id": "t", "text": "ond one.", "final": True})
    done = await c.until("turn.done")
    underruns = c.of_type("underrun")
    assert underruns and underruns[0]["cause"] == "text" and underruns[0]["kind"] == "audible"
    assert done["gaps"]["audible"] >= 1


async def test_interrupt_mid_turn_flushes_within_a_tick_and_reports_what_was_played(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 70}})
    c = await Client.connect(gw)
    await c.start()
    text = "This is a long answer that keeps going. It has several sentences. Nobody will hear the end of it. Really."
    await c.send({"type": "text", "turn_id": "t1", "text": text, "final": True})
    await c.until("audio.start")
    await asyncio.sleep(0.5)
    await c.send({"type": "interrupt"})
    sent_at = time.monotonic()
    done = await c.until("turn.done")
    assert done["interrupted"] is True
    assert 0 < done["played_ms"] < len(text) * 70
    heard = done["played_text"]
    assert text.startswith(heard) and len(heard) < len(text)
    # played_text is cut at the last word heard within played_ms (the engine speaks 70 ms per character)
    longest_word = max(len(w) for w in text.split())
    assert done["played_ms"] / 70 - (longest_word + 2) <= len(heard) <= done["played_ms"] / 70 + 1
    late_frames = [t for t, _ in c.frames if t > sent_at + 0.1]
    assert late_frames == []
    assert gw.engine.stats()["active"] + gw.engine.stats()["queued"] == 0  # engine slots freed
    # the next turn works normally
    await c.send({"type": "text", "turn_id": "t2", "text": "Okay.", "final": True})
    done2 = await c.until("turn.done", turn_id="t2")
    assert done2["interrupted"] is False and done2["played_text"] == "Okay."


async def test_interrupt_drops_queued_turns(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 70}})
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "a", "text": "First turn is fairly long to say out loud.", "final": True})
    await c.send({"type": "text", "turn_id": "b", "text": "Queued turn.", "final": True})
    await c.until("audio.start", turn_id="a")
    await c.send({"type": "interrupt"})
    da = await c.until("turn.done", turn_id="a")
    db = await c.until("turn.done", turn_id="b")
    assert da["interrupted"] and db["interrupted"] and db["played_ms"] == 0


async def test_queued_turn_plays_after_the_current_one(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "a", "text": "One sentence first.", "final": True})
    await c.send({"type": "text", "turn_id": "b", "text": "Then this.", "final": True})
    await c.until("turn.done", turn_id="b")
    order = [(m["type"], m.get("turn_id")) for _, m in c.events if m["type"] in ("audio.start", "turn.done")]
    assert order == [("audio.start", "a"), ("turn.done", "a"), ("audio.start", "b"), ("turn.done", "b")]
    ttfa_b = c.of_type("audio.start")[1]["ttfa_ms"]
    assert ttfa_b < 200  # measured from the moment turn a stopped playing; b was ready


async def test_fifty_concurrent_sessions_all_complete(start_gateway):
    gw = await start_gateway()

    async def call(i):
        c = await Client.connect(gw)
        await c.start(output={"encoding": "mulaw", "sample_rate": 8000})
        await c.send({"type": "text", "turn_id": f"t{i}", "text": f"Caller number {i} hears this.", "final": True})
        done = await c.until("turn.done", timeout=60)
        await c.send({"type": "session.end"})
        await c.until("session.ended")
        await c.close()
        return done, len(c.frames)

    results = await asyncio.gather(*(call(i) for i in range(50)))
    assert len(results) == 50
    for done, frames in results:
        assert done["interrupted"] is False and done["played_ms"] > 0 and frames > 0
    await asyncio.sleep(0.1)
    assert len(gw.sessions) == 0


async def test_session_end_with_drain_plays_queued_audio_first(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t", "text": "Goodbye and thank you for calling.", "final": False})
    await c.send({"type": "session.end", "drain": True})
    done = await c.until("turn.done")
    await c.until("session.ended")
    assert done["interrupted"] is False and done["played_text"] == "Goodbye and thank you for calling."
    with pytest.raises(websockets.ConnectionClosed):
        for _ in range(100):
            await c.ws.recv()


async def test_session_end_without_drain_stops_at_once(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 70}})
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t", "text": "A long goodbye that will be cut short.", "final": True})
    await c.until("audio.start")
    await c.send({"type": "session.end", "drain": False})
    done = await c.until("turn.done")
    await c.until("session.ended")
    assert done["interrupted"] is True


# ------------------------------------------------------------------ bad input


async def expect_error(c: Client, code: str) -> dict:
    msg = await c.until("error")
    assert msg["code"] == code, msg
    assert msg["message"]
    return msg


async def test_every_bad_message_gets_its_code_and_the_session_goes_on(start_gateway):
    gw = await start_gateway({"server": {"limits": {"max_message_bytes": 1024, "max_text_per_turn": 100}}})
    c = await Client.connect(gw)
    await c.send({"type": "text", "turn_id": "x", "text": "too early"})
    await expect_error(c, "no_session")
    await c.start()
    cases = [
        ("{not json", "bad_json"),
        (json.dumps([1, 2]), "bad_message"),
        (json.dumps({"type": "dance"}), "unknown_type"),
        (json.dumps({"type": "text", "text": "no turn id"}), "bad_message"),
        (json.dumps({"type": "text", "turn_id": "t", "text": 42}), "bad_message"),
        (json.dumps({"type": "text", "turn_id": "t", "text": "x", "final": "yes"}), "bad_message"),
        (json.dumps({"type": "session.start"}), "session_exists"),
        (json.dumps({"type": "text", "turn_id": "t", "text": "x" * 2000}), "too_large"),
        (json.dumps({"type": "text", "turn_id": "t", "text": "y" * 500}), "text_too_long"),
        (json.dumps({"type": "user.text", "text": "hi agent"}), "no_agent"),
        (b"\x00\x01binary", "binary_not_allowed"),
    ]
    for raw, code in cases:
        await c.send(raw)
        await expect_error(c, code)
    await c.send({"type": "text", "turn_id": "ok", "text": "Still alive.", "final": True})
    done = await c.until("turn.done", turn_id="ok")
    assert done["played_text"] == "Still alive."
    await c.send({"type": "text", "turn_id": "ok2", "text": "Done.", "final": True})
    await c.until("turn.done", turn_id="ok2")
    await c.send({"type": "text", "turn_id": "open", "text": "Open turn text here that is long enough.", "final": True})
    await c.send({"type": "text", "turn_id": "open", "text": "late", "final": True})
    await expect_error(c, "turn_closed")


@pytest.mark.parametrize(
    "start,code",
    [
        ({"output": {"encoding": "opus", "sample_rate": 48000}}, "unsupported_format"),
        ({"output": {"encoding": "mulaw", "sample_rate": 16000}}, "unsupported_format"),
        ({"output": {"encoding": "pcm16", "sample_rate": 44100}}, "unsupported_format"),
        ({"voice": "nobody"}, "unknown_voice"),
        ({"language": "english please"}, "bad_message"),
        ({"voice": 7}, "bad_message"),
    ],
)
async def test_bad_session_start_is_refused_and_a_good_one_follows(start_gateway, start, code):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.send({"type": "session.start", **start})
    await expect_error(c, code)
    started = await c.start()
    assert started["voice"] == "default"


async def test_at_capacity_closes_with_1013_and_others_are_untouched(start_gateway):
    gw = await start_gateway({"server": {"max_sessions": 1}})
    first = await Client.connect(gw)
    await first.start()
    second = await Client.connect(gw)
    await expect_error(second, "at_capacity")
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await second.ws.recv()
    assert closed.value.rcvd.code == 1013
    await first.send({"type": "text", "turn_id": "t", "text": "Unaffected.", "final": True})
    assert (await first.until("turn.done"))["played_text"] == "Unaffected."


async def test_api_keys_are_required_when_configured(start_gateway):
    gw = await start_gateway({"server": {"api_keys": ["s3cret"]}})
    with pytest.raises(websockets.InvalidStatus) as refused:
        await Client.connect(gw)
    assert refused.value.response.status_code == 401
    c = await Client.connect(gw, additional_headers={"Authorization": "Bearer s3cret"})
    await c.start()
    with pytest.raises(websockets.InvalidStatus) as in_query:  # a key in a URL ends up in logs: never taken there
        await Client.connect(gw, path="/v1/ws?token=s3cret")
    assert in_query.value.response.status_code == 401


async def test_idle_session_is_closed_with_idle_timeout(start_gateway):
    gw = await start_gateway({"server": {"limits": {"idle_timeout_s": 0.3}}})
    c = await Client.connect(gw)
    await c.start()
    err = await c.until("error", timeout=5)
    assert err["code"] == "idle_timeout"
    await c.until("session.ended")


async def test_max_call_length_ends_the_call(start_gateway):
    gw = await start_gateway({"server": {"limits": {"max_call_s": 0.3}}})
    c = await Client.connect(gw)
    await c.start()
    assert (await c.until("error", timeout=5))["code"] == "call_too_long"
    await c.until("session.ended")


async def test_health_ready_metrics_and_voices(start_gateway):
    gw = await start_gateway()
    async with aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{gw.port}"
        assert (await (await http.get(base + "/healthz")).json())["status"] == "ok"
        ready = await http.get(base + "/readyz")
        assert ready.status == 200 and (await ready.json())["engine"] == "simulated"
        metrics = await (await http.get(base + "/metrics")).text()
        for name in (
            "voxgate_sessions_active",
            "voxgate_ttfa_seconds",
            "voxgate_underruns_total",
            "voxgate_engine_queue_depth",
        ):
            assert name in metrics
        assert 'voxgate_engine_info{kind="simulated",vocoder="none"} 1.0' in metrics
        assert 'voxgate_engine_stat{name="audio_seconds"}' in metrics
        voices = await (await http.get(base + "/v1/voices")).json()
        assert voices["default"] == "default" and voices["voices"][0]["name"] == "default"


async def test_graceful_drain_lets_the_turn_finish_then_closes_with_1001(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t", "text": "Finishing my sentence.", "final": True})
    await c.until("audio.start")
    drain = asyncio.create_task(gw.drain(timeout=10))
    done = await c.until("turn.done")
    assert done["interrupted"] is False
    assert (await c.until("error"))["code"] == "shutting_down"
    await c.until("session.ended")
    with pytest.raises(websockets.ConnectionClosed) as closed:
        for _ in range(100):
            await c.ws.recv()
    assert closed.value.rcvd.code == 1001
    await drain
    async with aiohttp.ClientSession() as http:
        assert (await http.get(f"http://127.0.0.1:{gw.port}/readyz")).status == 503


async def test_turn_done_and_the_last_mark_come_after_the_turns_last_frame(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "a", "text": "Exactly one sentence.", "final": True})
    done = await c.until("turn.done")
    await asyncio.sleep(0.1)
    await c.send({"type": "session.end"})
    await c.until("session.ended")
    done_at = [t for t, m in c.events if m["type"] == "turn.done"][0]
    assert all(t <= done_at for t, _ in c.frames)
    assert len(c.frames) == -(-int(done["played_ms"]) // 20)  # every frame of the turn, none after


async def test_log_dir_gets_each_sessions_event_log_and_wav_timeline(start_gateway, tmp_path):
    import wave

    log_dir = tmp_path / "calls" / "today"  # created at start
    gw = await start_gateway({"server": {"log_dir": str(log_dir), "record_wav": True}})
    c = await Client.connect(gw)
    started = await c.start(output={"encoding": "pcm16", "sample_rate": 16000})
    await c.send({"type": "text", "turn_id": "t", "text": "Recorded for quality.", "final": True})
    done = await c.until("turn.done")
    await c.send({"type": "session.end"})
    await c.until("session.ended")
    assert filewriter.sync()  # the writer thread writes the files
    sid = started["session_id"]
    events = [json.loads(line) for line in (log_dir / f"{sid}.events.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events][:2] == ["utterance_start", "first_audio"]
    assert events[-1]["type"] == "utterance_end" and events[-1]["played_ms"] == done["played_ms"]
    with wave.open(str(log_dir / f"{sid}.wav")) as w:
        assert w.getframerate() == 16000
        assert (
            w.getnframes() * 1000 / 16000 >= done["played_ms"]
        )  # the timeline holds the turn and the silence around it


async def test_a_client_that_stops_reading_never_stalls_other_calls(start_gateway):
    # short chunks: the clock owes the stuck client a (30 kB) mark every few hundred ms
    gw = await start_gateway({"server": {"limits": {"max_message_bytes": 200_000}}, "chunker": {"max_chunk_chars": 20}})
    stuck = await Client.connect(gw, max_queue=1)
    await stuck.start()
    await stuck.send(
        {"type": "text", "turn_id": "s" * 30_000, "text": "Long words for a long while. " * 20, "final": True}
    )
    junk = json.dumps({"type": "x" * 60_000})  # each answered with an error that echoes its type

    async def flood():
        for _ in range(300):
            await stuck.send(junk)

    flooding = asyncio.get_running_loop().create_task(flood())
    for _ in range(100):  # the gateway's socket to the stuck client backs up within a few seconds
        if not gw.sessions:
            break  # the stuck client was dropped
        await asyncio.sleep(0.05)
    bystander = await Client.connect(gw)
    await bystander.start()
    await bystander.send(
        {"type": "text", "turn_id": "b", "text": "Unbothered by the other caller. " * 3, "final": True}
    )
    done = await bystander.until("turn.done", timeout=20)
    assert done["gaps"] == {"micro": 0, "audible": 0}
    spans = [b - a for (a, _), (b, _) in zip(bystander.frames, bystander.frames[1:])]
    assert len(bystander.frames) * 20 >= done["played_ms"] - 40 and max(spans) < 0.5  # paced, never stalled
    assert len(gw.sessions) == 1  # the stuck client's session was dropped, the bystander's goes on
    flooding.cancel()
    stuck.ws.transport.abort()


async def test_frames_written_past_aiohttps_writer_arrive_whole_and_are_all_counted(start_gateway):
    """The 20 ms path writes each binary frame straight to the socket (native_ws.send_audio): a strict client
    (websockets) reads every frame whole between the events, and frames_sent counts each one once the call ends
    (it is added to once a second per call)."""
    import re

    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.start(output={"encoding": "mulaw", "sample_rate": 8000})
    await c.send(
        {
            "type": "text",
            "turn_id": "t",
            "text": "One turn long enough for more than a second of frames, " * 3,
            "final": True,
        }
    )
    done = await c.until("turn.done")
    await c.send({"type": "session.end"})
    await c.until("session.ended")
    assert len(c.frames) > 60 and all(len(f) == 160 for _, f in c.frames)  # a batch of 50 reported, and the rest
    assert abs(len(c.frames) * 20 - done["played_ms"]) <= 20
    await c.ws.close()
    for _ in range(100):  # the handler reports the last frames as it ends
        if not gw.sessions:
            break
        await asyncio.sleep(0.02)
    async with aiohttp.ClientSession() as http:
        metrics = await (await http.get(f"http://127.0.0.1:{gw.port}/metrics")).text()
    sent = float(re.search(r'^voxgate_frames_sent_total\{leg="ws"\} (\S+)$', metrics, re.M).group(1))
    assert sent == len(c.frames)


async def test_a_socket_whose_session_start_was_refused_is_told_and_closed_at_stop(start_gateway):
    """A refused session.start leaves a socket with no session; at stop nothing else ends it, and the HTTP server
    used to wait ~30 s on it before cancelling its handler. Now stop tells it `shutting_down` and closes it (1001)."""
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.send({"type": "session.start", "output": {"encoding": "bogus"}})
    assert (await c.until("error"))["code"] == "unsupported_format"
    stopping = asyncio.create_task(gw.stop())
    try:
        error = await c.until("error", timeout=10)  # the old gateway sent nothing until its handler was cancelled
        assert error["code"] == "shutting_down"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(c.ws.recv(), 10)
        assert closed.value.rcvd.code == 1001
    finally:
        await stopping
