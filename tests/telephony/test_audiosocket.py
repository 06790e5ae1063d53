"""Asterisk AudioSocket leg: an AudioSocket client over TCP and the agent's control socket drive whole calls."""

from __future__ import annotations

import asyncio
import struct
import uuid
import wave

import numpy as np
import pytest

from gateway.legs import audiosocket
from gateway.wire import audiosocket as wire
from tests.telephony.clients import AudioSocketClient, Control, is_silent

LONG = "This turn is long enough to be interrupted while it plays. " * 3


def slin_tone(ms: int = 20) -> bytes:
    t = np.arange(8 * ms) / 8000.0
    return (np.sin(2 * np.pi * 440 * t) * 6000).astype("<i2").tobytes()


async def read_frames(client: AudioSocketClient, n: int) -> list[tuple[bytes, float]]:
    out = []
    while len(out) < n:
        kind, payload, t = await client.read()
        assert kind == wire.KIND_SLIN and len(payload) == 320
        out.append((payload, t))
    return out


async def read_until_audio(client: AudioSocketClient, limit: int = 200) -> list[tuple[bytes, float]]:
    """Silent frames are what Asterisk hears while idle; returns the frames up to and including the first non-silent one."""
    frames = []
    for _ in range(limit):
        frames += await read_frames(client, 1)
        if not is_silent(frames[-1][0]):
            return frames
    raise AssertionError("no audio")


async def _collect(client: AudioSocketClient, into: list, stop: asyncio.Event) -> None:
    while not stop.is_set():  # stops between messages, never inside one
        kind, payload, t = await client.read()
        if kind == wire.KIND_SLIN:
            into.append((payload, asyncio.get_running_loop().time()))


async def test_whole_call_over_tcp(gateway, tmp_path):
    call_uuid = uuid.uuid4()
    control = await Control.connect(gateway)
    attached = await control.attach(str(call_uuid).upper())  # ids compare in canonical form
    assert attached["call_id"] == str(call_uuid)

    client = await AudioSocketClient.connect(gateway, call_uuid)
    media = await control.expect("call.media")
    assert media["state"] == "connected" and media["leg"] == "audiosocket"

    # We own Asterisk's clock: silence every 20 ms while idle.
    idle = await read_frames(client, 10)
    assert all(is_silent(f) for f, _ in idle)
    span = idle[-1][1] - idle[0][1]
    assert span >= 0.5 * 9 * 0.020, f"10 idle frames in {span:.3f} s: not paced"

    for _ in range(10):
        client.send(wire.KIND_SLIN, slin_tone())
    client.send(wire.KIND_DTMF, b"#")
    assert (await control.expect("dtmf"))["digit"] == "#"

    await control.send({"type": "text", "turn_id": "t1", "text": "Hello from the gateway.", "final": True})
    await read_until_audio(client)
    done = await control.expect("turn.done", turn_id="t1")
    assert done["interrupted"] is False and done["played_ms"] > 200
    assert any(e["type"] == "mark" and e["turn_id"] == "t1" for e in control.events)

    # Barge-in: frames are read as they come; after the interrupt only silence follows.
    await control.send({"type": "text", "turn_id": "t2", "text": LONG, "final": True})
    await read_until_audio(client)
    frames: list[tuple[bytes, float]] = []
    stop = asyncio.Event()
    reader = asyncio.create_task(_collect(client, frames, stop))
    await asyncio.sleep(0.2)
    interrupted_at = asyncio.get_running_loop().time()
    await control.send({"type": "interrupt"})
    done = await control.expect("turn.done", turn_id="t2")
    assert done["interrupted"] is True and 0 < done["played_ms"] < 3000
    await asyncio.sleep(0.4)
    stop.set()
    await reader
    before = [f for f, t in frames if t < interrupted_at]
    late = [f for f, t in frames if t > interrupted_at + 0.1]
    assert any(not is_silent(f) for f in before)
    assert len(late) >= 10 and all(is_silent(f) for f in late)

    client.send(wire.KIND_HANGUP)
    assert (await control.expect("call.media"))["state"] == "ended"
    await control.expect("session.ended")
    await control.expect_closed()
    await client.read_until_eof()  # the server closed the connection
    (wav_path,) = (tmp_path / "inbound").glob(f"{call_uuid}-*.inbound.wav")
    with wave.open(str(wav_path)) as w:
        assert w.getnframes() == 10 * 160


async def test_gateway_hangs_up_when_the_agent_ends_the_session(gateway):
    client = await AudioSocketClient.connect(gateway)
    await read_frames(client, 2)  # media first; the agent attaches afterwards
    control = await Control.connect(gateway)
    await control.attach(str(client.uuid))
    await control.expect("call.media", state="connected")
    await control.send({"type": "session.end"})
    await control.expect("session.ended")
    rest = await client.read_until_eof()
    assert rest and rest[-1] == (wire.KIND_HANGUP, b"")


