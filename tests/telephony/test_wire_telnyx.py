"""Telnyx media streaming wire format: messages built from Telnyx's documented frames."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from audio.g711 import alaw_encode, ulaw_encode
from gateway import protocol as P
from gateway.wire import telnyx as T
from gateway.wire.events import Audio, Dtmf, Ended, FarEndError, MarkDone, Notice, Started

STREAM = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC"
CCID = "v3:T02llQxIyaRkhfRKxgAP8nY511EhFLizdvdUKJiSw8d6A9BborherQ"


def start_msg(encoding="PCMU", rate=8000, **start) -> str:
    return json.dumps(
        {
            "event": "start",
            "sequence_number": "1",
            "stream_id": STREAM,
            "start": {
                "user_id": "3E6F995F-85F7-4705-9741-53B116D28237",
                "call_control_id": CCID,
                "call_session_id": "ff55a038-6f5d-11ef-9692-02420aeffb1f",
                "from": "+13122010094",
                "to": "+13122123456",
                "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
                "custom_parameters": {"call_id": "order-1"},
                "media_format": {"encoding": encoding, "sample_rate": rate, "channels": 1},
                **start,
            },
        }
    )


def media_msg(payload: bytes, chunk: int, seq: int | None = None, track="inbound") -> str:
    return json.dumps(
        {
            "event": "media",
            "sequence_number": str(seq if seq is not None else chunk + 1),
            "stream_id": STREAM,
            "media": {
                "track": track,
                "chunk": str(chunk),
                "timestamp": str(20 * (chunk - 1)),
                "payload": base64.b64encode(payload).decode(),
            },
        }
    )


def started(*args, wire: T.TelnyxWire | None = None, **kw) -> tuple[T.TelnyxWire, Started]:
    wire = wire or T.TelnyxWire()
    assert wire.decode('{"event":"connected","version":"1.0.0"}') == [Notice("connected")]
    (ev,) = wire.decode(start_msg(*args, **kw))
    return wire, ev


def test_start_names_every_id_the_call_is_known_by():
    wire, ev = started()
    assert ev.call_ids == ("order-1", CCID, STREAM, "ff55a038-6f5d-11ef-9692-02420aeffb1f")
    assert ev.audio.encoding == "mulaw" and wire.outbound == ev.audio


@pytest.mark.parametrize(
    "codec, rate, encode",
    [
        ("PCMU", 8000, ulaw_encode),
        ("PCMA", 8000, alaw_encode),
        ("L16", 16000, lambda pcm: pcm.astype(">i2").tobytes()),  # RTP L16 is big-endian
    ],
)
def test_media_decodes_each_codec(codec, rate, encode):
    wire, ev = started(codec, rate)
    pcm = (np.sin(np.arange(rate // 50) / 3) * 9000).astype(np.int16)
    (audio,) = wire.decode(media_msg(encode(pcm), 1))
    assert isinstance(audio, Audio) and len(audio.pcm) == rate // 50 and audio.timestamp_ms == 0
    assert np.abs(audio.pcm.astype(int) - pcm).max() < (1 if codec == "L16" else 400)
    assert wire.outbound.encode(pcm) == encode(pcm)


def test_out_of_order_frames_come_out_in_chunk_order_and_a_lost_one_is_given_up():
    wire, _ = started()
    frames = {c: bytes([c]) * 160 for c in range(1, 20)}
    order = [1, 3, 2, 4, 6, 5]
    got = []
    for c in order:
        got += wire.decode(media_msg(frames[c], c))
    assert [a.pcm.tobytes() for a in got] == [wire.audio.decode(frames[c]).tobytes() for c in range(1, 7)]
    # chunk 7 never comes: after the window, 8.. are released and 7 is counted lost
    got = []
    for c in range(8, 8 + T.REORDER_WINDOW):
        got += wire.decode(media_msg(frames[c], c))
    assert len(got) == T.REORDER_WINDOW and wire.reorder.lost == 1
    assert wire.decode(media_msg(frames[7], 7)) == [] and wire.reorder.late == 1  # too late: dropped, not replayed


def test_stop_releases_held_frames_then_ends():
    wire, _ = started()
    wire.decode(media_msg(b"\x7f" * 160, 1))
    assert wire.decode(media_msg(b"\x7f" * 160, 3)) == []  # waiting for 2
    events = wire.decode(
        json.dumps({"event": "stop", "sequence_number": "9", "stream_id": STREAM, "stop": {"call_control_id": CCID}})
    )
    assert isinstance(events[0], Audio) and events[-1] == Ended("stop")


def test_dtmf_mark_error_and_our_outbound_messages():
    wire, _ = started()
    assert wire.decode(json.dumps({"event": "dtmf", "stream_id": STREAM, "dtmf": {"digit": "7"}})) == [Dtmf("7")]
    assert wire.decode(json.dumps({"event": "mark", "stream_id": STREAM, "mark": {"name": "t1/0/0"}})) == [
        MarkDone("t1/0/0", True)
    ]
    (err,) = wire.decode(
        json.dumps({"event": "error", "stream_id": STREAM, "payload": {"code": 100002, "title": "Unknown error"}})
    )
    assert isinstance(err, FarEndError) and "100002" in err.message
    (media,) = wire.media(b"\x01\x02")
    assert json.loads(media) == {"event": "media", "media": {"payload": base64.b64encode(b"\x01\x02").decode()}}
    assert json.loads(wire.mark("a")[0]) == {"event": "mark", "mark": {"name": "a"}}
    assert json.loads(wire.clear()[0]) == {"event": "clear"}


def test_outbound_codec_override_from_the_stream_url():
    wire, ev = started(wire=T.TelnyxWire("L16", "16000"))
    assert ev.audio.encoding == "mulaw" and wire.outbound.encoding == "pcm16be" and wire.outbound.sample_rate == 16000
    wire, _ = started("L16", 16000, wire=T.TelnyxWire(outbound_rate=8000))
    assert wire.outbound.encoding == "pcm16be" and wire.outbound.sample_rate == 8000
    with pytest.raises(P.ProtocolError) as exc:
        started(wire=T.TelnyxWire("G722"))
    assert exc.value.code == P.UNSUPPORTED_FORMAT


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"\x00\x01", P.BINARY_NOT_ALLOWED),
        ("nope", P.BAD_JSON),
        ('{"event": 1}', P.BAD_MESSAGE),
        (media_msg(b"\x00" * 160, 1), P.NO_SESSION),
        ('{"event": "hello"}', P.UNKNOWN_TYPE),
        (start_msg("OPUS", 16000), P.UNSUPPORTED_FORMAT),
        (start_msg("PCMU", 16000), P.UNSUPPORTED_FORMAT),
        (start_msg("L16", 11025), P.UNSUPPORTED_FORMAT),
        (json.dumps({"event": "start", "start": {"media_format": {"encoding": "PCMU"}}}), P.BAD_MESSAGE),
        (json.dumps({"event": "start", "stream_id": "s", "start": {}}), P.BAD_MESSAGE),
    ],
)
def test_malformed_before_start(raw, code):
    with pytest.raises(P.ProtocolError) as exc:
        T.TelnyxWire().decode(raw)
    assert exc.value.code == code


def test_malformed_after_start_leaves_the_stream_usable():
    wire, _ = started("L16", 16000)
    bad = [
        (json.dumps({"event": "media", "media": {"payload": "!!!"}}), P.BAD_AUDIO),
        (json.dumps({"event": "media", "media": {"payload": 5}}), P.BAD_AUDIO),
        (media_msg(b"\x00" * 321, 1), P.BAD_AUDIO),  # L16 of odd length
        (json.dumps({"event": "media", "media": "x"}), P.BAD_MESSAGE),
        (json.dumps({"event": "dtmf", "dtmf": {"digit": "55"}}), P.BAD_MESSAGE),
        (json.dumps({"event": "mark", "mark": {}}), P.BAD_MESSAGE),
        (start_msg(), P.BAD_MESSAGE),
    ]
    for raw, code in bad:
        with pytest.raises(P.ProtocolError) as exc:
            wire.decode(raw)
        assert exc.value.code == code, raw
    assert len(wire.decode(media_msg(b"\x00" * 640, 1))) == 1
    assert wire.decode(media_msg(b"\x00" * 640, 2, track="outbound")) == []  # our own track is not the caller
