"""Twilio Media Streams leg: a Twilio-like client and the agent's control socket drive whole calls."""

from __future__ import annotations

import asyncio
import base64
import wave

import numpy as np
import pytest
import websockets

from audio.g711 import ulaw_decode
from gateway.wire.twilio import twilio_signature
from tests.telephony.clients import Control, TwilioClient, tone_ulaw, ws_url

LONG = "This turn is long enough to be interrupted. " * 3


async def read_media_until_mark(tw: TwilioClient, timeout: float = 5.0):
    """Media frames (payload bytes, arrival time) up to the next mark; returns (frames, mark name)."""
    frames = []
    while True:
        msg, t = await tw.recv(timeout)
        if msg["event"] == "media":
            assert msg["streamSid"] == tw.stream_sid
            frames.append((base64.b64decode(msg["media"]["payload"]), t))
        elif msg["event"] == "mark":
            assert msg["streamSid"] == tw.stream_sid
            return frames, msg["mark"]["name"]
        else:
            raise AssertionError(f"unexpected message {msg}")


async def test_whole_call_text_marks_bargein_and_stop(gateway, tmp_path):
    control = await Control.connect(gateway)
    attached = await control.attach("call-1")
    assert attached["call_id"] == "call-1" and attached["session_id"]

    tw = await TwilioClient.connect(gateway)
    await tw.start(params={"call_id": "call-1"})
    assert (await control.expect("call.media"))["state"] == "connected"
    for _ in range(25):  # half a second of the caller's voice
        await tw.media(tone_ulaw())

    # A short turn: paced μ-law, then a mark after the chunk's audio, confirmed by our echo.
    await control.send({"type": "text", "turn_id": "t1", "text": "Hello there caller.", "final": True})
    frames, name = await read_media_until_mark(tw)
    assert name.startswith("t1/0/")
    assert len(frames) >= 10 and all(len(f) == 160 for f, _ in frames)
    assert any(np.abs(ulaw_decode(f).astype(int)).max() > 1000 for f, _ in frames)
    span = frames[-1][1] - frames[0][1]
    assert span >= 0.5 * (len(frames) - 1) * 0.020, f"{len(frames)} frames came in {span:.3f} s: not paced"
    await tw.echo_mark(name)
    played = await control.expect("call.mark")
    assert played["turn_id"] == "t1" and played["chunk"] == 0 and played["status"] == "played"
    done = await control.expect("turn.done", turn_id="t1")
    assert done["interrupted"] is False and done["played_ms"] >= 200
    assert any(e["type"] == "audio.start" for e in control.events)

    # Barge-in while a long turn plays: Twilio gets `clear`, later media stops, the held mark comes back as dropped.
    await control.send({"type": "text", "turn_id": "t2", "text": "Short one. " + LONG, "final": True})
    _, first = await read_media_until_mark(tw)
    assert first.startswith("t2/0/")
    await tw.echo_mark(first)  # chunk 0 played
    _, held = await read_media_until_mark(tw)  # the first progress mark inside chunk 1: never echoed before the clear
    assert held.startswith("t2/1/")
    await control.send({"type": "interrupt"})
    while True:
        msg, _ = await tw.recv()
        if msg["event"] == "clear":
            assert msg["streamSid"] == tw.stream_sid
            break
        assert msg["event"] in ("media", "mark")
    with pytest.raises(asyncio.TimeoutError):
        await tw.recv(timeout=0.3)  # the playout was flushed: nothing more to send
    await tw.echo_mark(held)  # Twilio returns pending marks after a clear: that audio was dropped, not heard
    done = await control.expect("turn.done", turn_id="t2")
    assert done["interrupted"] is True and done["played_text"] == "Short one."  # what Twilio confirmed
    assert [m["chunk"] for m in control.events if m["type"] == "mark" and m["turn_id"] == "t2"] == [0]

    await tw.dtmf("5")
    assert (await control.expect("dtmf"))["digit"] == "5"

    await tw.stop()
    assert (await control.expect("call.media"))["state"] == "ended"
    await control.expect("session.ended")
    await control.expect_closed()
    assert gateway.calls.get("call-1") is None and not gateway.sessions

    (wav_path,) = (tmp_path / "inbound").glob("call-1-*.inbound.wav")
    with wave.open(str(wav_path)) as w:
        assert w.getframerate() == 8000 and w.getnframes() == 25 * 160


