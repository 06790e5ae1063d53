"""voxgate-client: a small async client for the voxgate voice gateway (native protocol v1)."""

from voxgate_client.events import (
    AgentText,
    Audio,
    AudioStart,
    CallAttached,
    CallMark,
    CallMedia,
    Dtmf,
    Error,
    Event,
    Mark,
    Reconnected,
    SessionEnded,
    SessionStarted,
    TurnDone,
    Underrun,
    UnknownEvent,
    UserSpeech,
    parse_event,
)
from voxgate_client.session import Session, Turn, VoxgateError

__version__ = "0.1.0"
__all__ = [
    "Session",
    "Turn",
    "VoxgateError",
    "Event",
    "parse_event",
    "Audio",
    "AudioStart",
    "Mark",
    "Underrun",
    "TurnDone",
    "Error",
    "SessionStarted",
    "SessionEnded",
    "CallAttached",
    "CallMedia",
    "CallMark",
    "Dtmf",
    "UserSpeech",
    "AgentText",
    "Reconnected",
    "UnknownEvent",
]
