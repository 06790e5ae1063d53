"""/v1/telnyx: a Telnyx-like media stream far end (bidirectional RTP mode) and the agent's control socket."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from tests.telephony.clients import Control
from tests.telephony.test_asterisk_leg import LONG, paced, wait_for
from tests.telephony.wire_clients import TelnyxClient, tone


async def test_whole_call_pcmu_marks_clear_dtmf_and_stop(gateway):
    control = await Control.connect(gateway)
    await control.attach("v3:ccid-1")  # call_control_id, the id Call Control uses everywhere
    tx = await TelnyxClient.connect(gateway, call_control_id="v3:ccid-1", stream_id="S-1")
    assert (await control.expect("call.media"))["leg"] == "telnyx"

    await control.send({"type": "text", "turn_id": "t1", "text": "Hello from voxgate.", "final": True})
    played = await control.expect("call.mark")
    assert played["turn_id"] == "t1" and played["status"] == "played"
    await control.expect("turn.done", turn_id="t1")
    assert len(tx.got.media) >= 10 and all(len(m) == 160 for m, _ in tx.got.media)  # whole 20 ms PCMU frames
    paced([t for _, t in tx.got.media], len(tx.got.media))
    assert np.abs(tx.audio_pcm().astype(int)).max() > 1000

    # Barge-in: Telnyx gets `clear` and sends the queued marks back, which we report as dropped.
    tx.playing = False  # the far end's buffer has not played it yet
    await control.send({"type": "text", "turn_id": "t2", "text": "Short one. " + LONG, "final": True})
    await wait_for(lambda: len(tx.commands("mark")) >= 2)
    await control.send({"type": "interrupt"})
    await wait_for(lambda: "clear" in tx.command_names())
    assert (await control.expect("turn.done", turn_id="t2"))["interrupted"]
    dropped = await control.expect("call.mark", turn_id="t2")
    assert dropped["status"] == "dropped"

    await tx.dtmf("9")
    assert (await control.expect("dtmf"))["digit"] == "9"
    await tx.stop()
    assert (await control.expect("call.media"))["state"] == "ended"
    await control.expect("session.ended")
    assert tx.violations == []


async def test_out_of_order_caller_frames_are_reordered_before_the_inbound_stream(gateway):
    tx = await TelnyxClient.connect(gateway, call_control_id="v3:ccid-2", stream_id="S-2")
    await wait_for(lambda: gateway.calls.get("v3:ccid-2") is not None)
    stream = gateway.calls.get("v3:ccid-2").session.inbound.subscribe()
    frames = [tone(160, freq=300 + 100 * i) for i in range(6)]
    messages = [tx.media_msg(f) for f in frames]
    for i in (0, 2, 1, 3, 5, 4):  # the network swapped neighbours
        await tx.send(messages[i])
    got = [await asyncio.wait_for(stream.__anext__(), 2) for _ in frames]
    decoded = [tx.out.decode(tx.out.encode(f)) for f in frames]
    assert all(np.array_equal(g, d) for g, d in zip(got, decoded)), "frames reached the session out of order"
    await tx.stop()


async def test_l16_16k_with_custom_parameters_and_a_bidirectional_codec_override(gateway):
    # stream L16/16 kHz in, and (stream_bidirectional_codec=L16, …_sampling_rate=16000) back, named on the URL
    tx = await TelnyxClient.connect(
        gateway,
        codec="L16",
        call_control_id="v3:ccid-3",
        stream_id="S-3",
        custom_parameters={"call_id": "order-3"},
        bidirectional_codec="L16",
        bidirectional_sampling_rate="16000",
    )
    control = await Control.connect(gateway)
    await control.attach("order-3")
    await control.send({"type": "text", "turn_id": "w", "text": "Sixteen kilohertz, big endian.", "final": True})
    await control.expect("call.mark", status="played")
    assert all(len(m) == 640 for m, _ in tx.got.media)
    pcm = tx.audio_pcm()  # decoded as big-endian: loud and smooth only if we sent big-endian
    assert np.abs(pcm.astype(int)).max() > 1000
    assert np.abs(np.diff(pcm.astype(int))).mean() < 3000, "byte order is wrong: the audio is noise"
    await tx.stop()


async def test_malformed_telnyx_input_gets_errors_and_the_call_goes_on(gateway):
    control = await Control.connect(gateway)
    await control.attach("v3:ccid-4")
    tx = await TelnyxClient.connect(gateway, call_control_id="v3:ccid-4", stream_id="S-4")
    await control.expect("call.media", state="connected")
    for raw in [
        "not json",
        json.dumps({"event": "media", "media": {"payload": "@@@"}}),
        json.dumps({"event": "boo"}),
        json.dumps({"event": "mark", "mark": {"name": "never-sent"}}),
    ]:
        await tx.send(raw)
    await tx.send(b"\x00\x01")
    codes = [(await control.expect("error"))["code"] for _ in range(5)]
    assert codes == ["bad_json", "bad_audio", "unknown_type", "bad_message", "binary_not_allowed"]
    await control.send({"type": "text", "turn_id": "ok", "text": "Still fine.", "final": True})
    assert not (await control.expect("turn.done", turn_id="ok"))["interrupted"]
    await tx.stop()
