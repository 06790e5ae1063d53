"""Typed server events of the native protocol (docs/protocol.md).

Every JSON event becomes one of these dataclasses; fields the gateway adds
later (it may add, never rename) land in `extra`, and an event type this
version does not know becomes `UnknownEvent` — a newer gateway never breaks
an older client.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

try:  # numpy is optional: audio frames are bytes without it
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only where numpy is absent
    _np = None


@dataclass
class Event:
    type: ClassVar[str] = ""
    extra: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)


@dataclass
class SessionStarted(Event):
    type: ClassVar[str] = "session.started"
    session_id: str = ""
    output: dict = field(default_factory=dict)
    voice: str | None = None
    language: str | None = None


@dataclass
class CallAttached(Event):
    type: ClassVar[str] = "call.attached"
    call_id: str = ""
    session_id: str = ""
    voice: str | None = None


@dataclass
class AudioStart(Event):
    type: ClassVar[str] = "audio.start"
    turn_id: str = ""
    ttfa_ms: float = 0.0


@dataclass
class Mark(Event):
    type: ClassVar[str] = "mark"
    turn_id: str = ""
    chunk: int = 0
    played_ms: float = 0.0  # the turn's audio played (pacing "none": sent) up to the end of this chunk
    text: str | None = None  # the chunk's text as the agent wrote it (gateways before it: None)


@dataclass
class Words(Event):
    """`audio.words` (sessions opened with word_timings=True): when each word of the turn is heard. Each
    entry of `words` is {"text", "start_ms", "end_ms"}: the word as the agent wrote it, in ms of the turn's
    audio (0 = its first sample). `source`: engine | aligner | estimate."""

    type: ClassVar[str] = "audio.words"
    turn_id: str = ""
    words: list = field(default_factory=list)
    source: str = ""


@dataclass
class Underrun(Event):
    type: ClassVar[str] = "underrun"
    turn_id: str = ""
    duration_ms: float = 0.0
    kind: str = ""  # micro | audible
    cause: str = ""  # engine | text | network


@dataclass
class TurnDone(Event):
    type: ClassVar[str] = "turn.done"
    turn_id: str = ""
    played_ms: float = 0.0
    interrupted: bool = False
    gaps: dict = field(default_factory=dict)
    played_text: str = ""
    interrupted_by: str | None = None
    timing_source: str | None = None  # where played_text's word times came from: engine | aligner | estimate | mixed


@dataclass
class Error(Event):
    type: ClassVar[str] = "error"
    code: str = ""
    message: str = ""


@dataclass
class SessionEnded(Event):
    type: ClassVar[str] = "session.ended"
    reason: str | None = (
        None  # set by the client when it ends the session itself (e.g. the call ended while disconnected)
    )


@dataclass
class CallMedia(Event):
    type: ClassVar[str] = "call.media"
    state: str = ""  # connected | ended
    leg: str | None = None
    reason: str | None = None


@dataclass
class CallProgress(Event):
    """An outbound call rings (`Session.dial`): state `trying` (100), `ringing` (180), `early` (183 with SDP)."""

    type: ClassVar[str] = "call.progress"
    state: str = ""
    status: int = 0


@dataclass
class CallAnswered(Event):
    """An outbound call was answered: `sip` is who answered (direction, from, to, request_uri, headers, …)."""

    type: ClassVar[str] = "call.answered"
    status: int = 200
    sip: dict = field(default_factory=dict)


@dataclass
class CallFailed(Event):
    """An outbound call failed; the session ends next. `code`: busy | no_answer | rejected | not_found |
    unavailable | auth_failed; `status`: the SIP status (487 after a ring timeout)."""

    type: ClassVar[str] = "call.failed"
    code: str = ""
    status: int = 0
    reason: str = ""


@dataclass
class CallMark(Event):
    type: ClassVar[str] = "call.mark"
    turn_id: str = ""
    chunk: int = 0
    status: str = ""
    played_ms: float = 0.0


@dataclass
class Dtmf(Event):
    type: ClassVar[str] = "dtmf"
    digit: str = ""


@dataclass
class UserSpeech(Event):
    type: ClassVar[str] = "user.speech"
    state: str = ""  # started | stopped
    at_ms: float | None = None


@dataclass
class AgentText(Event):
    type: ClassVar[str] = "agent.text"
    turn_id: str = ""
    text: str = ""


@dataclass
class UnknownEvent(Event):
    """An event type this client version does not know; `data` is the whole message."""

    data: dict = field(default_factory=dict)


@dataclass
class Reconnected(Event):
    """Client-side: the control socket dropped and was re-attached to the same call.
    Events sent by the gateway while it was down are lost (the gateway does not buffer them)."""

    type: ClassVar[str] = "client.reconnected"
    call_id: str = ""
    session_id: str = ""
    attempts: int = 0


@dataclass
class Audio(Event):
    """One binary message of the session's audio (only on /v1/ws), in the negotiated encoding: a 20 ms
    frame with pacing "realtime", a piece of any length (at most 200 ms) with pacing "none"."""

    type: ClassVar[str] = "audio"
    data: Any = b""  # bytes, or a numpy array when the session was opened with audio="numpy"
    encoding: str = "pcm16"
    sample_rate: int = 24000

    def to_numpy(self):
        """int16 samples for pcm16, uint8 codes for mulaw/alaw; needs numpy."""
        if _np is None:
            raise RuntimeError("numpy is not installed; use Audio.data (bytes)")
        if isinstance(self.data, _np.ndarray):
            return self.data
        return _np.frombuffer(self.data, dtype="<i2" if self.encoding == "pcm16" else _np.uint8)


_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        SessionStarted,
        CallAttached,
        AudioStart,
        Mark,
        Words,
        Underrun,
        TurnDone,
        Error,
        SessionEnded,
        CallMedia,
        CallMark,
        CallProgress,
        CallAnswered,
        CallFailed,
        Dtmf,
        UserSpeech,
        AgentText,
    )
}


def parse_event(message: dict) -> Event:
    """A decoded JSON event → its dataclass (unknown fields kept in `extra`)."""
    cls = _TYPES.get(message.get("type", ""))
    if cls is None:
        return UnknownEvent(data=message)
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    known = {k: v for k, v in message.items() if k in names}
    extra = {k: v for k, v in message.items() if k not in names and k != "type"}
    try:
        return cls(**known, extra=extra)
    except TypeError:  # a field of an unexpected shape: keep the message rather than fail the stream
        return UnknownEvent(data=message)