async def test_bad_handshake_is_refused_with_a_hangup(gateway):
    client = await AudioSocketClient.connect(gateway, handshake=False)
    client.send(wire.KIND_SLIN, slin_tone())  # audio before the UUID
    assert await client.read_until_eof() == [(wire.KIND_HANGUP, b"")]
    client = await AudioSocketClient.connect(gateway, handshake=False)
    client.send(wire.KIND_UUID, b"short")
    assert await client.read_until_eof() == [(wire.KIND_HANGUP, b"")]
    assert len(gateway.calls) == 0 and not gateway.sessions


async def attached_pair(gateway) -> tuple[AudioSocketClient, Control]:
    client = await AudioSocketClient.connect(gateway)
    control = await Control.connect(gateway)
    await control.attach(str(client.uuid))
    await control.expect("call.media", state="connected")
    return client, control


async def test_length_field_that_promises_more_than_comes_ends_only_that_call(gateway, monkeypatch):
    monkeypatch.setattr(audiosocket, "PAYLOAD_TIMEOUT_S", 0.3)
    bystander, bystander_control = await attached_pair(gateway)
    liar, liar_control = await attached_pair(gateway)
    liar.send_raw(struct.pack(">BH", wire.KIND_SLIN, 4000) + slin_tone())  # 320 of 4000 bytes, then silence
    error = await liar_control.expect("error")
    assert error["code"] == "bad_message" and "4000" in error["message"]
    await liar_control.expect("session.ended")
    rest = await liar.read_until_eof()
    assert rest[-1] == (wire.KIND_HANGUP, b"")

    await bystander_control.send({"type": "text", "turn_id": "b", "text": "Still here.", "final": True})
    await read_until_audio(bystander)
    await bystander_control.expect("turn.done", turn_id="b")
    assert not any(e["type"] == "error" for e in bystander_control.events)


async def test_malformed_frames_get_errors_and_the_call_goes_on(gateway):
    client, control = await attached_pair(gateway)
    client.send(wire.KIND_SLIN, b"\x01\x02\x03")  # odd length: not 16-bit samples
    assert (await control.expect("error"))["code"] == "bad_audio"
    client.send(wire.KIND_DTMF, b"xy")
    assert (await control.expect("error"))["code"] == "bad_message"
    client.send(0x12, b"\x00" * 640)  # slin16: newer Asterisk, not supported here
    assert (await control.expect("error"))["code"] == "unsupported_format"
    client.send(0x42, b"??")
    assert (await control.expect("error"))["code"] == "bad_message"
    client.send(wire.KIND_ERROR, b"\x02")  # Asterisk: frame forwarding error (not fatal)
    assert (await control.expect("error"))["code"] == "media_error"
    await control.send({"type": "text", "turn_id": "t", "text": "Fine.", "final": True})
    await read_until_audio(client)
    await control.expect("turn.done", turn_id="t")
    client.send(wire.KIND_ERROR, b"\x01")  # Asterisk: the caller hung up
    await control.expect("call.media", state="ended")
    await control.expect("session.ended")


async def test_a_desynchronised_stream_is_hung_up(gateway):
    client, control = await attached_pair(gateway)
    # A length field that says less than was sent: the rest of the payload is read as headers.
    client.send_raw(struct.pack(">BH", wire.KIND_SLIN, 2) + b"\x00\x00" + b"\x77\x00\x01\x00" * 3)
    await control.expect("session.ended")
    codes = [e["code"] for e in control.events if e["type"] == "error"]
    assert codes.count("bad_message") == audiosocket.MAX_BAD_FRAMES_IN_A_ROW
    await client.read_until_eof()


async def test_abrupt_disconnect_mid_frame_ends_the_call_cleanly(gateway):
    bystander, bystander_control = await attached_pair(gateway)
    client, control = await attached_pair(gateway)
    client.send_raw(struct.pack(">BH", wire.KIND_SLIN, 320) + b"\x00" * 100)
    await asyncio.sleep(0.05)
    client.writer.transport.abort()  # RST, no hangup message
    ended = await control.expect("call.media", state="ended")
    assert ended["reason"] == "disconnected"
    await control.expect_closed()
    assert len(gateway.calls) == 1
    frames = await read_frames(bystander, 5)  # the other call's clock never stopped
    assert len(frames) == 5
    assert not any(e["type"] == "error" for e in bystander_control.events)


async def test_a_second_media_leg_for_the_same_call_is_refused(gateway):
    first = await AudioSocketClient.connect(gateway)
    await read_frames(first, 1)
    second = await AudioSocketClient.connect(gateway, first.uuid)
    assert await second.read_until_eof() == [(wire.KIND_HANGUP, b"")]
    assert len(await read_frames(first, 3)) == 3


@pytest.mark.parametrize("wait", [True, False])
async def test_control_for_a_call_that_never_connects_ends_with_unknown_call(gateway, wait):
    control = await Control.connect(gateway)
    await control.attach(str(uuid.uuid4()))
    if wait:
        rest = await control.expect_closed(timeout=3)
        assert [e["type"] for e in rest][-2:] == ["error", "session.ended"]
        assert rest[-2]["code"] == "unknown_call"
    else:
        await control.close()
    await asyncio.sleep(0.05)
    assert len(gateway.calls) == 0 and not gateway.sessions
