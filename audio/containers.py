"""Incremental encoders from 24 kHz mono PCM to files a client can play: pcm, wav, opus (Ogg), mp3, flac, aac (ADTS).

Each encoder takes float32 PCM in pieces as the engine yields it and returns
the bytes that are ready, so a streamed HTTP body can start with the first
packet. `pcm` (raw s16le, OpenAI's definition) and `wav` need only numpy;
opus, mp3, flac and aac use PyAV (FFmpeg's encoders), imported on first use so
that the audio layer works without it (`containers_available()` says which
formats this install can make).
"""

from __future__ import annotations

import struct
from typing import Protocol

import numpy as np

from audio.pcm import float_to_int16

FORMATS = ("pcm", "wav", "opus", "mp3", "flac", "aac")
MEDIA_TYPES = {
    "pcm": "audio/pcm",
    "wav": "audio/wav",
    "opus": "audio/ogg",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "aac": "audio/aac",
}
# format -> (PyAV container, encoder, encoder sample format, muxer options)
_AV_FORMATS = {
    # Ogg pages of ~100 ms instead of the muxer's 1 s default: a streamed body must not sit on audio.
    "opus": ("ogg", "libopus", "s16", {"page_duration": "100000"}),
    "mp3": ("mp3", "libmp3lame", "s16p", {}),
    "flac": ("flac", "flac", "s16", {}),
    "aac": ("adts", "aac", "fltp", {}),  # FFmpeg's own AAC encoder, raw ADTS frames (streamable)
}
# The unknown-length marker of streamed WAV (what FFmpeg writes to a pipe); readers read to the end.
_WAV_UNKNOWN = 0xFFFFFFFF


class ContainerError(ValueError):
    """A format this install cannot produce (unknown, or PyAV missing)."""


class ContainerEncoder(Protocol):
    format: str
    media_type: str
    cpu_heavy: bool  # True: a real codec runs; callers on an event loop should encode in a worker thread

    def encode(self, pcm: np.ndarray) -> bytes:
        """float32 PCM in [-1, 1] at the encoder's rate → the bytes ready so far (may be empty)."""

    def finish(self) -> bytes:
        """The remaining bytes; the encoder is unusable afterwards."""


def wav_header(sample_rate: int, data_bytes: int | None = None, channels: int = 1) -> bytes:
    """A 44-byte PCM s16le WAV header; `data_bytes=None` marks a stream of unknown length."""
    block = channels * 2
    data = _WAV_UNKNOWN if data_bytes is None else data_bytes
    riff = _WAV_UNKNOWN if data_bytes is None else 36 + data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, 16)
        + b"data"
        + struct.pack("<I", data)
    )


class PcmEncoder:
    """Raw signed 16-bit little-endian samples, no header."""

    format = "pcm"
    media_type = MEDIA_TYPES["pcm"]
    cpu_heavy = False

    def __init__(self, sample_rate: int = 24000):
        self.sample_rate = sample_rate

    def encode(self, pcm: np.ndarray) -> bytes:
        return float_to_int16(pcm).astype("<i2", copy=False).tobytes()

    def finish(self) -> bytes:
        return b""


class WavEncoder(PcmEncoder):
    """A streaming WAV: the header goes first with unknown sizes, then raw samples."""

    format = "wav"
    media_type = MEDIA_TYPES["wav"]

    def __init__(self, sample_rate: int = 24000):
        super().__init__(sample_rate)
        self._header: bytes | None = wav_header(sample_rate)

    def _take_header(self) -> bytes:
        header, self._header = self._header, None
        return header or b""

    def encode(self, pcm: np.ndarray) -> bytes:
        return self._take_header() + super().encode(pcm)

    def finish(self) -> bytes:
        return self._take_header()  # an empty stream is still a valid (empty) WAV


class _Sink:
    """A write-only file for PyAV's muxer; without seek() the muxer writes a pure stream."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class AvEncoder:
    """opus / mp3 / flac / aac through PyAV, muxed to a non-seekable stream as packets come out.
    One encoder is used by one task at a time (it may be a worker thread)."""

    cpu_heavy = True

    def __init__(self, fmt: str, sample_rate: int = 24000):
        try:
            import av
        except ImportError:
            raise ContainerError(f"response format {fmt!r} needs PyAV: pip install 'voxgate[speech]'") from None
        container, codec, sample_format, options = _AV_FORMATS[fmt]
        self.format = fmt
        self.media_type = MEDIA_TYPES[fmt]
        self.sample_rate = sample_rate
        self._av = av
        self._sink = _Sink()
        self._container = av.open(self._sink, "w", format=container, options=dict(options))
        self._stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
        self._stream.codec_context.format = sample_format
        self._pts = 0
        self._closed = False

    def encode(self, pcm: np.ndarray) -> bytes:
        samples = float_to_int16(pcm)
        if len(samples):
            frame = self._av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = self.sample_rate
            frame.pts = self._pts
            self._pts += len(samples)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take()

    def finish(self) -> bytes:
        if not self._closed:
            self._closed = True
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        return self._sink.take()


def containers_available() -> tuple[str, ...]:
    """The formats this install can produce."""
    try:
        import av  # noqa: F401
    except ImportError:
        return ("pcm", "wav")
    return FORMATS


def container_encoder(fmt: str, sample_rate: int = 24000) -> ContainerEncoder:
    """A fresh encoder for one stream; raises ContainerError for a format it cannot make."""
    if fmt == "pcm":
        return PcmEncoder(sample_rate)
    if fmt == "wav":
        return WavEncoder(sample_rate)
    if fmt in _AV_FORMATS:
        return AvEncoder(fmt, sample_rate)
    raise ContainerError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
