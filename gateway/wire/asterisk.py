"""Asterisk `chan_websocket` (Asterisk 20.16 / 21.11 / 22.6 / 23+): pure encode/decode, no socket.

Asterisk dials us (`Dial(WebSocket/NAME/c(ulaw)f(json))` with a
`websocket_client.conf` section NAME, subprotocol `media`). BINARY frames are
media in the dialled codec both ways; TEXT frames are control, either JSON
(`f(json)`: `{"event": …}` from Asterisk, `{"command": …}` to it) or the
older plain text (`EVENT key:value …`, `COMMAND arg`). Asterisk opens with
`MEDIA_START`, which names the format, the optimal frame size and the
channel's unique id — the call id, since the connection id is the config
section name that every call through it shares. We answer in the format
MEDIA_START came in.

Asterisk owns the clock: it re-times what we send and queues up to ~1000
frames, saying `MEDIA_XOFF` near 900 and `MEDIA_XON` below 800. Media must
come in multiples of the optimal frame size (a partial frame is dropped);
messages are at most 65,500 bytes, commands at most 128 (longer ones are
ignored by Asterisk). `MARK_MEDIA` is answered by `MEDIA_MARK_PROCESSED`
when the mark reaches the front of the queue; `FLUSH_MEDIA` drops queued
media *and marks* without answering for them.
"""

from __future__ import annotations

import json
import re

from gateway import protocol as P
from gateway.wire.events import (
    Audio,
    Dtmf,
    Ended,
    Event,
    FarEndError,
    FlowControl,
    Framer,
    MarkDone,
    Notice,
    Outgoing,
    Started,
    StartRefused,
    WireAudio,
    call_ids,
    dtmf_digit,
    load_json_object,
)

SUBPROTOCOL = "media"
MAX_MESSAGE_BYTES = 65_500  # Asterisk closes the socket and hangs up above this
MAX_COMMAND_BYTES = 128  # Asterisk ignores longer TEXT messages
# Asterisk format names → wire audio (slin is host-endian in Asterisk: little-endian on every platform it ships on).
FORMATS = {
    "ulaw": ("mulaw", 8000),
    "alaw": ("alaw", 8000),
    "slin": ("pcm16le", 8000),
    "slin16": ("pcm16le", 16000),
    "slin24": ("pcm16le", 24000),
    "slin32": ("pcm16le", 32000),
    "slin48": ("pcm16le", 48000),
}
_NOTICES = frozenset({"STATUS", "QUEUE_DRAINED", "MEDIA_BUFFERING_COMPLETED"})
_PLAIN_TOKEN = re.compile(r"([A-Za-z_]+):(\S*)")


