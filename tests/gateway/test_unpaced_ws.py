"""`/v1/ws` with `output.pacing: "none"`: audio as the engine makes it, marks as each chunk's audio is sent.

Real server on loopback, real websockets client. The checks that matter are exact: when a `mark` or
`turn.done` arrives, the client holds exactly `played_ms` of the turn's audio, and nothing of an
interrupted turn arrives after its `turn.done`.
"""

import asyncio
import json

from gateway.core.unpaced import UnpacedPlayout
from tests.conftest import Client

SLOW = {"simulated": {"ms_per_char": 70, "stream_rtf": 1.0, "packet_ms": 80}}  # audio comes about as fast as it plays


def _bytes_per_ms(started: dict) -> float:
    out = started["output"]
    return out["sample_rate"] / 1000 * (2 if out["encoding"] == "pcm16" else 1)


async def _record(c: Client, until_type: str, timeout: float = 15.0, **match) -> list:
    """Every message until `until_type`, as ("audio", nbytes) / ("event", msg), in arrival order."""
    log = []
    while True:
        raw = await asyncio.wait_for(c.ws.recv(), timeout)
        if isinstance(raw, bytes):
            log.append(("audio", len(raw)))
            continue
        msg = json.loads(raw)
        log.append(("event", msg))
        if msg["type"] == until_type and all(msg.get(k) == v for k, v in match.items()):
            return log


async def test_unpaced_audio_arrives_faster_than_it_plays_with_exact_marks(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 70}})
    c = await Client.connect(gw)
    started = await c.start(output={"encoding": "pcm16", "sample_rate": 16000, "pacing": "none"})
    assert started["output"]["pacing"] == "none"
    per_ms = _bytes_per_ms(started)
    loop = asyncio.get_running_loop()
    text1 = "Hello there. How are you today? I hope that all is well with you."
    t0 = loop.time()
    await c.send({"type": "text", "turn_id": "t1", "text": text1, "final": True})
    await c.send({"type": "text", "turn_id": "t2", "text": "Second turn.", "final": True})
    log = await _record(c, "turn.done", turn_id="t1")
    span = loop.time() - t0
    log += await _record(c, "turn.done", turn_id="t2")
    await c.close()

    received = 0.0  # ms of the current turn's audio received so far
    marks, dones, starts = [], [], []
    for kind, item in log:
        if kind == "audio":
            assert starts and len(starts) > len(dones), "audio before its turn's audio.start"
            received += item / per_ms
        elif item["type"] == "audio.start":
            starts.append(item)
            received = 0.0
        elif item["type"] == "mark":
            assert abs(item["played_ms"] - received) < 0.1, (item, received)  # the chunk's audio is all here
            marks.append(item)
        elif item["type"] == "turn.done":
            assert abs(item["played_ms"] - received) < 0.1, (item, received)
            dones.append(item)
    assert [s["turn_id"] for s in starts] == ["t1", "t2"]
    assert [d["turn_id"] for d in dones] == ["t1", "t2"] and not any(d["interrupted"] for d in dones)
    assert dones[0]["played_text"] == text1 and dones[1]["played_text"] == "Second turn."
    # marks carry each chunk's text: joined, they are the turn's text
    assert " ".join(m["text"] for m in marks if m["turn_id"] == "t1") == text1
    assert [m["chunk"] for m in marks if m["turn_id"] == "t1"] == list(
        range(len([m for m in marks if m["turn_id"] == "t1"]))
    )
    # unpaced: seconds of audio arrive in a fraction of their duration (paced would take all of it)
    assert dones[0]["played_ms"] > 3000 and span < 0.5 * dones[0]["played_ms"] / 1000


async def test_interrupt_stops_unpaced_audio_and_reports_what_was_sent(start_gateway):
    gw = await start_gateway(SLOW)
    c = await Client.connect(gw)
    started = await c.start(output={"encoding": "mulaw", "sample_rate": 8000, "pacing": "none"})
    per_ms = _bytes_per_ms(started)
    text = "This is a long first sentence that keeps going for a while. And here is a second one that never plays. A third."
    await c.send({"type": "text", "turn_id": "t1", "text": text, "final": True})
    received = 0
    while received < 8 * 400:  # 400 ms of audio in
        raw = await asyncio.wait_for(c.ws.recv(), 10)
        if isinstance(raw, bytes):
            received += len(raw)
    await c.send({"type": "interrupt"})
    log = await _record(c, "turn.done", turn_id="t1")
    received += sum(n for kind, n in log if kind == "audio")
    done = log[-1][1]
    assert done["interrupted"] is True and done["interrupted_by"] == "agent"
    assert abs(done["played_ms"] - received / per_ms) < 0.1  # what was sent, exactly
    assert done["played_ms"] < 4000
    assert done["played_text"] and text.startswith(done["played_text"]) and done["played_text"] != text
    # nothing of the turn after its turn.done; its late text gets turn_closed; the session goes on
    await c.send({"type": "text", "turn_id": "t1", "text": "late", "final": True})
    err = await c.until("error")
    assert err["code"] == "turn_closed"
    assert not [f for f in c.frames]
    await c.send({"type": "text", "turn_id": "t2", "text": "Next.", "final": True})
    after = await _record(c, "turn.done", turn_id="t2")
    assert [m["type"] for k, m in after if k == "event"][0] == "audio.start"
    assert after[-1][1]["played_text"] == "Next."
    await c.close()