async def test_media_first_then_control_attaches_by_call_sid(gateway):
    tw = await TwilioClient.connect(gateway, stream_sid="MZ77", call_sid="CA77")
    await tw.start()
    await asyncio.sleep(0.05)
    control = await Control.connect(gateway)
    attached = await control.attach("CA77")
    assert attached["call_id"] == "CA77"
    assert (await control.expect("call.media"))["state"] == "connected"
    await control.send({"type": "text", "turn_id": "a", "text": "Hi.", "final": True})
    frames, _ = await read_media_until_mark(tw)
    assert frames
    await tw.ws.close()  # Twilio hangs up without `stop`
    assert (await control.expect("call.media"))["state"] == "ended"
    await control.expect_closed()


async def test_inbound_audio_is_an_async_stream_of_decoded_pcm(gateway):
    tw = await TwilioClient.connect(gateway, stream_sid="MZ5", call_sid="CA5")
    await tw.start()
    await asyncio.sleep(0.05)
    stream = gateway.calls.get("MZ5").session.inbound.subscribe()
    sent = [tone_ulaw(freq=300 + 50 * i) for i in range(5)]
    for payload in sent:
        await tw.media(payload)
    got = [await asyncio.wait_for(stream.__anext__(), 2) for _ in sent]
    for pcm, payload in zip(got, sent):
        assert pcm.dtype == np.int16 and np.array_equal(pcm, ulaw_decode(payload))
    await tw.stop()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(stream.__anext__(), 2)  # the call ended: so does the stream


async def test_signature_is_verified_when_a_token_is_configured(make_gateway, monkeypatch):
    monkeypatch.setenv("VOXGATE_TEST_TWILIO_TOKEN", "secret-token")
    gw = await make_gateway(telephony={"twilio_auth_token_env": "VOXGATE_TEST_TWILIO_TOKEN"})
    url = ws_url(gw, "/v1/twilio")
    with pytest.raises(websockets.InvalidStatus) as refused:
        await TwilioClient.connect(gw)
    assert refused.value.response.status_code == 403
    with pytest.raises(websockets.InvalidStatus):
        await TwilioClient.connect(gw, headers={"X-Twilio-Signature": twilio_signature("wrong-token", url)})
    tw = await TwilioClient.connect(gw, headers={"X-Twilio-Signature": twilio_signature("secret-token", url)})
    await tw.start()
    await asyncio.sleep(0.05)
    assert gw.calls.get("MZ0001") is not None
    await tw.stop()


