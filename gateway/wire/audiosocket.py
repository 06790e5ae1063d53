"""Asterisk AudioSocket framing: `type: u8`, `length: u16 big-endian`, `payload`, encoded and decoded.

Asterisk opens with the call's UUID (0x01, 16 bytes), then sends slin 8 kHz
audio (0x10), DTMF (0x03), errors (0xff) and hangup (0x00); newer Asterisk
also knows slin at higher rates (0x11..0x18), which we do not take. We send
slin 8 kHz frames and hangup.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

import numpy as np

from gateway import protocol as P
from gateway.wire.events import dtmf_digit

KIND_HANGUP = 0x00
KIND_UUID = 0x01
KIND_DTMF = 0x03
KIND_SLIN = 0x10  # signed linear 16-bit LE, 8 kHz, mono
KIND_ERROR = 0xFF
KIND_VOXGATE_HOP = (
    0xF7  # not Asterisk's: a node of a voxgate call plane opening a forwarded connection (docs/cluster.md)
)
SLIN_HIGHER_RATES = range(0x11, 0x19)  # newer Asterisk: slin at 12..192 kHz (not supported here)
ASTERISK_CALLER_HUNG_UP = 0x01  # error code in an 0xff frame
HEADER_BYTES = 3
SLIN_FRAME_BYTES = 320  # 20 ms at 8 kHz


def frame(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BH", kind, len(payload)) + payload


HANGUP = frame(KIND_HANGUP)
_SLIN_HEADER = struct.pack(">BH", KIND_SLIN, SLIN_FRAME_BYTES)


def audio_frame(pcm16: bytes) -> bytes:
    """One slin message (the common 20 ms frame reuses a prebuilt header)."""
    return _SLIN_HEADER + pcm16 if len(pcm16) == SLIN_FRAME_BYTES else frame(KIND_SLIN, pcm16)


def parse_header(header: bytes) -> tuple[int, int]:
    """(kind, payload length) of a 3-byte header."""
    return struct.unpack(">BH", header)


def call_uuid(kind: int, payload: bytes) -> str:
    """The call's UUID from the opening message, in canonical text; ProtocolError if it is not one."""
    if kind != KIND_UUID or len(payload) != 16:
        raise P.ProtocolError(
            P.BAD_MESSAGE,
            f"the first message must be the UUID (type 0x01, 16 bytes), got type 0x{kind:02x} with {len(payload)} bytes",
        )
    return str(uuid.UUID(bytes=payload))


# ---------------------------------------------------------------- messages after the handshake
@dataclass
class Audio:
    pcm: np.ndarray  # int16 8 kHz


@dataclass
class Hangup:
    pass


@dataclass
class Dtmf:
    digit: str


@dataclass
class FarEndError:
    code: int | None

    @property
    def caller_hung_up(self) -> bool:
        return self.code == ASTERISK_CALLER_HUNG_UP


@dataclass
class HigherRateAudio:
    kind: int


@dataclass
class SecondUuid:
    pass


@dataclass
class Unknown:
    kind: int
    length: int


AudioSocketMessage = Audio | Hangup | Dtmf | FarEndError | HigherRateAudio | SecondUuid | Unknown


def decode(kind: int, payload: bytes) -> AudioSocketMessage | None:
    """One message after the UUID; None for an empty audio payload; ProtocolError for a bad payload."""
    if kind == KIND_SLIN:
        if len(payload) % 2:
            raise P.ProtocolError(P.BAD_AUDIO, f"slin payload of odd length {len(payload)}; frame dropped")
        return Audio(np.frombuffer(payload, dtype="<i2")) if payload else None
    if kind == KIND_HANGUP:
        return Hangup()
    if kind == KIND_DTMF:
        return Dtmf(dtmf_digit(payload.decode("latin-1") if len(payload) == 1 else repr(payload[:8]), "DTMF payload"))
    if kind == KIND_ERROR:
        return FarEndError(payload[0] if payload else None)
    if kind in SLIN_HIGHER_RATES:
        return HigherRateAudio(kind)
    if kind == KIND_UUID:
        return SecondUuid()
    return Unknown(kind, len(payload))
