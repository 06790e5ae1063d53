"""PCM sample formats: float32 in [-1, 1] <-> int16, with clipping."""

from __future__ import annotations

import numpy as np


def float_to_int16(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Scale by 32767 and clip; NaN becomes 0. `out` lets hot paths reuse a buffer."""
    y = np.nan_to_num(np.asarray(x, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
    scaled = np.clip(y * 32767.0, -32768.0, 32767.0)
    if out is None:
        return np.rint(scaled).astype(np.int16)
    np.rint(scaled, out=scaled)
    out[...] = scaled
    return out


def int16_to_float(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.int16).astype(np.float32) / 32768.0


def pcm16_bytes_to_float(data: bytes) -> np.ndarray:
    """Little-endian signed 16-bit PCM bytes to float32."""
    if len(data) % 2:
        raise ValueError(f"pcm16 payload has an odd length ({len(data)} bytes)")
    return int16_to_float(np.frombuffer(data, dtype="<i2"))


def frame_samples(sample_rate: int, frame_ms: int = 20) -> int:
    n = sample_rate * frame_ms
    if n % 1000:
        raise ValueError(f"{frame_ms} ms is not a whole number of samples at {sample_rate} Hz")
    return n // 1000
