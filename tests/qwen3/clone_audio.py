"""Synthetic reference recordings for voice-clone tests: voiced syllables with pitch
movement, formant-like harmonics and breath noise, written as 16-bit WAV."""

from __future__ import annotations

import wave

import numpy as np


def speech_like(seconds: float, rate: int, seed: int = 0, channels: int = 1) -> np.ndarray:
    """float32 [n] or [n, channels] in about ±0.5."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    f0 = 110 + 25 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)) + 10 * rng.standard_normal() * t / seconds
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) * np.exp(-(((k * 110 - 700) / 900) ** 2)) for k in range(1, 30))
    syllables = np.clip(np.sin(2 * np.pi * 3.1 * t + rng.uniform(0, 6)), 0, None) ** 0.5
    x = 0.25 * voiced * syllables + 0.01 * rng.standard_normal(n)
    x = x / np.abs(x).max() * 0.5
    if channels == 1:
        return x.astype(np.float32)
    other = np.roll(x, rate // 100) * 0.7 + 0.02 * rng.standard_normal(n)
    return np.stack([x, other][:channels], axis=1).astype(np.float32)


def write_wav(path, samples: np.ndarray, rate: int) -> str:
    x = samples if samples.ndim == 2 else samples[:, None]
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(x.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return str(path)


# (name, rate, channels): the rates the issue names, one of them stereo
REFERENCES = (("16k", 16000, 1), ("24k", 24000, 1), ("44k1_stereo", 44100, 2))