async def test_bad_pacing_is_refused_and_the_connection_stays_usable(start_gateway):
    gw = await start_gateway()
    c = await Client.connect(gw)
    await c.send({"type": "session.start", "output": {"pacing": "fast"}})
    err = await c.until("error")
    assert err["code"] == "bad_message" and "pacing" in err["message"]
    started = await c.start(output={"pacing": "realtime"})
    assert started["output"]["pacing"] == "realtime"
    await c.close()
    c = await Client.connect(gw)
    started = await c.start(output={"pacing": None})  # null is the default, not a bad value
    assert started["output"]["pacing"] == "realtime"
    await c.close()


def test_engine_deadline_model_is_a_client_playing_in_real_time():
    now = [100.0]
    playout = UnpacedPlayout(24000, on_event=lambda ev: None, clock=lambda: now[0])
    playout.open_utterance("t")
    import numpy as np

    playout.push("t", 0, np.zeros(24000, np.float32))  # 1 s received at t=100
    assert playout.buffered_ms == 1000.0
    now[0] = 100.4
    assert abs(playout.buffered_ms - 600.0) < 1e-6
    playout.push("t", 0, np.zeros(12000, np.float32))  # queued behind what it still plays
    assert abs(playout.buffered_ms - 1100.0) < 1e-6
    now[0] = 103.0
    assert playout.buffered_ms == 0.0
    playout.flush()
    assert playout.buffered_ms == 0.0


async def test_a_slow_reader_gets_everything_in_order_and_interrupt_drops_what_was_not_sent(start_gateway):
    """The client reads slower than the engine speaks (its socket is full): the gateway waits for it, never
    skips audio, and an interrupt drops the audio still queued at the gateway — the client then receives
    exactly what turn.done reports as sent."""
    import socket

    import websockets

    # 70 s of audio made in under a second: far more than the kernel's socket buffers (4 MiB) hold
    gw = await start_gateway({"simulated": {"ms_per_char": 70, "stream_rtf": 0.01}})
    text = " ".join(f"Sentence number {i} is here to make the reply long enough." for i in range(17))
    output = {"encoding": "pcm16", "sample_rate": 48000, "pacing": "none"}  # 96 bytes per ms: the socket fills fast
    full = await Client.connect(gw)
    await full.start(output=output)
    await full.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    full_ms = (await full.until("turn.done", timeout=30))["played_ms"]
    await full.close()

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gw.port))
    c = Client(await websockets.connect(f"ws://127.0.0.1:{gw.port}/v1/ws", sock=sock, max_size=None, max_queue=1))
    await c.start(output=output)
    await c.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    await asyncio.sleep(1.5)  # not reading: the engine is done long before the client has the audio
    await c.send({"type": "interrupt"})
    log = await _record(c, "turn.done", timeout=30)
    done = log[-1][1]
    received_ms = sum(n for kind, n in log if kind == "audio") / 96
    assert done["interrupted"] is True
    assert abs(done["played_ms"] - received_ms) < 0.1  # nothing skipped, nothing after turn.done
    assert done["played_ms"] < 0.8 * full_ms  # the queued rest was dropped, not sent
    await c.send({"type": "text", "turn_id": "next", "text": "Next.", "final": True})
    after = await _record(c, "turn.done", turn_id="next")
    assert (
        after[0] == ("event", after[0][1]) and after[0][1]["type"] == "audio.start"
    )  # no audio of `t` after its turn.done
    await c.close()


async def test_unpaced_sessions_count_against_capacity_and_survive_an_engine_failure(start_gateway):
    gw = await start_gateway({"server": {"max_sessions": 1}})
    c = await Client.connect(gw)
    await c.start(output={"pacing": "none"})
    refused = await Client.connect(gw)  # the one slot is taken: refused at once, like any session
    assert (await refused.until("error"))["code"] == "at_capacity"
    await refused.close()

    gw.core.engine.inject_fault("raise")  # the engine's next step fails: the chunk in it fails, the session goes on
    await c.send({"type": "text", "turn_id": "t1", "text": "This chunk meets a failing engine.", "final": True})
    err = await c.until("error")
    assert err["code"] == "engine_error"
    done = await c.until("turn.done", turn_id="t1")
    assert done["interrupted"] is False
    await c.send({"type": "text", "turn_id": "t2", "text": "And this one speaks.", "final": True})
    log = await _record(c, "turn.done", turn_id="t2")
    assert sum(n for kind, n in log if kind == "audio") > 0 and log[-1][1]["played_text"] == "And this one speaks."
    await c.close()


async def test_session_end_with_drain_sends_the_rest_before_it_ends(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 70, "stream_rtf": 0.3}})
    c = await Client.connect(gw)
    started = await c.start(output={"encoding": "pcm16", "sample_rate": 8000, "pacing": "none"})
    text = "A reply that is still being made when the agent hangs up politely."
    await c.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    await c.send({"type": "session.end", "drain": True})
    log = await _record(c, "session.ended")
    done = next(m for kind, m in log if kind == "event" and m["type"] == "turn.done")
    assert done["interrupted"] is False and done["played_text"] == text
    assert abs(sum(n for kind, n in log if kind == "audio") / _bytes_per_ms(started) - done["played_ms"]) < 0.1