class AsteriskWire:
    """One chan_websocket connection's messages, both ways."""

    subprotocol = SUBPROTOCOL
    clear_returns_marks = False  # FLUSH_MEDIA drops pending marks silently

    def __init__(self) -> None:
        self.json = True  # the control format, learned from MEDIA_START
        self.audio: WireAudio | None = None
        self.channel_id: str | None = None
        self.optimal_frame_size = 0
        self._framer: Framer | None = None
        self._silence = b""

    @property
    def started(self) -> bool:
        return self.audio is not None

    @property
    def outbound(self) -> WireAudio | None:
        return self.audio  # the dialled codec, both ways

    # ------------------------------------------------------------ from Asterisk
    def decode(self, data: str | bytes) -> list[Event]:
        if isinstance(data, bytes):
            if self.audio is None:
                raise P.ProtocolError(P.NO_SESSION, "chan_websocket sent media before MEDIA_START")
            if not data:
                return []
            return [Audio(self.audio.decode(data))]
        return self._control(data)

    def _control(self, raw: str) -> list[Event]:
        text = raw.strip()
        if not text:
            raise P.ProtocolError(P.BAD_MESSAGE, "chan_websocket sent an empty TEXT message")
        if text.startswith("{"):
            fields = load_json_object(text, "chan_websocket")
            event = fields.get("event")
            if not isinstance(event, str) or not event:
                raise P.ProtocolError(P.BAD_MESSAGE, "a chan_websocket JSON event needs a string 'event'")
            is_json = True
        else:
            event, _, rest = text.partition(" ")
            fields = dict(_PLAIN_TOKEN.findall(rest))
            fields["_args"] = rest.strip()
            is_json = False
        if event == "MEDIA_START":
            if self.audio is not None:
                raise P.ProtocolError(P.BAD_MESSAGE, "a second MEDIA_START on one connection; ignored")
            try:
                return [self._media_start(fields, is_json)]
            except P.ProtocolError as exc:
                raise StartRefused(exc.code, exc.message) from None
        if self.audio is None:
            raise P.ProtocolError(P.NO_SESSION, f"chan_websocket sent {event!r} before MEDIA_START")
        if event == "MEDIA_MARK_PROCESSED":
            name = fields.get("correlation_id") if is_json else fields["_args"]
            if not isinstance(name, str) or not name:
                raise P.ProtocolError(P.BAD_MESSAGE, "MEDIA_MARK_PROCESSED carries no correlation id")
            return [MarkDone(name, played=True)]
        if event == "MEDIA_XOFF":
            return [FlowControl(paused=True)]
        if event == "MEDIA_XON":
            return [FlowControl(paused=False)]
        if event == "DTMF_END":
            return [Dtmf(dtmf_digit(fields.get("digit"), "DTMF_END"))]
        if event == "ERROR":
            detail = fields.get("error_text") if is_json else fields["_args"]
            return [FarEndError(f"Asterisk: {detail if isinstance(detail, str) else json.dumps(detail)}")]
        if event == "HANGUP":  # not sent by current versions (the socket closes), but unambiguous if it comes
            return [Ended("hangup")]
        if event in _NOTICES:
            return [Notice(event)]
        raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown chan_websocket event {event!r}")

    def _media_start(self, f: dict, is_json: bool) -> Started:
        channel_id = f.get("channel_id")
        if not isinstance(channel_id, str) or not channel_id:
            raise P.ProtocolError(
                P.BAD_MESSAGE, "MEDIA_START carries no channel_id (Asterisk 20.16 / 21.11 / 22.6 or newer sends it)"
            )
        fmt = f.get("format")
        if fmt not in FORMATS:
            raise P.ProtocolError(
                P.UNSUPPORTED_FORMAT,
                f"MEDIA_START format {fmt!r} is not supported; dial with c(ulaw), c(alaw), c(slin) or c(slin16)",
            )
        encoding, rate = FORMATS[fmt]
        try:
            ptime = int(f.get("ptime") or 20)
            optimal = int(f.get("optimal_frame_size") or 0)
        except (TypeError, ValueError):
            raise P.ProtocolError(P.BAD_MESSAGE, "MEDIA_START: ptime and optimal_frame_size must be integers") from None
        audio = WireAudio(encoding, rate)
        frame_bytes = audio.frame_bytes * ptime // 20
        if ptime <= 0 or ptime > 200 or (optimal and optimal != frame_bytes):
            raise P.ProtocolError(
                P.UNSUPPORTED_FORMAT,
                f"MEDIA_START: optimal_frame_size {optimal} at ptime {ptime} does not fit {fmt} ({frame_bytes} expected)",
            )
        self.json, self.audio, self.channel_id = is_json, audio, channel_id
        self.optimal_frame_size = frame_bytes
        self._framer = Framer(frame_bytes)
        self._silence = audio.silence(1)
        info = {k: f[k] for k in ("connection_id", "channel", "format", "ptime") if k in f}
        # Per-call settings come from the dial string's v(call_id=…,voice=…) query parameters, which the leg reads.
        return Started(call_ids(channel_id), audio, info=info)

    # ------------------------------------------------------------ to Asterisk
    def media(self, data: bytes) -> list[Outgoing]:
        """Wire-encoded audio → BINARY messages of whole optimal frames (any remainder waits for more)."""
        self._require_start()
        frames = self._framer.push(data)
        return _pack(frames, self.optimal_frame_size)

    def mark(self, name: str) -> list[Outgoing]:
        """A mark after everything sent so far (a held partial frame goes out first, padded with silence)."""
        self._require_start()
        out: list[Outgoing] = []
        tail = self._framer.flush(self._silence)
        if tail is not None:
            out.append(tail)
        out.append(self._command("MARK_MEDIA", correlation_id=name))
        return out

    def clear(self) -> list[Outgoing]:
        self._require_start()
        self._framer.clear()
        return [self._command("FLUSH_MEDIA")]

    def hangup(self) -> list[Outgoing]:
        return [self._command("HANGUP")] if self.started else []

    def _command(self, command: str, **params: str) -> str:
        if self.json:
            text = json.dumps({"command": command, **params}, separators=(",", ":"))
        else:
            text = " ".join([command, *params.values()])
        if len(text.encode()) > MAX_COMMAND_BYTES:  # Asterisk would ignore it silently
            raise ValueError(f"chan_websocket command of {len(text)} bytes exceeds {MAX_COMMAND_BYTES}")
        return text

    def _require_start(self) -> None:
        if self.audio is None:
            raise RuntimeError("no MEDIA_START yet")


def _pack(frames: list[bytes], frame_bytes: int) -> list[Outgoing]:
    """Whole frames, several per message up to the message limit (normally one 20 ms frame per tick)."""
    per_message = max(1, MAX_MESSAGE_BYTES // frame_bytes)
    return [b"".join(frames[i : i + per_message]) for i in range(0, len(frames), per_message)]
