"""The engine service's wire protocol, version 1 (docs/engine-protocol.md).

Pure encode/decode: no sockets here. One ZeroMQ message is a multipart list
``[header, pcm_0, pcm_1, ...]``: the header is one msgpack map (a msgspec
`Struct` tagged by its field ``t``); PCM travels as raw float32 frames after
it, never inside the header (no base64, no copy into msgpack).

Every message type is a tagged struct, so a new one is one class and one
entry in `GATEWAY_MESSAGES` or `ENGINE_MESSAGES`; a field added with a default
is read as that default by older peers' messages and ignored by older peers.
A peer that receives a type it does not know answers `Error(code=
"unknown_type")` and carries on. `Hello` and `Welcome` carry `v`: peers of
different major versions refuse each other with `Refused(code=
"version_mismatch")`; optional capabilities are named in `features`.
"""

from __future__ import annotations

from typing import Union

import msgspec
import numpy as np

VERSION = 1
TURNS = "turns"  # Welcome.features: the engine takes turn-mode streams (Submit.turn, Ops.text / Ops.finish)
SECRET_ENV = "VOXGATE_ENGINE_SECRET"  # the shared secret that authenticates tcp:// peers (CURVE keys derive from it)

# Stable codes of the service itself (request codes are the engine's: overloaded, unknown_voice, ...).
VERSION_MISMATCH = "version_mismatch"
UNKNOWN_TYPE = "unknown_type"
BAD_MESSAGE = "bad_message"
NO_HELLO = "no_hello"  # ops from a peer that has not said hello (e.g. the engine restarted): say hello again
DRAINING = "draining"  # the engine is shutting down: it takes no new requests


class _Msg(msgspec.Struct, tag_field="t", omit_defaults=True):
    pass


# ---------------------------------------------------------------- shared pieces
class Sampling(msgspec.Struct, omit_defaults=True):
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    greedy: bool = False
    seed: int | None = None


class Submit(msgspec.Struct, omit_defaults=True):
    """One request. `due_in`: seconds from the moment it was sent until its first audio is needed (each
    side's monotonic clock is its own; a relative time survives the hop)."""

    sid: int  # the stream's id, unique per gateway connection
    text: str
    due_in: float
    voice: str = "default"
    language: str = "auto"
    instruct: str | None = None
    sampling: Sampling = msgspec.field(default_factory=Sampling)
    request_id: int = 0
    tag: str = ""
    turn: bool = False  # turn mode (feature "turns"): `text` is the first piece; Ops.text appends, Ops.finish ends it


class Chunk(msgspec.Struct, array_like=True):
    """A stream's packet; its PCM is multipart frame `part` (float32 LE), or none when `part` is -1."""

    sid: int
    frame_index: int
    last: bool
    part: int


class Words(msgspec.Struct, array_like=True):
    """Word timings that came with `Packets.chunks[chunk]` (tts.WordTimings): each span is
    (char_start, char_end, start, end): characters of the request's text, samples of its audio."""

    chunk: int
    source: str
    spans: list[tuple[int, int, int, int]]


class Failure(msgspec.Struct, array_like=True):
    """A stream that ended with an error (refused at submission or failed later)."""

    sid: int
    code: str
    message: str


class Load(msgspec.Struct, omit_defaults=True):
    """What placement reads: the engine's queue and slots, its recent step time and health."""

    active: int = 0
    queued: int = 0
    slots: int = 0  # requests the engine runs at once (qwen3: max_batch); 0 when it has no such limit
    max_queued: int = 0
    step_ms: float = 0.0  # mean step time since the last report
    health: str | None = None  # None while the engine serves
    draining: bool = False
    streams: int = 0  # this gateway's streams open on the engine
    stats: dict[str, float] = {}  # the engine's numeric counters (engine.stats())


# ---------------------------------------------------------------- gateway -> engine
class Hello(_Msg, tag="hello"):
    v: int
    gateway: str  # a random id per connection: the engine keys a gateway's streams by it
    name: str = ""  # host:pid, for the engine's logs
    features: list[str] = []


