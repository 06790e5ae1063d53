"""Telnyx media streaming, bidirectional RTP mode: pure encode/decode, no socket.

Telnyx opens the WebSocket (`stream_url`, with `stream_bidirectional_mode:
rtp`) and sends JSON TEXT frames: `connected`, `start` (`stream_id`,
`start.call_control_id`, `start.media_format {encoding, sample_rate,
channels}`, `start.custom_parameters`), `media` (base64 RTP payload without
headers; `sequence_number`, `media.chunk` and `media.timestamp` as strings),
`dtmf`, `mark` (the echo of a mark we sent), `error` and `stop`. We send
`media` (whole 20 ms frames), `mark` and `clear`; a `clear` sends back the
marks still queued, so an echo after our clear means "dropped".

Media frames may arrive out of order: they are put back in `media.chunk`
order (the media-only counter; `sequence_number` also counts the other
events) within a small window, after which a missing frame is given up.

The codec Telnyx plays back (`stream_bidirectional_codec`,
`…_sampling_rate`) is not announced on the socket: it defaults to the
stream's own `media_format`, and the leg may override it from the stream
URL's query (`?bidirectional_codec=L16&bidirectional_sampling_rate=16000`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math

from gateway import protocol as P
from gateway.wire.events import (
    Audio,
    Dtmf,
    Ended,
    Event,
    FarEndError,
    MarkDone,
    Notice,
    Outgoing,
    Started,
    StartRefused,
    WireAudio,
    call_ids,
    dtmf_digit,
    load_json_object,
    optional_str,
)

# Telnyx codec names → our wire audio. L16 over RTP is network byte order (big-endian).
CODECS = {"PCMU": "mulaw", "PCMA": "alaw", "L16": "pcm16be"}
UNSUPPORTED_CODECS = ("G722", "OPUS", "AMR-WB")
L16_RATES = (8000, 16000, 24000, 48000)
MAX_MEDIA_BYTES = 48_000 * 2  # one second of L16 at 48 kHz: Telnyx sends 20 ms chunks
REORDER_WINDOW = 5  # frames held waiting for a missing one (100 ms) before it is given up


def wire_audio(codec: str, rate: int | str | None) -> WireAudio:
    """Telnyx codec name and rate → WireAudio; `unsupported_format` for what we cannot encode."""
    name = str(codec).upper()
    if name in UNSUPPORTED_CODECS:
        raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"Telnyx codec {codec} is not supported; stream PCMU, PCMA or L16")
    if name not in CODECS:
        raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"unknown Telnyx codec {codec!r}; stream PCMU, PCMA or L16")
    try:
        sample_rate = int(rate) if rate is not None else 8000
    except (TypeError, ValueError):
        raise P.ProtocolError(P.BAD_MESSAGE, f"Telnyx sample rate {rate!r} is not a number") from None
    encoding = CODECS[name]
    if encoding == "pcm16be" and sample_rate not in L16_RATES:
        raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"L16 at {sample_rate} Hz is not supported; use one of {L16_RATES}")
    if encoding != "pcm16be" and sample_rate != 8000:
        raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"{name} at {sample_rate} Hz is not supported (G.711 is 8000 Hz)")
    return WireAudio(encoding, sample_rate)


class Reorderer:
    """Puts numbered items back in order; gives a missing number up once `window` later ones wait."""

    def __init__(self, window: int = REORDER_WINDOW):
        self.window = window
        self.next: int | None = None
        self._held: dict[int, object] = {}
        self.late = 0  # arrived after their place was given up (dropped)
        self.lost = 0  # numbers never seen
        self.early = 0  # arrived while an earlier number was missing

    def push(self, number: int, item: object) -> list[object]:
        if self.next is None:
            self.next = number
        if number < self.next or number in self._held:
            self.late += 1
            return []
        if number > self.next:
            self.early += 1
        self._held[number] = item
        out = self._release()
        if len(self._held) >= self.window:  # the missing one is not coming: skip to the oldest held
            skip_to = min(self._held)
            self.lost += skip_to - self.next
            self.next = skip_to
            out += self._release()
        return out

    def _release(self) -> list[object]:
        out = []
        while self.next in self._held:
            out.append(self._held.pop(self.next))
            self.next += 1
        return out

    def flush(self) -> list[object]:
        """Everything still held, in order (the stream ended)."""
        out = [self._held[n] for n in sorted(self._held)]
        self._held.clear()
        return out


class TelnyxWire:
    """One Telnyx media stream's messages, both ways."""

    clear_returns_marks = True

    def __init__(self, outbound_codec: str | None = None, outbound_rate: int | str | None = None):
        self._out_codec, self._out_rate = outbound_codec, outbound_rate
        self.audio: WireAudio | None = None  # what Telnyx sends
        self.outbound: WireAudio | None = None  # what we send back
        self.stream_id: str | None = None
        self.reorder = Reorderer()
        self._media_head = ""

    @property
    def started(self) -> bool:
        return self.audio is not None

    # ------------------------------------------------------------ from Telnyx
    def decode(self, data: str | bytes) -> list[Event]:
        if isinstance(data, bytes):
            raise P.ProtocolError(P.BINARY_NOT_ALLOWED, "Telnyx media streams carry JSON TEXT frames only")
        m = load_json_object(data, "Telnyx")
        event = m.get("event")
        if not isinstance(event, str):
            raise P.ProtocolError(P.BAD_MESSAGE, "a Telnyx message needs a string 'event'")
        if event == "connected":
            return [Notice("connected")]
        if event == "start":
            if self.audio is not None:
                raise P.ProtocolError(P.BAD_MESSAGE, "Telnyx sent a second 'start' on one stream; ignored")
            try:
                return [self._start(m)]
            except P.ProtocolError as exc:
                raise StartRefused(exc.code, exc.message) from None
        if event == "stop":
            return [*self._flush_audio(), Ended("stop")]
        if event == "error":
            payload = m.get("payload") if isinstance(m.get("payload"), dict) else {}
            detail = (
                " ".join(str(payload[k]) for k in ("code", "title", "detail") if payload.get(k) is not None)
                or json.dumps(m)[:200]
            )
            return [FarEndError(f"Telnyx: {detail}")]
        if self.audio is None:
            if event in ("media", "dtmf", "mark"):
                raise P.ProtocolError(P.NO_SESSION, f"Telnyx sent {event!r} before 'start'")
            raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown Telnyx event {event!r}")
        if event == "media":
            return self._media(_obj(m, "media"), m.get("sequence_number"))
        if event == "dtmf":
            return [Dtmf(dtmf_digit(_obj(m, "dtmf").get("digit"), "Telnyx dtmf"))]
        if event == "mark":
            name = _obj(m, "mark").get("name")
            if not isinstance(name, str) or not name:
                raise P.ProtocolError(P.BAD_MESSAGE, "Telnyx mark: 'name' must be a non-empty string")
            return [MarkDone(name, played=True)]  # the leg knows whether a clear came first
        raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown Telnyx event {event!r}")

    def _start(self, m: dict) -> Started:
        start = _obj(m, "start")
        stream_id = m.get("stream_id") or start.get("stream_id")
        if not isinstance(stream_id, str) or not stream_id:
            raise P.ProtocolError(P.BAD_MESSAGE, "Telnyx start: missing 'stream_id'")
        fmt = start.get("media_format")
        if not isinstance(fmt, dict):
            raise P.ProtocolError(P.BAD_MESSAGE, "Telnyx start: 'media_format' must be an object")
        if str(fmt.get("channels", 1)) != "1":
            raise P.ProtocolError(
                P.UNSUPPORTED_FORMAT, f"Telnyx start: {fmt.get('channels')} channels; only mono is supported"
            )
        audio = wire_audio(fmt.get("encoding", ""), fmt.get("sample_rate"))
        outbound = audio
        if self._out_codec or self._out_rate:
            codec = self._out_codec or fmt.get("encoding", "")
            same_kind = CODECS.get(str(codec).upper()) == audio.encoding
            outbound = wire_audio(codec, self._out_rate or (audio.sample_rate if same_kind else None))
        params = start.get("custom_parameters") or {}
        if not isinstance(params, dict):
            raise P.ProtocolError(P.BAD_MESSAGE, "Telnyx start: 'custom_parameters' must be an object")
        self.audio, self.outbound, self.stream_id = audio, outbound, stream_id
        self._media_head = '{"event":"media","media":{"payload":"'
        ids = call_ids(params.get("call_id"), start.get("call_control_id"), stream_id, start.get("call_session_id"))
        info = {k: start[k] for k in ("call_control_id", "call_session_id", "from", "to") if k in start}
        return Started(
            ids,
            audio,
            voice=optional_str(params.get("voice")),
            language=optional_str(params.get("language")),
            info=info,
        )

    def _media(self, media: dict, sequence_number) -> list[Event]:
        track = media.get("track", "inbound")
        if track not in ("inbound", "inbound_track"):
            return []  # with both_tracks, the outbound track is our own voice
        payload = media.get("payload")
        if not isinstance(payload, str) or not payload:
            raise P.ProtocolError(P.BAD_AUDIO, "Telnyx media: 'payload' must be a non-empty base64 string")
        if len(payload) > MAX_MEDIA_BYTES * 4 // 3 + 4:
            raise P.ProtocolError(P.BAD_AUDIO, f"Telnyx media: payload longer than {MAX_MEDIA_BYTES} bytes")
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise P.ProtocolError(P.BAD_AUDIO, "Telnyx media: payload is not valid base64") from None
        pcm = self.audio.decode(raw)
        timestamp = _number(media.get("timestamp"))
        order = _number(media.get("chunk"))
        if order is None:
            order = _number(sequence_number)
        event = Audio(pcm, timestamp)
        if order is None or order != int(order):
            return [event]  # nothing to order by: take it as it comes
        return list(self.reorder.push(int(order), event))

    def _flush_audio(self) -> list[Event]:
        return list(self.reorder.flush())

    # ------------------------------------------------------------ to Telnyx
    def media(self, data: bytes) -> list[Outgoing]:
        """One frame of wire-encoded audio (in `outbound`'s format) → one `media` message."""
        return [self._media_head + base64.b64encode(data).decode("ascii") + '"}}']

    def mark(self, name: str) -> list[Outgoing]:
        return ['{"event":"mark","mark":{"name":' + json.dumps(name) + "}}"]

    def clear(self) -> list[Outgoing]:
        return ['{"event":"clear"}']

    def hangup(self) -> list[Outgoing]:
        return []  # closing the socket ends the stream; hanging up the call is Call Control's job


def _obj(m: dict, key: str) -> dict:
    value = m.get(key)
    if not isinstance(value, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, f"Telnyx {m.get('event')}: field {key!r} must be an object")
    return value


def _number(value) -> float | None:
    """Telnyx sends numbers as strings; anything that is not a finite number is None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