async def test_api_keys_without_a_twilio_token_close_the_twilio_endpoint_and_say_so(make_gateway, caplog):
    gw = await make_gateway(server={"api_keys": ["k1"]})  # more in tests/security/test_telephony_doors.py
    assert any("/v1/twilio refuses every stream" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    with pytest.raises(websockets.InvalidStatus) as refused:
        await TwilioClient.connect(gw)
    assert refused.value.response.status_code == 403


async def test_signature_uses_the_public_url_behind_a_proxy(make_gateway, monkeypatch):
    monkeypatch.setenv("VOXGATE_TEST_TWILIO_TOKEN", "secret-token")
    public = "wss://voice.example.com"
    gw = await make_gateway(telephony={"twilio_auth_token_env": "VOXGATE_TEST_TWILIO_TOKEN", "public_url": public})
    with pytest.raises(websockets.InvalidStatus):
        await TwilioClient.connect(
            gw, headers={"X-Twilio-Signature": twilio_signature("secret-token", ws_url(gw, "/v1/twilio"))}
        )
    tw = await TwilioClient.connect(
        gw, headers={"X-Twilio-Signature": twilio_signature("secret-token", public + "/v1/twilio")}
    )
    await tw.start()
    await tw.stop()


def test_signature_matches_twilios_documented_algorithm():
    # base64(HMAC-SHA1(token, url + sorted key+value pairs)), computed independently with the stdlib.
    import hashlib
    import hmac

    url, params = "https://example.com/voice", {"To": "+1555", "CallSid": "CA1"}
    expect = base64.b64encode(hmac.new(b"tok", (url + "CallSidCA1To+1555").encode(), hashlib.sha1).digest()).decode()
    assert twilio_signature("tok", url, params) == expect


async def test_missing_token_env_refuses_to_start(monkeypatch):
    from gateway.config import load_config
    from gateway.app import Gateway

    monkeypatch.delenv("VOXGATE_NO_SUCH_TOKEN", raising=False)
    with pytest.raises(ValueError, match="VOXGATE_NO_SUCH_TOKEN"):
        Gateway(
            load_config(
                None, {"engine": {"kind": "simulated"}, "telephony": {"twilio_auth_token_env": "VOXGATE_NO_SUCH_TOKEN"}}
            )
        )


@pytest.mark.parametrize("timestamp", ["nan", "inf", "-inf", "1e400"])
async def test_a_non_finite_media_timestamp_does_not_end_a_recorded_call(gateway, timestamp):
    control = await Control.connect(gateway)
    await control.attach("CAts")
    tw = await TwilioClient.connect(gateway, stream_sid="MZts", call_sid="CAts")
    await tw.start()
    await control.expect("call.media", state="connected")
    await tw.media(tone_ulaw(), timestamp_ms=0)
    await tw.send(
        {
            "event": "media",
            "streamSid": "MZts",
            "media": {
                "track": "inbound",
                "chunk": "2",
                "timestamp": timestamp,
                "payload": base64.b64encode(tone_ulaw()).decode(),
            },
        }
    )
    await tw.media(tone_ulaw(), timestamp_ms=40)
    await control.send({"type": "text", "turn_id": "t", "text": "Still here.", "final": True})
    await control.expect("turn.done", turn_id="t")
    assert not [e for e in control.events if e["type"] == "error"]
    assert gateway.calls.get("CAts").inbound.samples_received == 3 * 160
    await tw.stop()
    await control.expect("session.ended")


async def test_a_twilio_stream_that_stops_reading_never_stalls_other_calls(make_gateway):
    import socket

    # Short chunks of fast speech: a mark every 40 ms.
    gateway = await make_gateway(chunker={"max_chunk_chars": 20}, simulated={"ms_per_char": 2})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a far end that reads nothing fills up fast
    sock.connect(("127.0.0.1", gateway.port))
    sock.setblocking(False)
    stuck_ws = await websockets.connect(ws_url(gateway, "/v1/twilio"), sock=sock, compression=None, max_queue=1)
    stuck = TwilioClient(stuck_ws, "MZstuck", "CAstuck")
    await stuck.start()
    stuck_control = await Control.connect(gateway)
    await stuck_control.attach("CAstuck")
    await stuck_control.expect("call.media", state="connected")
    # Each mark names its turn: long ids make the marks to the stuck stream large.
    await stuck_control.send(
        {"type": "text", "turn_id": "s" * 50_000, "text": "Long words for a long while. " * 400, "final": True}
    )
    leg = gateway.calls.get("CAstuck").media
    for _ in range(200):  # until the socket's buffers are full and the gateway's side of it backs up
        if leg.transport.get_write_buffer_size() > 0:
            break
        await asyncio.sleep(0.05)

    bystander = await TwilioClient.connect(gateway, stream_sid="MZby", call_sid="CAby")
    await bystander.start()
    control = await Control.connect(gateway)
    await control.attach("CAby")
    await control.send({"type": "text", "turn_id": "b", "text": "Unbothered by the other stream. " * 40, "final": True})
    frames = 0
    while frames < 50:  # a second of paced audio: the shared clock still runs
        msg, _ = await bystander.recv(timeout=2.0)
        frames += msg["event"] == "media"
    await control.expect("turn.done", turn_id="b")
    # The stream that backed up megabytes is cut; its call ends like any dropped stream.
    ended = await stuck_control.expect("call.media", state="ended", timeout=10)
    assert ended["reason"] == "disconnected"
    stuck_ws.transport.abort()


async def test_an_unusable_recording_directory_skips_the_recording_and_leaks_no_session(make_gateway, tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    gateway = await make_gateway(telephony={"record_inbound_dir": str(tmp_path / "a-file" / "inbound")})
    control = await Control.connect(gateway)
    await control.attach("CArec")
    tw = await TwilioClient.connect(gateway, stream_sid="MZrec", call_sid="CArec")
    await tw.start()
    await control.expect("call.media", state="connected")
    await tw.media(tone_ulaw())
    await control.send({"type": "text", "turn_id": "t", "text": "Recorded or not.", "final": True})
    await control.expect("turn.done", turn_id="t")
    await tw.stop()
    await control.expect("session.ended")
    await control.expect_closed()
    assert not gateway.sessions
    tw.ws.transport.abort()  # it read none of the media sent to it


async def test_a_mark_larger_than_64_kib_reaches_a_reading_stream(make_gateway):
    gateway = await make_gateway(server={"limits": {"max_message_bytes": 200_000}})
    control = await Control.connect(gateway, max_size=None)
    await control.attach("CAlong")
    tw = await TwilioClient.connect(gateway, stream_sid="MZlong", call_sid="CAlong")
    await tw.start()
    await control.expect("call.media", state="connected")
    turn = "t" * 100_000
    await control.send({"type": "text", "turn_id": turn, "text": "Hi there.", "final": True})
    _, name = await read_media_until_mark(tw)
    assert name.startswith(turn + "/0/")
    await tw.stop()