class Ops(_Msg, tag="ops"):
    """Everything a gateway asks of the engine in one event-loop turn: new requests, cancels, deadlines."""

    submit: list[Submit] = []
    cancel: list[int] = []
    deadline: list[tuple[int, float]] = []  # (sid, due_in)
    text: list[tuple[int, str]] = []  # turn mode: (sid, piece) in order, after this message's submits
    finish: list[int] = []  # turn mode: these turns' text is complete (after this message's text)


class Ping(_Msg, tag="ping"):
    pass


class AddVoice(_Msg, tag="add_voice"):
    call: int
    name: str
    ref_audio: bytes
    ref_text: str | None = None
    x_vector_only: bool = False


class RemoveVoice(_Msg, tag="remove_voice"):
    call: int
    name: str


# ---------------------------------------------------------------- engine -> gateway
class Welcome(_Msg, tag="welcome"):
    v: int
    engine: str  # the engine's kind: qwen3 | simulated | espeak
    engine_id: str  # random per engine process: a new one means the engine restarted
    sample_rate: int
    heartbeat_s: float  # both sides send at least every heartbeat_s / 4; silence for heartbeat_s is death
    can_clone: bool = False
    voices: list[str] = []
    vocoder: str | None = None
    features: list[str] = []
    load: Load = msgspec.field(default_factory=Load)


class Refused(_Msg, tag="refused"):
    """The hello was refused (version); the connection is unusable until the peer changes."""

    code: str
    message: str


class Packets(_Msg, tag="packets"):
    """Everything the engine has for one gateway after one step: every stream's packets and failures."""

    chunks: list[Chunk] = []
    failed: list[Failure] = []
    # turn mode, parallel to `chunks` when any has one: the turn's text [0, n) is spoken once that packet
    # has played (-1: a packet of a sentence-mode stream)
    text_ends: list[int] = []
    words: list[Words] = []  # word timings, for the chunks whose engine gave them (older peers ignore them)


class Beat(_Msg, tag="beat"):
    load: Load


class Reply(_Msg, tag="reply"):
    call: int
    ok: bool
    result: dict = {}
    code: str = ""
    message: str = ""


class Error(_Msg, tag="error"):
    """A message the peer could not take (unknown type, bad fields, no hello)."""

    code: str
    message: str


GATEWAY_MESSAGES = (Hello, Ops, Ping, AddVoice, RemoveVoice)
ENGINE_MESSAGES = (Welcome, Refused, Packets, Beat, Reply, Error)

_encoder = msgspec.msgpack.Encoder()
_to_engine = msgspec.msgpack.Decoder(Union[GATEWAY_MESSAGES])  # type: ignore[valid-type]
_to_gateway = msgspec.msgpack.Decoder(Union[ENGINE_MESSAGES])  # type: ignore[valid-type]


class WireError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def encode(msg: _Msg, parts: list | None = None) -> list:
    """The multipart frames of one message: its header, then the raw PCM parts."""
    return [_encoder.encode(msg), *(parts or ())]


def _decode(decoder, frames: list):
    if not frames:
        raise WireError(BAD_MESSAGE, "empty message")
    try:
        return decoder.decode(frames[0])
    except msgspec.ValidationError as exc:
        text = str(exc)
        code = UNKNOWN_TYPE if "`$.t`" in text and "Invalid value" in text else BAD_MESSAGE
        raise WireError(code, text) from None
    except msgspec.DecodeError as exc:
        raise WireError(BAD_MESSAGE, f"not a msgpack header: {exc}") from None


def decode_from_gateway(frames: list):
    return _decode(_to_engine, frames)


def decode_from_engine(frames: list):
    return _decode(_to_gateway, frames)


def pcm_part(pcm: np.ndarray):
    """A packet's PCM as a frame to send without copying (float32, contiguous)."""
    return memoryview(np.ascontiguousarray(pcm, dtype=np.float32)).cast("B")


def pcm_from(frame) -> np.ndarray:
    """A received PCM frame as float32 samples, writable (the playout clips pushed audio in place)."""
    data = frame.buffer if hasattr(frame, "buffer") else frame
    if len(data) % 4:
        raise WireError(BAD_MESSAGE, f"a PCM part of {len(data)} bytes is not float32 samples")
    return np.frombuffer(data, dtype=np.float32).copy()
