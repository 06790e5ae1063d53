"""Container encoders: feed PCM in pieces, decode the bytes back with PyAV, compare duration and content."""

import io
import wave

import numpy as np
import pytest

from audio.containers import FORMATS, MEDIA_TYPES, ContainerError, container_encoder, containers_available, wav_header

av = pytest.importorskip("av")
RATE = 24000


def _signal() -> np.ndarray:
    """0.5 s of 440 Hz, 0.5 s of silence, 0.5 s of 1000 Hz."""
    t = np.arange(RATE // 2) / RATE
    return np.concatenate(
        [0.4 * np.sin(2 * np.pi * 440 * t), np.zeros(RATE // 2), 0.4 * np.sin(2 * np.pi * 1000 * t)]
    ).astype(np.float32)


def _encode_in_pieces(fmt: str, pcm: np.ndarray, piece: int = 1237) -> tuple[bytes, list[int]]:
    enc = container_encoder(fmt, RATE)
    out, sizes = [], []
    for i in range(0, len(pcm), piece):
        out.append(enc.encode(pcm[i : i + piece]))
        sizes.append(len(out[-1]))
    out.append(enc.finish())
    return b"".join(out), sizes


def _decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    """Decoded mono float32 and its rate; raw pcm has no container, so it is read as s16le."""
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768, RATE
    with av.open(io.BytesIO(data)) as c:
        frames = [f.to_ndarray() for f in c.decode(audio=0)]
        rate = c.streams.audio[0].codec_context.sample_rate
    pcm = np.concatenate([f.reshape(-1) if f.ndim == 1 or f.shape[0] == 1 else f[0] for f in frames])
    if pcm.dtype.kind == "i":
        pcm = pcm.astype(np.float32) / (32768 if pcm.dtype == np.int16 else 2**31)
    return pcm.astype(np.float32), rate


def _dominant_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_decodes_back_to_the_same_duration_and_content(fmt):
    pcm = _signal()
    data, _ = _encode_in_pieces(fmt, pcm)
    decoded, rate = _decode(data, fmt)
    duration = len(decoded) / rate
    # Lossy codecs pad (mp3/aac encoder delay, opus frame rounding): within 100 ms of 1.5 s.
    assert abs(duration - 1.5) <= (0.0 if fmt in ("pcm", "wav", "flac") else 0.1), duration
    # Content: a 440 Hz tone, then silence, then 1000 Hz, where we put them (skip edges for codec delay).
    seg = lambda a, b: decoded[int(a * rate) : int(b * rate)]  # noqa: E731
    assert abs(_dominant_hz(seg(0.1, 0.4), rate) - 440) < 15
    assert np.sqrt(np.mean(seg(0.6, 0.9) ** 2)) < 0.01
    assert abs(_dominant_hz(seg(1.1, 1.4), rate) - 1000) < 15
    assert np.sqrt(np.mean(seg(1.1, 1.4) ** 2)) == pytest.approx(0.4 / np.sqrt(2), rel=0.15)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac"])
def test_lossless_formats_keep_every_sample(fmt):
    pcm = _signal()
    data, _ = _encode_in_pieces(fmt, pcm, piece=480)
    decoded, _ = _decode(data, fmt)
    expected = np.rint(np.clip(pcm * 32767, -32768, 32767)).astype(np.int16)
    assert np.array_equal(np.rint(decoded * 32768).astype(np.int16), expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_bytes_come_out_while_audio_is_still_arriving(fmt):
    """A streamed body must start before the end of the utterance, not at finish()."""
    _, sizes = _encode_in_pieces(fmt, _signal(), piece=2400)  # 100 ms pieces
    produced_by_half = sum(sizes[: len(sizes) // 2])
    assert produced_by_half > 0 and sum(1 for s in sizes if s) >= len(sizes) // 2


def test_streamed_wav_header_marks_unknown_length_and_readers_accept_it():
    data, _ = _encode_in_pieces("wav", _signal())
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[40:44] == b"\xff\xff\xff\xff"
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (RATE, 1, 2)
        assert len(w.readframes(10**9)) == 2 * len(_signal())
    assert wav_header(8000, 320)[4:8] == (356).to_bytes(4, "little")


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_empty_stream_finishes_cleanly(fmt):
    enc = container_encoder(fmt, RATE)
    assert enc.encode(np.zeros(0, np.float32)) == b"" or fmt == "wav"
    enc.finish()
    assert enc.media_type == MEDIA_TYPES[fmt]


def test_unknown_format_is_refused_by_name():
    with pytest.raises(ContainerError, match="ogg-vorbis"):
        container_encoder("ogg-vorbis")
    assert set(containers_available()) == set(FORMATS)
