"""Vonage WebSocket and jambonz listen wire formats: messages built from the vendors' documented examples."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gateway import protocol as P
from gateway.wire.events import Audio, Dtmf, MarkDone, Notice, Started
from gateway.wire.jambonz import JambonzWire
from gateway.wire.vonage import MARK_KEY, VonageWire

CONNECTED = json.dumps(
    {"event": "websocket:connected", "content-type": "audio/l16;rate=16000", "call_id": "order-9", "voice": "default"}
)
ATTRIBUTES = json.dumps(
    {
        "callSid": "8d1d3b2e-1c4f-4e5a-9a3b-2f9e6c1d7a01",
        "callId": "3e4b@10.0.0.1",
        "direction": "inbound",
        "from": "+15083084809",
        "to": "+15083728299",
        "accountSid": "acc",
        "applicationSid": "app",
        "sampleRate": 16000,
        "mixType": "mono",
        "metadata": {"call_id": "order-10", "language": "en"},
    }
)


# ---------------------------------------------------------------- Vonage
def vonage() -> tuple[VonageWire, Started]:
    wire = VonageWire()
    (ev,) = wire.decode(CONNECTED)
    return wire, ev


def test_vonage_connected_carries_the_ncco_headers():
    wire, ev = vonage()
    assert ev.call_ids == ("order-9",) and ev.voice == "default"
    assert ev.audio.encoding == "pcm16le" and ev.audio.sample_rate == 16000 and ev.audio.frame_bytes == 640
    assert wire.outbound == ev.audio


def test_vonage_audio_dtmf_notify_clear():
    wire, _ = vonage()
    pcm = (np.arange(320) * 50).astype(np.int16)
    (audio,) = wire.decode(pcm.astype("<i2").tobytes())
    assert isinstance(audio, Audio) and np.array_equal(audio.pcm, pcm)
    assert wire.decode(json.dumps({"event": "websocket:dtmf", "digit": "3", "duration": 260})) == [Dtmf("3")]
    assert wire.decode(json.dumps({"event": "websocket:dtmf", "dtmf": {"digit": "*", "duration": 100}})) == [Dtmf("*")]
    (notify,) = wire.mark("t1/0/0")
    assert json.loads(notify) == {"action": "notify", "payload": {MARK_KEY: "t1/0/0"}}
    assert wire.decode(json.dumps({"event": "websocket:notify", "payload": {MARK_KEY: "t1/0/0"}})) == [
        MarkDone("t1/0/0", True)
    ]
    assert json.loads(wire.clear()[0]) == {"action": "clear"}
    assert wire.decode('{"event":"websocket:cleared"}') == [Notice("cleared")]
    assert wire.media(b"\x00" * 640) == [b"\x00" * 640]


@pytest.mark.parametrize("rate", [8000, 24000])
def test_vonage_rates(rate):
    wire = VonageWire()
    (ev,) = wire.decode(json.dumps({"event": "websocket:connected", "content-type": f"audio/l16;rate={rate}"}))
    assert ev.audio.sample_rate == rate and ev.call_ids == ()  # no call id: the leg must find one in the query


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"\x00" * 640, P.NO_SESSION),
        ("{", P.BAD_JSON),
        ('{"event": "websocket:dtmf", "digit": "1"}', P.NO_SESSION),
        ('{"event": "websocket:connected", "content-type": "audio/pcmu"}', P.UNSUPPORTED_FORMAT),
        ('{"event": "websocket:connected", "content-type": "audio/l16;rate=44100"}', P.UNSUPPORTED_FORMAT),
        ('{"event": "websocket:connected"}', P.UNSUPPORTED_FORMAT),
        ('{"action": "clear"}', P.BAD_MESSAGE),
    ],
)
def test_vonage_malformed_before_connected(raw, code):
    with pytest.raises(P.ProtocolError) as exc:
        VonageWire().decode(raw)
    assert exc.value.code == code


def test_vonage_malformed_after_connected():
    wire, _ = vonage()
    for raw, code in [
        (b"\x00" * 641, P.BAD_AUDIO),
        (b"\x00" * 100_000, P.BAD_AUDIO),
        ('{"event": "websocket:dtmf", "digit": "x"}', P.BAD_MESSAGE),
        ('{"event": "websocket:notify", "payload": {"other": 1}}', P.BAD_MESSAGE),
        ('{"event": "websocket:party"}', P.UNKNOWN_TYPE),
        (CONNECTED, P.BAD_MESSAGE),
    ]:
        with pytest.raises(P.ProtocolError) as exc:
            wire.decode(raw)
        assert exc.value.code == code, raw
    assert len(wire.decode(b"\x00" * 640)) == 1


# ---------------------------------------------------------------- jambonz
def jambonz(**kw) -> tuple[JambonzWire, Started]:
    wire = JambonzWire(**kw)
    (ev,) = wire.decode(ATTRIBUTES)
    return wire, ev


def test_jambonz_attributes_name_the_call_and_its_rate():
    wire, ev = jambonz()
    assert ev.call_ids == ("order-10", "8d1d3b2e-1c4f-4e5a-9a3b-2f9e6c1d7a01", "3e4b@10.0.0.1")
    assert ev.language == "en" and ev.audio.sample_rate == 16000 and wire.outbound.sample_rate == 16000
    wire, _ = jambonz(outbound_rate="8000")  # bidirectionalAudio.sampleRate, from the listen URL's query
    assert wire.outbound.sample_rate == 8000 and wire.audio.sample_rate == 16000


def test_jambonz_audio_dtmf_marks_and_commands():
    wire, _ = jambonz()
    assert len(wire.decode(b"\x01\x00" * 320)[0].pcm) == 320
    assert wire.decode(json.dumps({"event": "dtmf", "dtmf": "2", "duration": "1600"})) == [Dtmf("2")]
    assert json.loads(wire.mark("m1")[0]) == {"type": "mark", "data": {"name": "m1"}}
    assert wire.decode(json.dumps({"type": "mark", "data": {"name": "m1", "event": "playout"}})) == [
        MarkDone("m1", True)
    ]
    assert wire.decode(json.dumps({"type": "mark", "data": {"name": "m2", "event": "cleared"}})) == [
        MarkDone("m2", False)
    ]
    assert json.loads(wire.clear()[0]) == {"type": "killAudio"}
    assert json.loads(wire.hangup()[0]) == {"type": "disconnect"}


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"\x00\x00", P.NO_SESSION),
        ("[]", P.BAD_MESSAGE),
        ('{"sampleRate": 8000}', P.BAD_MESSAGE),
        (json.dumps({"callSid": "c", "mixType": "stereo"}), P.UNSUPPORTED_FORMAT),
        (json.dumps({"callSid": "c", "sampleRate": 64000}), P.UNSUPPORTED_FORMAT),
        (json.dumps({"callSid": "c", "sampleRate": "fast"}), P.BAD_MESSAGE),
    ],
)
def test_jambonz_malformed_first_message(raw, code):
    with pytest.raises(P.ProtocolError) as exc:
        JambonzWire().decode(raw)
    assert exc.value.code == code


def test_jambonz_malformed_after_start():
    wire, _ = jambonz()
    for raw, code in [
        (b"\x00" * 3, P.BAD_AUDIO),
        ('{"event": "dtmf", "dtmf": "22"}', P.BAD_MESSAGE),
        ('{"type": "mark", "data": {"name": "m"}}', P.BAD_MESSAGE),
        ('{"type": "playDone"}', P.UNKNOWN_TYPE),
        ('{"hello": 1}', P.BAD_MESSAGE),
    ]:
        with pytest.raises(P.ProtocolError) as exc:
            wire.decode(raw)
        assert exc.value.code == code, raw
    assert len(wire.decode(b"\x00\x00" * 320)) == 1
