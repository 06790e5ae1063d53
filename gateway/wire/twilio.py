"""Twilio Media Streams (bidirectional, `<Connect><Stream>`): the JSON messages, encoded and decoded.

Twilio sends text frames `connected`, `start`, `media` (base64 μ-law 8 kHz),
`dtmf`, `mark` (the echo of a mark we sent, once the audio before it played,
or at once after our `clear`) and `stop`. We send `media`, `mark` and `clear`;
nothing else may go to Twilio (anything else is a protocol error there).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from dataclasses import dataclass, field

import numpy as np

from audio.g711 import ulaw_decode, ulaw_encode
from gateway import protocol as P
from gateway.wire.events import dtmf_digit

MAX_MEDIA_BYTES = 8000  # one second of μ-law; Twilio sends 160-byte (20 ms) chunks


def twilio_signature(auth_token: str, url: str, params: dict[str, str] | None = None) -> str:
    """base64(HMAC-SHA1(token, url + sorted POST params)) — what Twilio puts in X-Twilio-Signature."""
    data = url + "".join(k + params[k] for k in sorted(params or {}))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode()


# ---------------------------------------------------------------- Twilio → us
@dataclass
class Connected:
    pass


@dataclass
class Start:
    stream_sid: str
    call_sid: str | None
    params: dict = field(default_factory=dict)  # customParameters

    @property
    def call_ids(self) -> list[str]:
        """Every id the call may be known by: a `call_id` custom parameter, the callSid, the streamSid."""
        return [v for v in (self.params.get("call_id"), self.call_sid, self.stream_sid) if isinstance(v, str) and v]

    def param(self, name: str) -> str | None:
        value = self.params.get(name)
        return value if isinstance(value, str) else None


@dataclass
class Media:
    pcm: np.ndarray | None  # int16 8 kHz; None for a track that is not the caller's
    timestamp_ms: float | None = None


@dataclass
class Dtmf:
    digit: str


@dataclass
class Mark:
    name: str


@dataclass
class Stop:
    pass


@dataclass
class Unknown:
    event: str


TwilioEvent = Connected | Start | Media | Dtmf | Mark | Stop | Unknown


class DecodeError(P.ProtocolError):
    """A Twilio message we cannot use; `event` names its kind when that much was readable."""

    def __init__(self, code: str, message: str, event: str | None = None):
        super().__init__(code, message)
        self.event = event


def decode(raw: str) -> TwilioEvent:
    """One Twilio text frame; DecodeError (bad_json, bad_message, bad_audio, unsupported_format) if unusable."""
    try:
        m = P.loads_json(raw)  # deep nesting is a ValueError here, not a RecursionError
    except ValueError as exc:
        raise DecodeError(P.BAD_JSON, f"Twilio message is not valid JSON: {exc}") from None
    if not isinstance(m, dict) or not isinstance(m.get("event"), str):
        raise DecodeError(P.BAD_MESSAGE, "a Twilio message must be a JSON object with a string 'event'")
    try:
        return _decode(m)
    except DecodeError:
        raise
    except P.ProtocolError as exc:
        raise DecodeError(exc.code, exc.message, m["event"]) from None


def _decode(m: dict) -> TwilioEvent:
    event = m["event"]
    if event == "connected":
        return Connected()
    if event == "start":
        return _start(m)
    if event == "stop":
        return Stop()
    if event == "media":
        return _media(_obj(m, "media"))
    if event == "dtmf":
        return Dtmf(dtmf_digit(_obj(m, "dtmf").get("digit"), "dtmf"))
    if event == "mark":
        name = _obj(m, "mark").get("name")
        if not isinstance(name, str):
            raise P.ProtocolError(P.BAD_MESSAGE, "mark: 'name' must be a string")
        return Mark(name)
    return Unknown(event)


def _start(m: dict) -> Start:
    start = _obj(m, "start")
    stream_sid = start.get("streamSid") or m.get("streamSid")
    if not isinstance(stream_sid, str) or not stream_sid:
        raise P.ProtocolError(P.BAD_MESSAGE, "start: missing 'streamSid'")
    params = start.get("customParameters") or {}
    if not isinstance(params, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, "start: 'customParameters' must be an object")
    fmt = start.get("mediaFormat") or {}
    if (
        isinstance(fmt, dict)
        and fmt
        and (
            fmt.get("encoding") != "audio/x-mulaw"
            or fmt.get("sampleRate") not in (8000, "8000")
            or fmt.get("channels", 1) not in (1, "1")
        )
    ):
        raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"start: mediaFormat {fmt} is not μ-law 8 kHz mono")
    call_sid = start.get("callSid")
    return Start(stream_sid, call_sid if isinstance(call_sid, str) else None, params)


def _media(media: dict) -> Media:
    track = media.get("track", "inbound")
    if track not in ("inbound", "inbound_track"):
        return Media(None)  # only the caller's side is ours to hear
    payload = media.get("payload")
    if not isinstance(payload, str):
        raise P.ProtocolError(P.BAD_AUDIO, "media: 'payload' must be a base64 string")
    if len(payload) > MAX_MEDIA_BYTES * 4 // 3 + 4:
        raise P.ProtocolError(P.BAD_AUDIO, f"media: payload longer than {MAX_MEDIA_BYTES} bytes")
    try:
        audio = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise P.ProtocolError(P.BAD_AUDIO, "media: payload is not valid base64") from None
    if not audio:
        raise P.ProtocolError(P.BAD_AUDIO, "media: empty payload")
    timestamp = media.get("timestamp")
    try:
        at = float(timestamp) if timestamp is not None else None
    except (TypeError, ValueError):
        at = None
    if at is not None and not math.isfinite(at):
        at = None  # "nan" and "inf" parse as floats but place nothing on the timeline
    return Media(ulaw_decode(audio), at)


def _obj(m: dict, key: str) -> dict:
    value = m.get(key)
    if not isinstance(value, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, f"{m.get('event')}: field {key!r} must be an object")
    return value


# ---------------------------------------------------------------- us → Twilio
class TwilioEncoder:
    """The messages we send on one stream (the streamSid's JSON is built once)."""

    def __init__(self, stream_sid: str):
        self.stream_sid = stream_sid
        sid = json.dumps(stream_sid)
        self._media_head = '{"event":"media","streamSid":' + sid + ',"media":{"payload":"'
        self._mark_head = '{"event":"mark","streamSid":' + sid + ',"mark":{"name":'
        self.clear = '{"event":"clear","streamSid":' + sid + "}"

    def media(self, pcm16: bytes) -> str:
        """One frame of PCM16 8 kHz as a `media` message (μ-law, base64)."""
        payload = base64.b64encode(ulaw_encode(np.frombuffer(pcm16, dtype="<i2"))).decode("ascii")
        return self._media_head + payload + '"}}'

    def mark(self, name: str) -> str:
        return self._mark_head + json.dumps(name) + "}}"
