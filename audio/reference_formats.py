"""Reference recordings in the formats phones and browsers make: MP3, M4A/AAC, Ogg (Opus, Vorbis, FLAC),
WebM/Matroska (Opus, Vorbis), FLAC, decoded with PyAV (FFmpeg) into what `decode_wav` returns.

The container is named by the file's own first bytes and FFmpeg is told to open exactly that demuxer:
FFmpeg's probing would otherwise accept playlists and concat scripts that name other files or URLs.
Decoding stops as soon as the audio runs past the longest allowed reference, so a small file that
expands to hours of samples costs a few milliseconds. The first audio stream is read at its native
rate; channels are kept (the caller averages them, as for WAV). PyAV is the `speech` extra's
dependency, imported on first use: without it a non-WAV file is `bad_audio` naming the extra.
"""

from __future__ import annotations

import io

import numpy as np

INSTALL_HINT = "pip install 'voxgate[speech]' (PyAV), or send WAV"


def sniff(data: bytes) -> tuple[str, str] | None:
    """(what to call it, FFmpeg demuxer) from the file's first bytes; None when it is none of the formats."""
    head = data[:16]
    if head[:4] == b"fLaC":
        return "FLAC", "flac"
    if head[:4] == b"OggS":
        return "Ogg", "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "WebM/Matroska", "matroska"
    if head[4:8] == b"ftyp":
        return "M4A/MP4", "mov"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06):
        return "MP3", "mp3"  # an ID3 tag, or an MPEG audio frame sync with a layer (layer bits 0 are ADTS)
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "AAC (ADTS)", "aac"
    return None


_EXTENSIONS = {"flac": "flac", "ogg": "ogg", "matroska": "webm", "mov": "m4a", "mp3": "mp3", "aac": "aac"}


def file_extension(data: bytes) -> str:
    """The extension a recording's bytes call for ("wav" for WAV and for what is none of the formats)."""
    found = None if data[:4] == b"RIFF" else sniff(data)
    return _EXTENSIONS[found[1]] if found else "wav"


class DecodeError(ValueError):
    """The reason a recording could not be decoded (the caller makes it `bad_audio`)."""


def decode_compressed(data: bytes, kind: str, demuxer: str, max_s: float) -> tuple[np.ndarray, int]:
    """Bytes of a sniffed format -> (float32 [frames, channels], native rate). Raises DecodeError.

    Decoding stops a second past `max_s` with the refusal (the caller's check sees only what is shorter)."""
    try:
        import av
    except ImportError:
        raise DecodeError(f"the file is {kind}; reading it needs PyAV: {INSTALL_HINT}") from None
    try:
        with av.open(io.BytesIO(data), mode="r", format=demuxer) as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            if stream is None:
                raise DecodeError(f"the {kind} file holds no audio stream")
            return _decode_stream(av, container, stream, max_s)
    except DecodeError:
        raise
    except (av.error.FFmpegError, ValueError, EOFError, OSError) as exc:
        raise DecodeError(f"the {kind} file cannot be decoded ({_short(exc)})") from None


def _decode_stream(av, container, stream, max_s: float) -> tuple[np.ndarray, int]:
    resampler = None  # every frame to float planar at the first frame's rate and layout
    parts: list[np.ndarray] = []
    total, rate, limit = 0, 0, None
    for frame in container.decode(stream):
        if resampler is None:
            rate = frame.sample_rate
            if not rate:
                raise DecodeError("the audio stream has no sample rate")
            resampler = av.AudioResampler(format="fltp", layout=frame.layout.name, rate=rate)
            limit = int((max_s + 1.0) * rate)
        for out in resampler.resample(frame):
            parts.append(out.to_ndarray())
            total += out.samples
        if total > limit:  # stop here: the rest could be hours
            raise DecodeError(f"the recording lasts more than {max_s:g} s; a reference may last at most {max_s:g} s")
    if resampler is not None:
        for out in resampler.resample(None):  # what the resampler still holds
            parts.append(out.to_ndarray())
    if not parts:
        raise DecodeError("the audio stream decodes to no samples")
    x = np.concatenate(parts, axis=1).astype(np.float32, copy=False)  # [channels, n]
    return np.ascontiguousarray(x.T), int(rate)


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]
