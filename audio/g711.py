"""G.711 μ-law and A-law, bit-exact with the ITU reference (and Python's old `audioop`).

Encoding uses 65,536-entry lookup tables indexed by the int16 sample, decoding
256-entry tables: one numpy take per frame, no per-sample Python.
"""

from __future__ import annotations

import numpy as np

_SEG_UEND = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)
_SEG_AEND = (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF)
_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # in the 14-bit domain


def _segment(value: int, ends: tuple[int, ...]) -> int:
    for i, end in enumerate(ends):
        if value <= end:
            return i
    return len(ends)


def _linear14_to_ulaw(v: int) -> int:
    if v < 0:
        v, mask = -v, 0x7F
    else:
        mask = 0xFF
    v = min(v, _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = _segment(v, _SEG_UEND)
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((v >> (seg + 1)) & 0xF)) ^ mask


def _linear13_to_alaw(v: int) -> int:
    if v >= 0:
        mask = 0xD5
    else:
        mask, v = 0x55, -v - 1
    seg = _segment(v, _SEG_AEND)
    if seg >= 8:
        return 0x7F ^ mask
    quant = (v >> 1) if seg < 2 else (v >> seg)
    return ((seg << 4) | (quant & 0xF)) ^ mask


def _ulaw_to_linear(u: int) -> int:
    u = ~u & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return (_ULAW_BIAS - t) if (u & 0x80) else (t - _ULAW_BIAS)


def _alaw_to_linear(a: int) -> int:
    a ^= 0x55
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    if seg == 0:
        t += 8
    elif seg == 1:
        t += 0x108
    else:
        t = (t + 0x108) << (seg - 1)
    return t if (a & 0x80) else -t


def _encode_table(fn, shift: int) -> np.ndarray:
    # Index = sample + 32768; the reference drops the low bits by an arithmetic shift.
    return np.array([fn(s >> shift) for s in range(-32768, 32768)], dtype=np.uint8)


_ULAW_ENC = _encode_table(_linear14_to_ulaw, 2)
_ALAW_ENC = _encode_table(_linear13_to_alaw, 3)
# entry u holds the code of the int16 sample whose bits read as u; one copy per process, shared by every call
_BY_BITS = {"mulaw": np.roll(_ULAW_ENC, -32768), "alaw": np.roll(_ALAW_ENC, -32768)}
_ULAW_DEC = np.array([_ulaw_to_linear(u) for u in range(256)], dtype=np.int16)
_ALAW_DEC = np.array([_alaw_to_linear(a) for a in range(256)], dtype=np.int16)


def _index(samples: np.ndarray) -> np.ndarray:
    # int16 viewed as uint16 with the sign bit flipped == sample + 32768, without a widening copy.
    return np.asarray(samples, dtype=np.int16).view(np.uint16) ^ np.uint16(0x8000)


def encode_table_by_bits(encoding: str) -> np.ndarray:
    """The `mulaw` or `alaw` table indexed by an int16 sample's bits read as uint16 (no +32768 step: for
    callers that encode into their own buffers every 20 ms per call, e.g. FrameEncoder)."""
    return _BY_BITS[encoding]


def ulaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples -> μ-law bytes."""
    return _ULAW_ENC[_index(samples)].tobytes()


def alaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples -> A-law bytes."""
    return _ALAW_ENC[_index(samples)].tobytes()


def ulaw_decode(data: bytes) -> np.ndarray:
    """μ-law bytes -> int16 samples."""
    return _ULAW_DEC[np.frombuffer(data, dtype=np.uint8)]


def alaw_decode(data: bytes) -> np.ndarray:
    """A-law bytes -> int16 samples."""
    return _ALAW_DEC[np.frombuffer(data, dtype=np.uint8)]
