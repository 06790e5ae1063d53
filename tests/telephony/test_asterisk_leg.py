"""/v1/asterisk: an Asterisk-like chan_websocket far end and the agent's control socket drive whole calls."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest
import websockets

from tests.telephony.clients import Control
from tests.telephony.wire_clients import AsteriskClient, tone

LONG = "This turn is long enough to be interrupted by the caller. " * 4


async def wait_for(predicate, timeout: float = 5.0, step: float = 0.01) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(step)


def paced(arrivals: list[float], frames: int) -> None:
    span = arrivals[-1] - arrivals[0]
    assert span >= 0.5 * (frames - 1) * 0.020, f"{frames} frames came in {span:.3f} s: not paced"


async def test_whole_call_json_control_marks_bargein_dtmf_and_hangup(gateway):
    control = await Control.connect(gateway)
    await control.attach("1761245643.1")  # the channel's unique id, which MEDIA_START carries
    ast = await AsteriskClient.connect(gateway, channel_id="1761245643.1")
    connected = await control.expect("call.media")
    assert connected["state"] == "connected" and connected["leg"] == "asterisk"

    # The caller's audio reaches the session's inbound stream, decoded.
    stream = gateway.calls.get("1761245643.1").session.inbound.subscribe()
    await ast.caller_audio(tone(160))
    heard = await asyncio.wait_for(stream.__anext__(), 2)
    assert len(heard) == 160 and np.abs(heard.astype(int) - tone(160)).max() < 300

    # A turn: paced μ-law in whole 160-byte frames, then MARK_MEDIA; Asterisk's MEDIA_MARK_PROCESSED drives call.mark.
    await control.send({"type": "text", "turn_id": "t1", "text": "Hello there caller.", "final": True})
    played = await control.expect("call.mark")
    assert played["turn_id"] == "t1" and played["chunk"] == 0 and played["status"] == "played"
    done = await control.expect("turn.done", turn_id="t1")
    assert not done["interrupted"] and done["played_ms"] >= 200
    frames = [(m, t) for m, t in ast.got.media]
    assert len(frames) >= 10 and all(len(m) == 160 for m, _ in frames)
    paced([t for _, t in frames], len(frames))
    assert np.abs(ast.audio_pcm().astype(int)).max() > 1000  # speech, not silence
    assert ast.command_names()[-1] == "MARK_MEDIA"

    # Barge-in: FLUSH_MEDIA goes out, media stops, the mark Asterisk never reached is reported dropped.
    ast.playing = False  # the far end's buffer has not played it yet
    await control.send({"type": "text", "turn_id": "t2", "text": "Short one. " + LONG, "final": True})
    await wait_for(lambda: ast.command_names().count("MARK_MEDIA") >= 2)
    await control.send({"type": "interrupt"})
    await wait_for(lambda: "FLUSH_MEDIA" in ast.command_names())
    done = await control.expect("turn.done", turn_id="t2")
    assert done["interrupted"] and done["played_text"] == ""  # sent, but Asterisk never played it: nothing heard
    dropped = await control.expect("call.mark", turn_id="t2")
    assert dropped["status"] == "dropped" and dropped["chunk"] == 0
    count = len(ast.got.media)
    await asyncio.sleep(0.3)
    assert len(ast.got.media) == count  # the playout was flushed: nothing more is sent

    # played_text follows MEDIA_MARK_PROCESSED: Asterisk plays chunk 0, then its queue stalls; barge-in
    # leaves exactly the confirmed chunk as heard, although more audio had been sent.
    ast.playing = True
    await control.send({"type": "text", "turn_id": "t3", "text": "Short one. " + LONG, "final": True})
    assert (await control.expect("call.mark", turn_id="t3"))["status"] == "played"
    ast.playing = False
    await wait_for(lambda: ast.queued_frames >= 10)  # 200 ms sent that the caller has not heard
    await control.send({"type": "interrupt"})
    done = await control.expect("turn.done", turn_id="t3")
    assert done["played_text"] == "Short one." and done["played_ms"] < done["sent_ms"] - 150
    ast.playing = True

    await ast.event("DTMF_END", digit="7")
    assert (await control.expect("dtmf"))["digit"] == "7"
    assert ast.violations == []

    await ast.close()  # Asterisk hangs up: the socket closes
    ended = await control.expect("call.media")
    assert ended["state"] == "ended"
    await control.expect("session.ended")
    assert gateway.calls.get("1761245643.1") is None


async def test_plain_text_control_slin16_call_id_from_the_dial_string_and_agent_hangup(gateway):
    # Dial(WebSocket/voxgate/c(slin16)v(call_id=order-7)) without f(json): the URI carries call_id.
    ast = await AsteriskClient.connect(
        gateway, channel_id="pbx1-99.3", fmt="slin16", json_control=False, call_id="order-7"
    )
    control = await Control.connect(gateway)
    await control.attach("order-7")
    await control.expect("call.media", state="connected")
    session = gateway.calls.get("order-7").session  # Asterisk started the call: wideband end to end, no 8 kHz step
    assert session.output.sample_rate == 16000 and session.inbound.sample_rate == 16000
    await control.send({"type": "text", "turn_id": "a", "text": "Wideband hello to you.", "final": True})
    mark = await control.expect("call.mark")
    assert mark["status"] == "played"
    assert ast.commands("MARK_MEDIA")[0].startswith("MARK_MEDIA m")  # answered in plain text, as MEDIA_START came
    assert all(len(m) % 640 == 0 for m, _ in ast.got.media)  # slin16: 640 bytes per 20 ms
    pcm = ast.audio_pcm()
    assert len(pcm) >= 16000 * 0.2 and np.abs(pcm.astype(int)).max() > 1000
    await control.send({"type": "session.end"})
    await asyncio.wait_for(ast.closed.wait(), 5)
    assert ast.command_names()[-1] == "HANGUP" and ast.violations == []


async def test_media_xoff_holds_our_frames_until_xon(gateway):
    control = await Control.connect(gateway)
    await control.attach("xoff-1")
    ast = await AsteriskClient.connect(gateway, channel_id="xoff-1")
    await control.expect("call.media", state="connected")
    await control.send(
        {"type": "text", "turn_id": "t", "text": "Flow control keeps Asterisk's queue in bounds.", "final": True}
    )
    await wait_for(lambda: len(ast.got.media) >= 5)
    await ast.event("MEDIA_XOFF")
    # What was in flight lands (however loaded the machine); if XOFF were ignored, frames would keep coming.
    deadline = asyncio.get_running_loop().time() + 3.0
    before = -1
    while before != len(ast.got.media):
        assert asyncio.get_running_loop().time() < deadline, "media kept coming after MEDIA_XOFF"
        before = len(ast.got.media)
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.4)
    assert len(ast.got.media) == before, "media kept coming after MEDIA_XOFF"
    await ast.event("MEDIA_XON")
    await control.expect("turn.done", turn_id="t")
    await control.expect("call.mark", status="played")
    assert len(ast.got.media) > before + 15  # the held 400 ms came after XON, none lost
    assert ast.violations == []
    await ast.close()


async def test_malformed_input_gets_errors_and_never_touches_another_call(gateway):
    ca, cb = await Control.connect(gateway), await Control.connect(gateway)
    await ca.attach("bad-1")
    await cb.attach("good-1")
    bad = await AsteriskClient.connect(gateway, channel_id="bad-1")
    good = await AsteriskClient.connect(gateway, channel_id="good-1")
    await ca.expect("call.media", state="connected")
    await cb.expect("call.media", state="connected")
    await cb.send({"type": "text", "turn_id": "g", "text": "This call must not notice the other one.", "final": True})
    for raw in [
        '{"event": "MEDIA_XON"',
        '{"event": "MEDIA_PARTY", "channel_id": "bad-1"}',
        "DTMF_END digit:Z",
        '{"event": "MEDIA_MARK_PROCESSED", "correlation_id": "never-sent"}',
        "MEDIA_START channel_id:bad-1 format:ulaw",
    ]:
        await bad.send(raw)
    codes = [(await ca.expect("error"))["code"] for _ in range(5)]
    assert codes == ["bad_json", "unknown_type", "bad_message", "bad_message", "bad_message"]
    await ca.send({"type": "text", "turn_id": "a", "text": "Still here.", "final": True})  # the bad call still works
    assert (await ca.expect("turn.done", turn_id="a"))["interrupted"] is False
    done = await cb.expect("turn.done", turn_id="g")
    assert not done["interrupted"] and not [e for e in cb.events if e["type"] == "error"]
    await bad.close()
    await good.close()


async def test_a_stream_that_cannot_start_is_closed_and_registers_nothing(gateway):
    ast = await AsteriskClient.connect(gateway, start=False)
    await ast.send(
        "MEDIA_START connection_id:voxgate channel:WebSocket/voxgate/0x1 channel_id:opus-1 format:opus optimal_frame_size:0 ptime:20"
    )
    await asyncio.wait_for(ast.closed.wait(), 5)
    assert ast.ws.close_code == 1008 and gateway.calls.get("opus-1") is None
    # A media socket without the subprotocol Asterisk offers still gets no other one.
    async with websockets.connect(f"ws://127.0.0.1:{gateway.port}/v1/asterisk", compression=None) as ws:
        assert ws.subprotocol is None


async def test_api_keys_refuse_an_unauthenticated_far_end_and_accept_basic_auth(make_gateway):
    gw = await make_gateway(server={"api_keys": ["k1"]})
    with pytest.raises(websockets.InvalidStatus) as refused:
        await AsteriskClient.connect(gw)
    assert refused.value.response.status_code == 401
    basic = "Basic " + base64.b64encode(b"asterisk:k1").decode()  # websocket_client.conf username/password
    ws = await websockets.connect(
        f"ws://127.0.0.1:{gw.port}/v1/asterisk", subprotocols=["media"], additional_headers={"Authorization": basic}
    )
    await ws.send(
        json.dumps(
            {"event": "MEDIA_START", "channel_id": "auth-1", "format": "ulaw", "optimal_frame_size": 160, "ptime": 20}
        )
    )
    await asyncio.sleep(0.1)
    assert gw.calls.get("auth-1") is not None
    await ws.close()


async def test_an_oversized_message_ends_only_that_call(gateway):
    control = await Control.connect(gateway)
    await control.attach("big-1")
    ast = await AsteriskClient.connect(gateway, channel_id="big-1")
    await control.expect("call.media", state="connected")
    await ast.send(b"\xff" * 300_000)  # far above Asterisk's own 65,500-byte limit
    assert (await control.expect("error"))["code"] == "too_large"
    await control.expect("session.ended")
    await asyncio.wait_for(ast.closed.wait(), 5)
    assert ast.ws.close_code == 1009
