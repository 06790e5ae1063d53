"""Native protocol v1 (docs/protocol.md): client message validation and server event builders.

Every bad message becomes a `ProtocolError` with a stable code; the
connection decides whether the session survives it (it does, unless the
socket itself is unusable).
"""

from __future__ import annotations

import json
import re
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
ENGINE_UNAVAILABLE = "engine_unavailable"  # the engine cannot serve (its worker died or hangs): no new sessions
CALL_TOO_LONG = "call_too_long"  # limits.max_call_s reached
IDLE_TIMEOUT = "idle_timeout"  # no client message for limits.idle_timeout_s
SHUTTING_DOWN = "shutting_down"  # the gateway is draining
CALL_BUSY = "call_busy"  # the call already has a control socket (or a media leg)
BAD_AUDIO = "bad_audio"  # inbound media that cannot be decoded (bad base64, odd or absurd length)
MEDIA_ERROR = "media_error"  # the media far end reported an error (AudioSocket 0xff frame)
STT_ERROR = "stt_error"  # the transcription server failed one utterance (the call goes on)
VAD_UNAVAILABLE = "vad_unavailable"  # barge_in asked for a detector whose package is not installed
UNSUPPORTED_SPEED = "unsupported_speed"  # OpenAI speech: a `speed` the engine cannot honour
RATE_LIMITED = "rate_limited"  # per-IP caps: too many connections open, or opened too fast (HTTP 429 / close 1013)
CLUSTER_UNAVAILABLE = "cluster_unavailable"  # cluster.redis_url set and Redis unreachable: new calls and joins refused (HTTP 503 / close 1013)
FORBIDDEN_ORIGIN = "forbidden_origin"  # a browser page whose Origin is not in server.allowed_origins (HTTP 403)
NOT_FOUND = "not_found"  # HTTP 404: no route or no file by that path
METHOD_NOT_ALLOWED = (
    "method_not_allowed"  # HTTP 405: the route exists, not for this method (Allow names those it takes)
)
BAD_REQUEST = "bad_request"  # any other HTTP 4xx aiohttp itself refuses with (e.g. a plain GET on a WebSocket route)
SIP_FORBIDDEN = "forbidden"  # SIP: an INVITE from an address outside sip.allow (403, in X-Voxgate-Reason)
SIP_AUTH_FAILED = "auth_failed"  # SIP: digest credentials refused, or a source blocked after repeated failures (403)
RTP_PORTS_EXHAUSTED = "rtp_ports_exhausted"  # SIP: no free RTP port pair in sip.rtp_ports (503)
DIALOG_MISMATCH = "dialog_mismatch"  # SIP: an in-dialog request whose tags match no dialog of ours (481)
NOT_DIALOG_PEER = "not_dialog_peer"  # SIP: a request for a dialog from neither its peer nor sip.allow (403)
BAD_SDP = "bad_sdp"  # SIP: an SDP offer that does not parse (488)
SDP_ADDRESS = "sdp_address"  # SIP: the offer's c= is not an IPv4 literal (a name would be resolved per packet) (488)
SDP_PORT = "sdp_port"  # SIP: the offer's audio port is not an even number 2..65534 (488)
AUDIO_DECLINED = "audio_declined"  # SIP: the offer declines audio (m=audio 0) (488)
SRTP_UNSUPPORTED = (
    "srtp_unsupported"  # SIP: an SRTP offer voxgate cannot take (sip.srtp off, over plain SIP, no usable key) (488)
)
SESSION_INTERVAL_TOO_SMALL = "session_interval_too_small"  # SIP: Session-Expires below sip.min_se_s (422, Min-SE)
SRTP_REQUIRED = "srtp_required"  # SIP: a plain RTP offer while sip.srtp is required (488)
TRANSFER_NOT_ALLOWED = "transfer_not_allowed"  # call.transfer to a target sip.transfer_targets does not match

# WebSocket close codes the gateway uses (RFC 6455 §7.4 and the IANA registry).
CLOSE_POLICY = 1008  # the peer broke the protocol in a way the connection cannot survive
CLOSE_TRY_AGAIN_LATER = 1013  # at capacity or draining: come back later


SPEECH_MODES = ("sentence", "turn")


def check_mode(mode) -> str | None:
    """session.start.mode / call.attach.mode: None (the config's default) or one of SPEECH_MODES."""
    if mode is not None and mode not in SPEECH_MODES:
        raise ProtocolError(BAD_MESSAGE, f"mode must be one of {', '.join(SPEECH_MODES)}, not {mode!r}")
    return mode


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
        Field("input", (dict,)),  # the caller's audio as binary messages: {"encoding", "sample_rate"}
        Field("barge_in", (dict,)),  # per-session override of the config's barge_in section
        Field("mode", (str,)),  # "sentence" | "turn" (default: the config's chunker.mode)
        Field("word_timings", (bool,)),  # true: audio.words events (when each word of the agent's text is heard)
    ),
    "text": (
        Field("turn_id", (str, int), required=True),
        Field("text", (str,), required=True),
        Field("final", (bool,)),
    ),
    "user.text": (Field("text", (str,), required=True),),
    "interrupt": (),
    "session.end": (Field("drain", (bool,)),),
    # SIP calls: REFER to a sip:/tel: URI, with the `X-` headers asked for
    "call.transfer": (Field("to", (str,), required=True), Field("headers", (dict,))),
    "call.attach": (
        Field("call_id", (str,), required=True),
        Field("voice", (str,)),
        Field("language", (str,)),
        Field("instruct", (str,)),
        Field("barge_in", (dict,)),
        Field("mode", (str,)),
        Field("word_timings", (bool,)),
    ),
}


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def loads_json(raw: str | bytes) -> Any:
    """`json.loads` for text from a peer: every way it can fail is a ValueError.

    Nesting deeper than the parser's recursion limit (a few KiB of `[`) raises
    RecursionError, which is not a ValueError and would escape as an internal error.
    """
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def dump_event(event: dict) -> str:
    """An event as JSON text that can always be sent: text with lone surrogates (from an LLM, say)
    cannot be encoded as UTF-8, so such an event travels with ASCII escapes instead."""
    data = json.dumps(event, ensure_ascii=False)
    try:
        data.encode("utf-8")
    except UnicodeEncodeError:
        data = json.dumps(event)
    return data


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]  # iterative: the value may nest as deep as the parser allowed
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def parse_message(raw: str | bytes, max_bytes: int) -> dict[str, Any]:
    """Decode and validate one client text message."""
    if len(raw) > max_bytes:
        raise ProtocolError(TOO_LARGE, f"message of {len(raw)} bytes exceeds the limit of {max_bytes}")
    try:
        msg = loads_json(raw)
    except ValueError as exc:  # UnicodeDecodeError is one
        raise ProtocolError(BAD_JSON, f"message is not valid JSON: {exc}") from None
    # A `\ud800` escape decodes to a string that cannot be encoded again: accepted, it could never be echoed
    # back in an event (turn ids, played_text). Valid pairs (`\ud83d\ude00`) decode to one character and pass.
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(msg):
        raise ProtocolError(
            BAD_JSON, "message holds a lone surrogate escape (\\ud800-\\udfff alone is not Unicode text)"
        )
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
            raise ProtocolError(
                BAD_MESSAGE, f"{mtype}: field {field.name!r} must be {want}, got {type(value).__name__}"
            )
    if mtype == "text":
        msg["turn_id"] = str(msg["turn_id"])
        if not msg["turn_id"]:
            raise ProtocolError(BAD_MESSAGE, "text: field 'turn_id' must not be empty")
    return msg
