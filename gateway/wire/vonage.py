"""Vonage Voice API WebSocket (NCCO `connect` to a `websocket` endpoint): pure encode/decode, no socket.

Vonage opens the socket and sends one TEXT message first,
`{"event": "websocket:connected", "content-type": "audio/l16;rate=16000", …}`,
with the NCCO endpoint's `headers` flattened into it. Then BINARY frames of
16-bit little-endian linear PCM, mono, exactly 20 ms each (640 bytes at
16 kHz, 320 at 8 kHz, 960 at 24 kHz), both ways. TEXT commands we send:
`{"action": "clear"}` (drop buffered audio; acknowledged by
`websocket:cleared`) and `{"action": "notify", "payload": {…}}`, echoed as
`websocket:notify` once the audio queued before it has played — our
playback confirmation. DTMF arrives as `websocket:dtmf`.

Vonage puts no call id on the socket: the NCCO must pass one, as a header
(`"headers": {"call_id": "…"}`) or a query parameter on the endpoint's `uri`
(which the leg reads).
"""

from __future__ import annotations

import json
import re

from gateway import protocol as P
from gateway.wire.events import (
    Audio,
    Dtmf,
    Event,
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

RATES = (8000, 16000, 24000)
MAX_AUDIO_BYTES = 24_000 * 2  # a second at the highest rate; Vonage sends 20 ms
_CONTENT_TYPE = re.compile(r"\s*audio/l16\s*;\s*rate\s*=\s*(\d+)\s*$", re.IGNORECASE)
MARK_KEY = "voxgate_mark"  # our key inside a notify payload


class VonageWire:
    """One Vonage WebSocket's messages, both ways."""

    clear_returns_marks = False  # notifies queued before a clear are not promised back

    def __init__(self) -> None:
        self.audio: WireAudio | None = None

    @property
    def started(self) -> bool:
        return self.audio is not None

    @property
    def outbound(self) -> WireAudio | None:
        return self.audio  # the same format both ways

    # ------------------------------------------------------------ from Vonage
    def decode(self, data: str | bytes) -> list[Event]:
        if isinstance(data, bytes):
            if self.audio is None:
                raise P.ProtocolError(P.NO_SESSION, "Vonage sent audio before websocket:connected")
            if not data:
                return []
            if len(data) > MAX_AUDIO_BYTES:
                raise P.ProtocolError(
                    P.BAD_AUDIO, f"Vonage audio message of {len(data)} bytes (20 ms is {self.audio.frame_bytes})"
                )
            return [Audio(self.audio.decode(data))]
        m = load_json_object(data, "Vonage")
        event = m.get("event")
        if not isinstance(event, str):
            raise P.ProtocolError(P.BAD_MESSAGE, "a Vonage message needs a string 'event'")
        if event == "websocket:connected":
            if self.audio is not None:
                raise P.ProtocolError(P.BAD_MESSAGE, "a second websocket:connected on one socket; ignored")
            try:
                return [self._connected(m)]
            except P.ProtocolError as exc:
                raise StartRefused(exc.code, exc.message) from None
        if self.audio is None:
            raise P.ProtocolError(P.NO_SESSION, f"Vonage sent {event!r} before websocket:connected")
        if event == "websocket:dtmf":
            nested = m.get("dtmf") if isinstance(m.get("dtmf"), dict) else {}
            return [Dtmf(dtmf_digit(m.get("digit", nested.get("digit")), "websocket:dtmf"))]
        if event == "websocket:notify":
            payload = m.get("payload")
            name = payload.get(MARK_KEY) if isinstance(payload, dict) else None
            if not isinstance(name, str) or not name:
                raise P.ProtocolError(P.BAD_MESSAGE, f"websocket:notify without our {MARK_KEY!r} in its payload")
            return [MarkDone(name, played=True)]
        if event == "websocket:cleared":
            return [Notice("cleared")]
        raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown Vonage event {event!r}")

    def _connected(self, m: dict) -> Started:
        content_type = m.get("content-type")
        match = _CONTENT_TYPE.match(content_type) if isinstance(content_type, str) else None
        if match is None:
            raise P.ProtocolError(
                P.UNSUPPORTED_FORMAT, f"websocket:connected content-type {content_type!r} is not audio/l16;rate=N"
            )
        rate = int(match.group(1))
        if rate not in RATES:
            raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"audio/l16 at {rate} Hz is not supported; use one of {RATES}")
        self.audio = WireAudio("pcm16le", rate)
        headers = {k: v for k, v in m.items() if k not in ("event", "content-type")}
        return Started(
            call_ids(headers.get("call_id")),
            self.audio,
            voice=optional_str(headers.get("voice")),
            language=optional_str(headers.get("language")),
            info={"content-type": content_type},
        )

    # ------------------------------------------------------------ to Vonage
    def media(self, data: bytes) -> list[Outgoing]:
        """One 20 ms frame of L16 → one BINARY message (Vonage wants exactly 20 ms per message)."""
        return [data]

    def mark(self, name: str) -> list[Outgoing]:
        return [json.dumps({"action": "notify", "payload": {MARK_KEY: name}}, separators=(",", ":"))]

    def clear(self) -> list[Outgoing]:
        return ['{"action":"clear"}']

    def hangup(self) -> list[Outgoing]:
        return []  # closing the socket ends the NCCO connect action
