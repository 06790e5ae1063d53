"""Reference recordings for cloned voices: decode, downmix, resample, check.

The official Qwen3-TTS loader reads a file at its native rate (libsndfile through
librosa, float32), averages the channels, and resamples to the model's 24 kHz with
soxr's HQ quality, then pads or trims to `ceil(n * 24000 / rate)` samples. The codec
encoder's codes must match the official ones exactly, so this module does the same
steps in the same order: `load_reference` → `to_rate`. No normalisation, no trimming.

WAV (PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE) is decoded here, with
libsndfile's float scaling (integer / 2^(bits-1)): the parity path. MP3, M4A/AAC, Ogg/Opus,
WebM/Opus and FLAC are decoded with PyAV (`audio.reference_formats`, the `speech` extra) at
their native rate and then take the same steps. Anything else is refused with `bad_audio` and
a reason, as are silence, non-finite samples and lengths outside the allowed range.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass

import numpy as np

MIN_SECONDS = 1.0
MAX_SECONDS = 30.0
SILENCE_PEAK = 1e-3  # a reference whose loudest sample is below -60 dBFS holds no voice

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


class ReferenceAudioError(ValueError):
    """A reference recording that cannot serve as a voice; `code` is always `bad_audio`."""

    code = "bad_audio"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
        self.message = f"bad reference audio: {reason}"


@dataclass(frozen=True)
class ReferenceAudio:
    """A decoded reference: mono float32 at its native rate, and the hash of the file's bytes."""

    samples: np.ndarray
    sample_rate: int
    sha256: str

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """WAV bytes -> (float32 [frames, channels], rate), scaled as libsndfile scales."""
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RIFX") or data[8:12] != b"WAVE":
        raise ReferenceAudioError("not a WAV file (expected a RIFF/WAVE header)")
    if data[:4] == b"RIFX":
        raise ReferenceAudioError("big-endian WAV (RIFX) is not supported")
    fmt = None
    payload = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = data[pos + 8 : pos + 8 + size]
        if cid == b"fmt ":
            if len(body) < 16:
                raise ReferenceAudioError("WAV fmt chunk is truncated")
            fmt = struct.unpack_from("<HHIIHH", body)
            if fmt[0] == _EXTENSIBLE:
                if len(body) < 26:
                    raise ReferenceAudioError("WAV extensible fmt chunk is truncated")
                fmt = (struct.unpack_from("<H", body, 24)[0],) + fmt[1:]
        elif cid == b"data":
            payload = body  # a truncated data chunk keeps the whole frames it has, as libsndfile does
            break
        pos += 8 + size + (size & 1)
    if fmt is None:
        raise ReferenceAudioError("WAV has no fmt chunk")
    if payload is None:
        raise ReferenceAudioError("WAV has no data chunk")
    tag, channels, rate, _, _, bits = fmt
    if channels < 1 or rate < 1:
        raise ReferenceAudioError(f"WAV header says {channels} channels at {rate} Hz")
    width = bits // 8
    if bits % 8 or width < 1:
        raise ReferenceAudioError(f"WAV sample size of {bits} bits is not supported")
    frames = len(payload) // (width * channels)
    raw = payload[: frames * width * channels]
    if tag == _PCM and width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif tag == _PCM and width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif tag == _PCM and width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    elif tag == _PCM and width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / float(1 << 31)
    elif tag == _FLOAT and width == 4:
        x = np.frombuffer(raw, "<f4").astype(np.float32)
    elif tag == _FLOAT and width == 8:
        x = np.frombuffer(raw, "<f8").astype(np.float32)
    else:
        raise ReferenceAudioError(
            f"WAV encoding (format tag {tag}, {bits} bits) is not supported; use PCM 8/16/24/32-bit or float"
        )
    return x.reshape(frames, channels), rate


def decode_any(data: bytes, max_s: float = MAX_SECONDS) -> tuple[np.ndarray, int]:
    """WAV here; the other formats through PyAV. (float32 [frames, channels], rate)."""
    if data[:4] in (b"RIFF", b"RIFX"):
        return decode_wav(data)
    from audio.reference_formats import DecodeError, decode_compressed, sniff

    found = sniff(data)
    if found is None:
        raise ReferenceAudioError(
            "not a WAV file, nor MP3, M4A/AAC, Ogg/Opus, WebM/Opus or FLAC (its first bytes are none of theirs)"
        )
    try:
        return decode_compressed(data, *found, max_s=max_s)
    except DecodeError as exc:
        raise ReferenceAudioError(str(exc)) from None


def load_reference(source: bytes | str, min_s: float = MIN_SECONDS, max_s: float = MAX_SECONDS) -> ReferenceAudio:
    """Decode and check a reference recording (bytes or a path): mono float32 at the native rate."""
    if isinstance(source, str):
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ReferenceAudioError(f"cannot read {source}: {e.strerror or e}") from None
    else:
        data = bytes(source)
    if not data:
        raise ReferenceAudioError("the file is empty")
    frames, rate = decode_any(data, max_s)
    mono = frames.T  # [channels, n], as librosa holds it
    mono = np.mean(mono, axis=0) if mono.shape[0] > 1 else mono[0]
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    ref = ReferenceAudio(mono, int(rate), hashlib.sha256(data).hexdigest())
    check_reference(ref, min_s, max_s)
    return ref


def check_reference(ref: ReferenceAudio, min_s: float = MIN_SECONDS, max_s: float = MAX_SECONDS) -> None:
    if not len(ref.samples):
        raise ReferenceAudioError("the recording has no samples")
    d = ref.duration_s
    if d < min_s:
        raise ReferenceAudioError(f"the recording lasts {d:.2f} s; a reference needs at least {min_s:g} s")
    if d > max_s:
        raise ReferenceAudioError(f"the recording lasts {d:.1f} s; a reference may last at most {max_s:g} s")
    if not np.isfinite(ref.samples).all():
        raise ReferenceAudioError("the recording holds non-finite samples")
    peak = float(np.abs(ref.samples).max())
    if peak < SILENCE_PEAK:
        raise ReferenceAudioError(f"the recording is silent (peak {20 * math.log10(max(peak, 1e-12)):.0f} dBFS)")


def to_rate(samples: np.ndarray, rate: int, target: int = 24000) -> np.ndarray:
    """Resample as the official loader does (soxr HQ, then pad/trim to ceil(n * target / rate))."""
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if rate == target:
        return samples
    import soxr  # only when resampling: a 24 kHz reference needs no soxr (GPU images lack it)

    n = int(np.ceil(len(samples) * (float(target) / rate)))
    out = soxr.resample(samples, rate, target, quality="HQ")
    if len(out) > n:
        out = out[:n]
    elif len(out) < n:
        out = np.pad(out, (0, n - len(out)))
    return np.asarray(out, dtype=np.float32)
