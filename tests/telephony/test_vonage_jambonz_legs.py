"""/v1/vonage and /v1/jambonz: far ends written from Vonage's and jambonz's docs drive whole calls."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import websockets

from tests.telephony.clients import Control
from tests.telephony.test_asterisk_leg import LONG, paced, wait_for
from tests.telephony.wire_clients import JambonzClient, VonageClient, tone


# ---------------------------------------------------------------- Vonage
async def test_vonage_call_l16_16k_notify_marks_clear_and_dtmf(gateway):
    control = await Control.connect(gateway)
    await control.attach("order-v1")
    # NCCO: {"action": "connect", "endpoint": [{"type": "websocket", "uri": "wss://…/v1/vonage",
    #        "content-type": "audio/l16;rate=16000", "headers": {"call_id": "order-v1"}}]}
    vg = await VonageClient.connect(gateway, headers={"call_id": "order-v1"})
    assert (await control.expect("call.media"))["leg"] == "vonage"

    session = gateway.calls.get("order-v1").session
    assert session.output.sample_rate == 8000  # the agent attached first: the call plays at 8 kHz, resampled to 16 kHz
    stream = session.inbound.subscribe()
    for _ in range(10):
        await vg.send(tone(320, rate=16000).astype("<i2").tobytes())
    chunks = []
    while sum(map(len, chunks)) < 800:  # 100 ms at the session's 8 kHz, of the 200 ms sent at 16 kHz
        chunks.append(await asyncio.wait_for(stream.__anext__(), 2))
    heard = np.concatenate(chunks)
    assert np.abs(heard.astype(int)).max() > 1000  # decoded (and brought to the session's 8 kHz)

    await control.send({"type": "text", "turn_id": "t1", "text": "Hello over Vonage.", "final": True})
    played = await control.expect("call.mark")
    assert played["turn_id"] == "t1" and played["status"] == "played"
    await control.expect("turn.done", turn_id="t1")
    frames = vg.got.media
    assert len(frames) >= 10 and all(len(m) == 640 for m, _ in frames)  # exactly 20 ms of L16 at 16 kHz
    paced([t for _, t in frames], len(frames))
    assert np.abs(vg.audio_pcm().astype(int)).max() > 1000

    vg.playing = False  # Vonage's buffer still holds chunk 0 when the caller barges in
    await control.send({"type": "text", "turn_id": "t2", "text": "Short one. " + LONG, "final": True})
    await wait_for(lambda: len(vg.commands("notify")) >= 2)
    await control.send({"type": "interrupt"})
    await wait_for(lambda: "clear" in vg.command_names())
    assert (await control.expect("turn.done", turn_id="t2"))["interrupted"]
    assert (await control.expect("call.mark", turn_id="t2"))["status"] == "dropped"

    await vg.send({"event": "websocket:dtmf", "digit": "4", "duration": 250})
    assert (await control.expect("dtmf"))["digit"] == "4"
    await vg.close()
    await control.expect("session.ended")
    assert vg.violations == [] and not [e for e in control.events if e["type"] == "error"]


async def test_vonage_call_id_from_the_uri_query_and_8k(gateway):
    vg = await VonageClient.connect(gateway, rate=8000, call_id="order-v2")
    control = await Control.connect(gateway)
    await control.attach("order-v2")
    await control.send({"type": "text", "turn_id": "a", "text": "Narrowband.", "final": True})
    await control.expect("call.mark", status="played")
    assert all(len(m) == 320 for m, _ in vg.got.media)
    await control.send({"type": "session.end"})
    await asyncio.wait_for(vg.closed.wait(), 5)  # the agent ended the call: the socket closes (ending the NCCO connect)


async def test_vonage_without_a_call_id_is_refused_and_bad_input_is_reported(gateway):
    vg = await VonageClient.connect(gateway)  # neither a header nor a query parameter names the call
    await asyncio.wait_for(vg.closed.wait(), 5)
    assert vg.ws.close_code == 1008
    control = await Control.connect(gateway)
    await control.attach("order-v3")
    vg = await VonageClient.connect(gateway, headers={"call_id": "order-v3"})
    await control.expect("call.media", state="connected")
    await vg.send(b"\x00" * 641)
    await vg.send('{"event": "websocket:dtmf", "digit": "55"}')
    await vg.send('{"event": "websocket:notify", "payload": {"nothing": 1}}')
    await vg.send('{"event": "websocket:dance"}')
    codes = [(await control.expect("error"))["code"] for _ in range(4)]
    assert codes == ["bad_audio", "bad_message", "bad_message", "unknown_type"]
    await vg.close()


# ---------------------------------------------------------------- jambonz
async def test_jambonz_listen_call_marks_killaudio_dtmf_and_disconnect(gateway):
    # listen: {"url": "wss://…/v1/jambonz", "sampleRate": 16000, "mixType": "mono", "passDtmf": true,
    #          "bidirectionalAudio": {"enabled": true, "streaming": true, "sampleRate": 16000}}
    jz = await JambonzClient.connect(gateway, call_sid="8d1d3b2e-0042", rate=16000)
    assert jz.ws.subprotocol == "audio.jambonz.org"
    control = await Control.connect(gateway)
    await control.attach("8d1d3b2e-0042")  # jambonz's callSid
    assert (await control.expect("call.media"))["leg"] == "jambonz"

    await control.send({"type": "text", "turn_id": "t1", "text": "Hello over jambonz.", "final": True})
    played = await control.expect("call.mark")
    assert played["status"] == "played"
    await control.expect("turn.done", turn_id="t1")
    assert len(jz.got.media) >= 10 and all(len(m) == 640 for m, _ in jz.got.media)
    paced([t for _, t in jz.got.media], len(jz.got.media))

    jz.playing = False
    await control.send({"type": "text", "turn_id": "t2", "text": "Short one. " + LONG, "final": True})
    await wait_for(lambda: len(jz.commands("mark")) >= 2)
    await control.send({"type": "interrupt"})
    await wait_for(lambda: "killAudio" in jz.command_names())
    assert (await control.expect("call.mark", turn_id="t2"))["status"] == "dropped"  # jambonz said "cleared"

    await jz.send({"event": "dtmf", "dtmf": "#", "duration": "1600"})
    assert (await control.expect("dtmf"))["digit"] == "#"
    await control.send({"type": "session.end"})
    await asyncio.wait_for(jz.closed.wait(), 5)
    assert jz.disconnected and jz.violations == []


async def test_jambonz_rates_differ_each_way_and_metadata_names_the_call(gateway):
    # sampleRate 8000 in, bidirectionalAudio.sampleRate 16000 back (named on the listen URL)
    jz = await JambonzClient.connect(
        gateway, rate=8000, out_rate=16000, metadata={"call_id": "order-j2"}, bidirectional_sample_rate="16000"
    )
    control = await Control.connect(gateway)
    await control.attach("order-j2")
    await control.send({"type": "text", "turn_id": "a", "text": "Different rates.", "final": True})
    await control.expect("call.mark", status="played")
    assert all(len(m) == 640 for m, _ in jz.got.media)
    await jz.close()


async def test_jambonz_refuses_stereo_and_reports_bad_input(gateway):
    ws = await websockets.connect(f"ws://127.0.0.1:{gateway.port}/v1/jambonz", subprotocols=["audio.jambonz.org"])
    await ws.send(json.dumps({"callSid": "st-1", "sampleRate": 8000, "mixType": "stereo"}))
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 5)
    assert ws.close_code == 1008 and gateway.calls.get("st-1") is None
    control = await Control.connect(gateway)
    await control.attach("jb-3")
    jz = await JambonzClient.connect(gateway, call_sid="jb-3")
    await control.expect("call.media", state="connected")
    await jz.send(b"\x00" * 3)
    await jz.send('{"type": "mark", "data": {"name": "m1"}}')
    await jz.send('{"type": "playDone"}')
    codes = [(await control.expect("error"))["code"] for _ in range(3)]
    assert codes == ["bad_audio", "bad_message", "unknown_type"]
    await jz.close()
