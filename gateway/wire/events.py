"""What the pure wire formats hand their legs: decoded far-end events and the audio format on the wire.

A wire class turns one provider's messages into these events and our
intentions (audio, a mark, barge-in, hangup) into that provider's messages.
It owns no socket and no clock: a leg feeds it what arrived and sends what it
returns. Every malformed input raises `gateway.protocol.ProtocolError` with a
stable code; the leg reports it and the call goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from gateway import protocol as P

DTMF_DIGITS = frozenset("0123456789*#ABCDabcd")
PCM_ENCODINGS = ("mulaw", "alaw", "pcm16le", "pcm16be")

# What a wire returns to send: TEXT frames as str, BINARY frames as bytes.
Outgoing = Union[str, bytes]


@dataclass(frozen=True)
class WireAudio:
    """Audio as it travels on one wire: encoding, rate and the frame the far end expects."""

    encoding: str  # mulaw | alaw | pcm16le | pcm16be
    sample_rate: int
    frame_ms: int = 20

    def __post_init__(self) -> None:
        if self.encoding not in PCM_ENCODINGS:
            raise ValueError(f"wire encoding {self.encoding!r} is not one of {PCM_ENCODINGS}")
        if self.encoding in ("mulaw", "alaw") and self.sample_rate != 8000:
            raise ValueError(f"{self.encoding} is 8000 Hz only")
        if self.sample_rate * self.frame_ms % 1000:
            raise ValueError(f"{self.frame_ms} ms is not a whole number of samples at {self.sample_rate} Hz")

    @property
    def bytes_per_sample(self) -> int:
        return 1 if self.encoding in ("mulaw", "alaw") else 2

    @property
    def frame_samples(self) -> int:
        return self.sample_rate * self.frame_ms // 1000

    @property
    def frame_bytes(self) -> int:
        return self.frame_samples * self.bytes_per_sample

    def decode(self, data: bytes) -> np.ndarray:
        """Wire bytes to int16 samples; an odd pcm16 length is `bad_audio`."""
        if self.encoding == "mulaw":
            return ulaw_decode(data)
        if self.encoding == "alaw":
            return alaw_decode(data)
        if len(data) % 2:
            raise P.ProtocolError(P.BAD_AUDIO, f"{self.encoding} audio of odd length {len(data)} bytes")
        return np.frombuffer(data, dtype="<i2" if self.encoding == "pcm16le" else ">i2").astype(np.int16)

    def encode(self, pcm: np.ndarray) -> bytes:
        """int16 samples to wire bytes."""
        pcm = np.asarray(pcm, dtype=np.int16)
        if self.encoding == "mulaw":
            return ulaw_encode(pcm)
        if self.encoding == "alaw":
            return alaw_encode(pcm)
        return pcm.astype("<i2" if self.encoding == "pcm16le" else ">i2", copy=False).tobytes()

    def silence(self, samples: int) -> bytes:
        return self.encode(np.zeros(samples, dtype=np.int16))


# ---------------------------------------------------------------- events from the far end
@dataclass(frozen=True)
class Started:
    """The media stream began: the ids the call is known by, its audio format and per-call settings."""

    call_ids: tuple[str, ...]
    audio: WireAudio  # what the far end sends us
    voice: str | None = None
    language: str | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the provider's own fields, for logs


@dataclass(frozen=True)
class Audio:
    """The caller's audio, decoded to int16 at the wire's rate; `timestamp_ms` from stream start when known."""

    pcm: np.ndarray
    timestamp_ms: float | None = None


@dataclass(frozen=True)
class Dtmf:
    digit: str


@dataclass(frozen=True)
class MarkDone:
    """The far end reached a mark we sent (`played`) or dropped it on barge-in (not `played`)."""

    name: str
    played: bool


@dataclass(frozen=True)
class FlowControl:
    """The far end asks us to stop (`paused`) or resume sending media."""

    paused: bool


@dataclass(frozen=True)
class Ended:
    reason: str


@dataclass(frozen=True)
class FarEndError:
    """The far end reported a problem of its own (no action but to report it)."""

    message: str


@dataclass(frozen=True)
class Notice:
    """A known message that needs no action (a connected banner, a status reply, a clear acknowledgment)."""

    kind: str


Event = Union[Started, Audio, Dtmf, MarkDone, FlowControl, Ended, FarEndError, Notice]


class StartRefused(P.ProtocolError):
    """The stream's opening message is unusable (bad format, no call id): nothing else on the stream can work."""


# ---------------------------------------------------------------- shared parsing helpers
def load_json_object(raw: str, what: str) -> dict:
    try:
        m = P.loads_json(raw)  # deep nesting is a ValueError here, not a RecursionError
    except ValueError as exc:
        raise P.ProtocolError(P.BAD_JSON, f"{what} message is not valid JSON: {exc}") from None
    if not isinstance(m, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, f"a {what} message must be a JSON object")
    return m


def dtmf_digit(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) != 1 or value not in DTMF_DIGITS:
        raise P.ProtocolError(P.BAD_MESSAGE, f"{what}: the digit must be one of 0-9 * # A-D, got {value!r}")
    return value.upper()


def optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def call_ids(*candidates: Any) -> tuple[str, ...]:
    """The non-empty string ids in order, without repeats."""
    return tuple(dict.fromkeys(c for c in candidates if isinstance(c, str) and c.strip()))


class Framer:
    """Cuts outbound audio into whole frames of `frame_bytes` (a far end that drops partial frames needs that)."""

    def __init__(self, frame_bytes: int):
        self.frame_bytes = frame_bytes
        self._rest = b""

    def push(self, data: bytes) -> list[bytes]:
        data = self._rest + data
        n = len(data) - len(data) % self.frame_bytes
        self._rest = data[n:]
        return [data[i : i + self.frame_bytes] for i in range(0, n, self.frame_bytes)]

    def flush(self, pad: bytes) -> bytes | None:
        """The partial frame, padded with `pad` bytes (silence), or None when nothing is held."""
        if not self._rest:
            return None
        rest, self._rest = self._rest, b""
        need = self.frame_bytes - len(rest)
        return rest + (pad * (need // len(pad) + 1))[:need]

    def clear(self) -> None:
        self._rest = b""
