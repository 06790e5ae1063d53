"""chan_websocket wire format: messages built from Asterisk's documented examples (JSON and plain text)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from audio.g711 import ulaw_encode
from gateway import protocol as P
from gateway.wire import asterisk as A
from gateway.wire.events import Audio, Dtmf, FarEndError, FlowControl, MarkDone, Notice, Started

MEDIA_START_JSON = json.dumps(
    {
        "event": "MEDIA_START",
        "connection_id": "voxgate",
        "channel": "WebSocket/voxgate/0x5140001a0040",
        "channel_id": "1761245643.1",
        "format": "ulaw",
        "optimal_frame_size": 160,
        "ptime": 20,
        "channel_variables": {"DIALEDPEERNUMBER": "voxgate/c(ulaw)", "MEDIA_WEBSOCKET_CONNECTION_ID": "voxgate"},
    }
)
MEDIA_START_PLAIN = "MEDIA_START connection_id:voxgate channel:WebSocket/voxgate/0x1 channel_id:pbx1-123456789.999 format:slin16 optimal_frame_size:640 ptime:20"


def started(raw: str = MEDIA_START_JSON) -> tuple[A.AsteriskWire, Started]:
    wire = A.AsteriskWire()
    (event,) = wire.decode(raw)
    assert isinstance(event, Started)
    return wire, event


def test_media_start_json_keys_the_call_by_channel_id_not_the_shared_connection_id():
    wire, ev = started()
    assert ev.call_ids == ("1761245643.1",)
    assert ev.audio.encoding == "mulaw" and ev.audio.sample_rate == 8000
    assert wire.json and wire.optimal_frame_size == 160 and ev.info["connection_id"] == "voxgate"


def test_media_start_plain_text_and_commands_answered_in_plain_text():
    wire, ev = started(MEDIA_START_PLAIN)
    assert ev.call_ids == ("pbx1-123456789.999",) and ev.audio.encoding == "pcm16le" and ev.audio.sample_rate == 16000
    assert not wire.json
    assert wire.clear() == ["FLUSH_MEDIA"]
    assert wire.mark("m7") == ["MARK_MEDIA m7"]
    assert wire.hangup() == ["HANGUP"]
    assert wire.decode("MEDIA_MARK_PROCESSED m7") == [MarkDone("m7", played=True)]
    assert wire.decode("DTMF_END digit:5 channel_id:pbx1-123456789.999") == [Dtmf("5")]
    assert wire.decode("MEDIA_XOFF") == [FlowControl(paused=True)]
    assert wire.decode("MEDIA_XON") == [FlowControl(paused=False)]


def test_json_events_and_commands():
    wire, _ = started()
    assert json.loads(wire.clear()[0]) == {"command": "FLUSH_MEDIA"}
    assert json.loads(wire.mark("t1.0.3")[0]) == {"command": "MARK_MEDIA", "correlation_id": "t1.0.3"}
    assert json.loads(wire.hangup()[0]) == {"command": "HANGUP"}
    ev = {"channel_id": "1761245643.1"}
    assert wire.decode(json.dumps({"event": "MEDIA_MARK_PROCESSED", "correlation_id": "t1.0.3", **ev})) == [
        MarkDone("t1.0.3", True)
    ]
    assert wire.decode(json.dumps({"event": "DTMF_END", "digit": "#", **ev})) == [Dtmf("#")]
    assert wire.decode(json.dumps({"event": "MEDIA_XOFF", **ev})) == [FlowControl(True)]
    assert wire.decode(json.dumps({"event": "STATUS", "queue_length": 3, **ev})) == [Notice("STATUS")]
    (err,) = wire.decode(
        json.dumps({"event": "ERROR", "error_text": "FLUSH_MEDIA not supported in passthrough mode", **ev})
    )
    assert isinstance(err, FarEndError) and "passthrough" in err.message


def test_binary_media_decodes_in_the_dialled_codec():
    wire, _ = started()
    pcm = (np.sin(np.arange(160) / 5) * 8000).astype(np.int16)
    (audio,) = wire.decode(ulaw_encode(pcm))
    assert isinstance(audio, Audio) and audio.pcm.dtype == np.int16 and len(audio.pcm) == 160
    assert np.abs(audio.pcm.astype(int) - pcm).max() < 300  # μ-law is lossy, not wrong


def test_outbound_media_goes_in_whole_optimal_frames_and_a_mark_flushes_the_remainder():
    wire, _ = started()
    assert wire.media(b"\x01" * 100) == []  # less than a frame: held
    out = wire.media(b"\x02" * 300)  # 400 bytes held in all: two frames out, 80 held
    assert out == [b"\x01" * 100 + b"\x02" * 220]  # packed in one message
    tail, mark = wire.mark("m1")
    assert tail == b"\x02" * 80 + b"\xff" * 80  # padded with μ-law silence to one frame
    assert json.loads(mark)["command"] == "MARK_MEDIA"
    wire.media(b"\x03" * 10)
    wire.clear()  # barge-in drops the held partial frame too
    assert len(wire.mark("m2")) == 1


def test_messages_stay_under_the_65500_byte_limit_and_commands_under_128():
    wire, _ = started()
    out = wire.media(b"\x00" * 160 * 1000)
    assert all(len(m) <= A.MAX_MESSAGE_BYTES and len(m) % 160 == 0 for m in out) and sum(map(len, out)) == 160_000
    with pytest.raises(ValueError):
        wire.mark("x" * 200)


@pytest.mark.parametrize(
    "raw, code",
    [
        ("", P.BAD_MESSAGE),
        ("{not json", P.BAD_JSON),
        ('{"event": ["MEDIA_START"]}', P.BAD_MESSAGE),
        ('{"event": 5}', P.BAD_MESSAGE),
        ("MEDIA_XOFF", P.NO_SESSION),
        ("MEDIA_START connection_id:x channel:WebSocket/x format:ulaw optimal_frame_size:160", P.BAD_MESSAGE),
        ("MEDIA_START channel_id:1.1 format:opus optimal_frame_size:0 ptime:20", P.UNSUPPORTED_FORMAT),
        ("MEDIA_START channel_id:1.1 format:ulaw optimal_frame_size:999 ptime:20", P.UNSUPPORTED_FORMAT),
        ("MEDIA_START channel_id:1.1 format:ulaw optimal_frame_size:abc ptime:20", P.BAD_MESSAGE),
    ],
)
def test_malformed_before_start_gets_a_stable_code(raw, code):
    with pytest.raises(P.ProtocolError) as exc:
        A.AsteriskWire().decode(raw)
    assert exc.value.code == code


def test_binary_before_start_and_malformed_after_start():
    with pytest.raises(P.ProtocolError) as exc:
        A.AsteriskWire().decode(b"\xff" * 160)
    assert exc.value.code == P.NO_SESSION
    wire, _ = started(MEDIA_START_PLAIN)
    cases = [
        (b"\x00" * 161, P.BAD_AUDIO),  # slin16 of odd length
        ("DTMF_END digit:Z", P.BAD_MESSAGE),
        ("MEDIA_MARK_PROCESSED", P.BAD_MESSAGE),
        ("MEDIA_PARTY", P.UNKNOWN_TYPE),
        (MEDIA_START_PLAIN, P.BAD_MESSAGE),  # a second start
    ]
    for raw, code in cases:
        with pytest.raises(P.ProtocolError) as exc:
            wire.decode(raw)
        assert exc.value.code == code, raw
    assert wire.decode("MEDIA_XON") == [FlowControl(False)]  # the wire still works after bad input
