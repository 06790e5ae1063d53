"""jambonz `listen` with streaming bidirectional audio: pure encode/decode, no socket.

jambonz connects with subprotocol `audio.jambonz.org` and sends one TEXT
message first: the call's attributes (`callSid`, `callId`, `from`, `to`, …)
plus `sampleRate` and `mixType`, and the verb's `metadata`. Then BINARY
16-bit little-endian PCM at `sampleRate`. With `bidirectionalAudio:
{"enabled": true, "streaming": true, "sampleRate": N}` we stream BINARY L16
back at N — a rate jambonz does not announce on the socket, so it defaults
to `sampleRate` and the leg may override it (query `?bidirectional_sample_rate=`).

TEXT commands we send: `{"type": "mark", "data": {"name": …}}` (answered by
`{"type": "mark", "data": {"name": …, "event": "playout"}}` when reached, or
`"event": "cleared"` when a `killAudio` dropped it), `{"type": "killAudio"}`
(barge-in) and `{"type": "disconnect"}` (end the listen). With `passDtmf`,
digits arrive as `{"event": "dtmf", "dtmf": "5", "duration": "1600"}`.
"""

from __future__ import annotations

import json

from gateway import protocol as P
from gateway.wire.events import (
    Audio,
    Dtmf,
    Event,
    MarkDone,
    Outgoing,
    Started,
    StartRefused,
    WireAudio,
    call_ids,
    dtmf_digit,
    load_json_object,
    optional_str,
)

SUBPROTOCOL = "audio.jambonz.org"
RATES = (8000, 16000, 24000, 48000)  # jambonz also offers 64000, which we do not play
MAX_AUDIO_BYTES = 48_000 * 2
MAX_OUTSTANDING_MARKS = 30  # jambonz tracks a bounded number of marks


class JambonzWire:
    """One jambonz listen socket's messages, both ways."""

    subprotocol = SUBPROTOCOL
    clear_returns_marks = True  # killAudio answers queued marks with "cleared"

    def __init__(self, outbound_rate: int | str | None = None):
        self._out_rate = outbound_rate
        self.audio: WireAudio | None = None
        self.outbound: WireAudio | None = None

    @property
    def started(self) -> bool:
        return self.audio is not None

    # ------------------------------------------------------------ from jambonz
    def decode(self, data: str | bytes) -> list[Event]:
        if isinstance(data, bytes):
            if self.audio is None:
                raise P.ProtocolError(P.NO_SESSION, "jambonz sent audio before the call's attributes")
            if not data:
                return []
            if len(data) > MAX_AUDIO_BYTES:
                raise P.ProtocolError(
                    P.BAD_AUDIO, f"jambonz audio message of {len(data)} bytes is longer than a second"
                )
            return [Audio(self.audio.decode(data))]
        if self.audio is None:
            try:
                return [self._attributes(load_json_object(data, "jambonz"))]
            except P.ProtocolError as exc:  # the first message is the call itself: nothing works without it
                raise StartRefused(exc.code, exc.message) from None
        m = load_json_object(data, "jambonz")
        if m.get("event") == "dtmf":
            return [Dtmf(dtmf_digit(m.get("dtmf"), "jambonz dtmf"))]
        if m.get("type") == "mark":
            d = m.get("data")
            if (
                not isinstance(d, dict)
                or not isinstance(d.get("name"), str)
                or d.get("event") not in ("playout", "cleared")
            ):
                raise P.ProtocolError(
                    P.BAD_MESSAGE, "jambonz mark: 'data' needs a string 'name' and 'event' playout|cleared"
                )
            return [MarkDone(d["name"], played=d["event"] == "playout")]
        what = m.get("type") or m.get("event")
        if isinstance(what, str):
            raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown jambonz message {what!r}")
        raise P.ProtocolError(P.BAD_MESSAGE, "a jambonz message needs a string 'type' or 'event'")

    def _attributes(self, m: dict) -> Started:
        call_sid = m.get("callSid")
        if not isinstance(call_sid, str) or not call_sid:
            raise P.ProtocolError(
                P.BAD_MESSAGE, "the first jambonz message must be the call's attributes with a 'callSid'"
            )
        mix = m.get("mixType", "mono")
        if mix != "mono":
            raise P.ProtocolError(
                P.UNSUPPORTED_FORMAT, f'jambonz mixType {mix!r}: only mono is supported (set "mixType": "mono")'
            )
        self.audio = WireAudio("pcm16le", _rate(m.get("sampleRate", 8000), "sampleRate"))
        self.outbound = (
            WireAudio("pcm16le", _rate(self._out_rate, "bidirectional_sample_rate")) if self._out_rate else self.audio
        )
        meta = m.get("metadata") if isinstance(m.get("metadata"), dict) else {}

        def setting(key: str):
            return optional_str(meta.get(key)) or optional_str(m.get(key))

        ids = call_ids(setting("call_id"), call_sid, m.get("callId"))
        info = {k: m[k] for k in ("callSid", "callId", "from", "to", "direction", "sampleRate") if k in m}
        return Started(ids, self.audio, voice=setting("voice"), language=setting("language"), info=info)

    # ------------------------------------------------------------ to jambonz
    def media(self, data: bytes) -> list[Outgoing]:
        return [data]

    def mark(self, name: str) -> list[Outgoing]:
        return [json.dumps({"type": "mark", "data": {"name": name}}, separators=(",", ":"))]

    def clear(self) -> list[Outgoing]:
        return ['{"type":"killAudio"}']

    def hangup(self) -> list[Outgoing]:
        return ['{"type":"disconnect"}'] if self.started else []


def _rate(value, what: str) -> int:
    try:
        rate = int(value)
    except (TypeError, ValueError):
        raise P.ProtocolError(P.BAD_MESSAGE, f"jambonz {what} {value!r} is not a number") from None
    if rate not in RATES:
        raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"jambonz {what} {rate} is not supported; use one of {RATES}")
    return rate
