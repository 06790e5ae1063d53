"""Caller audio for the tests: speech from espeak-ng, noise and music-like tones, made at test time.

Speech is espeak-ng's voice converted with sox to 16-bit mono at the rate
asked for (8 or 16 kHz); nothing binary is committed. Files are made once
per process in a temporary folder. A missing espeak-ng or sox skips the
test that needs speech (both are Debian packages: `apt-get install
espeak-ng sox`).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

SENTENCES = {
    "booking": "Hello, I would like to change my booking for tomorrow morning, please.",
    "stop": "No, wait, stop. That is not what I asked for.",
    "short": "Yes.",
}

_DIR = Path(tempfile.mkdtemp(prefix="voxgate-caller-audio-"))
atexit.register(shutil.rmtree, _DIR, True)


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None and shutil.which("sox") is not None


def read_wav(path: Path | str) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16), w.getframerate()


def write_wav(path: Path | str, pcm: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return Path(path)


@functools.lru_cache(maxsize=None)
def speech_wav(rate: int = 16000, name: str = "booking", voice: str = "en-us") -> Path:
    """espeak-ng speaking SENTENCES[name] as a WAV at `rate` (8000 or 16000)."""
    if not have_espeak():
        import pytest

        pytest.skip("espeak-ng and sox are needed for caller speech (apt-get install espeak-ng sox)")
    raw = _DIR / f"{name}-{voice}.raw.wav"
    if not raw.exists():
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", "160", "-w", str(raw), SENTENCES[name]], check=True, capture_output=True
        )
    out = _DIR / f"{name}-{voice}-{rate}.wav"
    subprocess.run(["sox", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out)], check=True, capture_output=True)
    return out


def speech(rate: int = 16000, name: str = "booking") -> np.ndarray:
    pcm, got = read_wav(speech_wav(rate, name))
    assert got == rate
    return pcm


def speech_onset_ms(pcm: np.ndarray, rate: int, level: float = 0.02) -> float:
    """Where the speech in `pcm` starts: the first 10 ms block whose RMS passes `level` of full scale."""
    block = rate // 100
    x = pcm.astype(np.float32) / 32768.0
    for i in range(0, len(x) - block, block):
        if np.sqrt(np.mean(x[i : i + block] ** 2)) > level:
            return i * 1000.0 / rate
    raise ValueError("no speech in this audio")


def silence(ms: float, rate: int) -> np.ndarray:
    return np.zeros(int(rate * ms / 1000), np.int16)


def noise(ms: float, rate: int, level: float = 0.05, seed: int = 1) -> np.ndarray:
    """Pink background noise (1/f power, shaped in the frequency domain), `level` RMS of full scale."""
    rng = np.random.default_rng(seed)
    n = int(rate * ms / 1000)
    spectrum = rng.standard_normal(n // 2 + 1) + 1j * rng.standard_normal(n // 2 + 1)
    f = np.fft.rfftfreq(n, 1.0 / rate)
    spectrum *= 1.0 / np.sqrt(np.maximum(f, 20.0))
    out = np.fft.irfft(spectrum, n).astype(np.float32)
    out *= level / (np.sqrt(np.mean(out**2)) + 1e-9)
    return np.clip(out * 32768.0, -32768, 32767).astype(np.int16)


def tones(ms: float, rate: int, level: float = 0.1, seed: int = 2) -> np.ndarray:
    """Music-like audio: a melody of harmonic notes (250 ms each, decaying) over a held chord."""
    rng = np.random.default_rng(seed)
    n = int(rate * ms / 1000)
    t = np.arange(n) / rate
    out = np.zeros(n, np.float32)
    for f in (130.8, 164.8, 196.0):  # C major chord, held
        out += 0.3 * np.sin(2 * np.pi * f * t)
    note = int(rate * 0.25)
    scale = [261.6, 293.7, 329.6, 349.2, 392.0, 440.0, 493.9, 523.3]
    for start in range(0, n, note):
        f = scale[rng.integers(len(scale))]
        seg = t[: min(note, n - start)]
        env = np.exp(-seg * 6.0)
        out[start : start + len(seg)] += env * sum(np.sin(2 * np.pi * f * k * seg) / k for k in (1, 2, 3))
    out *= level / (np.sqrt(np.mean(out**2)) + 1e-9)
    return np.clip(out * 32768.0, -32768, 32767).astype(np.int16)


def caller_track(
    rate: int, lead_ms: float = 1000.0, name: str = "booking", tail_ms: float = 500.0, background: str | None = None
) -> tuple[np.ndarray, float]:
    """`lead_ms` of quiet, then speech, then `tail_ms` quiet; returns the PCM and the speech onset in ms."""
    sp = speech(rate, name)
    onset = lead_ms + speech_onset_ms(sp, rate)
    pcm = np.concatenate([silence(lead_ms, rate), sp, silence(tail_ms, rate)])
    if background == "noise":
        pcm = np.clip(pcm.astype(np.int32) + noise(len(pcm) * 1000 / rate, rate, level=0.01), -32768, 32767).astype(
            np.int16
        )
    return pcm, onset
