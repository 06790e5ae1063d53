"""Native protocol v1 (DESIGN.md §3.4): client message validation and server event builders.

Every bad message becomes a `ProtocolError` with a stable code; the
connection decides whether the session survives it (it does, unless the
socket itself is unusable).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Stable error codes; add new ones, never reuse one for another meaning.
BAD_JSON = "bad_json"
BAD_MESSAGE = "bad_message"
UNKNOWN_TYPE = "unknown_type"
NO_SESSION = "no_session"
BINARY_NOT_ALLOWED = "binary_not_allowed"
TOO_LARGE = "too_large"
TEXT_TOO_LONG = "text_too_long"
UNSUPPORTED_FORMAT = "unsupported_format"
UNKNOWN_VOICE = "unknown_voice"
NO_AGENT = "no_agent"
AT_CAPACITY = "at_capacity"
OVERLOADED = "overloaded"
UNKNOWN_CALL = "unknown_call"
UNAUTHORIZED = "unauthorized"
LLM_ERROR = "llm_error"
INTERNAL = "internal"
SESSION_EXISTS = "session_exists"  # a second session.start on one connection
TURN_CLOSED = "turn_closed"  # text for a turn that already got final
TOO_MANY_TURNS = "too_many_turns"  # more queued turns than limits.max_queued_turns
ENGINE_ERROR = "engine_error"  # the engine failed one text chunk
CALL_TOO_LONG = "call_too_long"  # limits.max_call_s reached
IDLE_TIMEOUT = "idle_timeout"  # no client message for limits.idle_timeout_s
SHUTTING_DOWN = "shutting_down"  # the gateway is draining
CALL_BUSY = "call_busy"  # the call already has a control socket (or a media leg)
BAD_AUDIO = "bad_audio"  # inbound media that cannot be decoded (bad base64, odd or absurd length)
MEDIA_ERROR = "media_error"  # the media far end reported an error (AudioSocket 0xff frame)
UNSUPPORTED_SPEED = "unsupported_speed"  # OpenAI speech: a `speed` the engine cannot honour

# WebSocket close codes the gateway uses (RFC 6455 §7.4 and the IANA registry).
CLOSE_POLICY = 1008  # the peer broke the protocol in a way the connection cannot survive
CLOSE_TRY_AGAIN_LATER = 1013  # at capacity or draining: come back later


class ProtocolError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def event(self) -> dict:
        return error_event(self.code, self.message)


def error_event(code: str, message: str) -> dict:
    return {"type": "error", "code": code, "message": message}


@dataclass(frozen=True)
class Field:
    name: str
    types: tuple
    required: bool = False


# type -> allowed fields (unknown extra fields are ignored: clients may add their own).
_SCHEMAS: dict[str, tuple[Field, ...]] = {
    "session.start": (
        Field("voice", (str,)),
        Field("language", (str,)),
        Field("instruct", (str,)),
        Field("output", (dict,)),
    ),
    "text": (
        Field("turn_id", (str, int), required=True),
        Field("text", (str,), required=True),
        Field("final", (bool,)),
    ),
    "user.text": (Field("text", (str,), required=True),),
    "interrupt": (),
    "session.end": (Field("drain", (bool,)),),
    "call.attach": (
        Field("call_id", (str,), required=True),
        Field("voice", (str,)),
        Field("language", (str,)),
        Field("instruct", (str,)),
    ),
}


def parse_message(raw: str | bytes, max_bytes: int) -> dict[str, Any]:
    """Decode and validate one client text message."""
    if len(raw) > max_bytes:
        raise ProtocolError(TOO_LARGE, f"message of {len(raw)} bytes exceeds the limit of {max_bytes}")
    try:
        msg = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(BAD_JSON, f"message is not valid JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(BAD_MESSAGE, "message must be a JSON object")
    mtype = msg.get("type")
    if not isinstance(mtype, str):
        raise ProtocolError(BAD_MESSAGE, "message needs a string field 'type'")
    schema = _SCHEMAS.get(mtype)
    if schema is None:
        raise ProtocolError(UNKNOWN_TYPE, f"unknown message type {mtype!r}")
    for field in schema:
        if field.name not in msg or msg[field.name] is None:
            if field.required:
                raise ProtocolError(BAD_MESSAGE, f"{mtype}: missing field {field.name!r}")
            continue
        value = msg[field.name]
        if isinstance(value, bool) and bool not in field.types:
            raise ProtocolError(BAD_MESSAGE, f"{mtype}: field {field.name!r} has the wrong type (bool)")
        if not isinstance(value, field.types):
            want = " or ".join(t.__name__ for t in field.types)
            raise ProtocolError(BAD_MESSAGE, f"{mtype}: field {field.name!r} must be {want}, got {type(value).__name__}")
    if mtype == "text":
        msg["turn_id"] = str(msg["turn_id"])
        if not msg["turn_id"]:
            raise ProtocolError(BAD_MESSAGE, "text: field 'turn_id' must not be empty")
    return msg
