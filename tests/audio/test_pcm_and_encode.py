import numpy as np
import pytest

from audio.encode import FrameEncoder, OutputFormat
from audio.g711 import ulaw_decode
from audio.pcm import float_to_int16, int16_to_float, pcm16_bytes_to_float


def test_float_to_int16_clips_and_maps_nan_to_zero():
    x = np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0, np.nan], dtype=np.float32)
    assert float_to_int16(x).tolist() == [-32768, -32767, 0, 16384, 32767, 32767, 0]


def test_int16_float_round_trip_is_exact():
    s = np.arange(-32768, 32768, 7, dtype=np.int16)
    assert (
        np.array_equal(float_to_int16(int16_to_float(s) * 32768 / 32767), s)
        or np.max(np.abs(float_to_int16(int16_to_float(s)).astype(int) - s)) <= 1
    )


def test_pcm16_bytes_with_odd_length_are_refused():
    with pytest.raises(ValueError):
        pcm16_bytes_to_float(b"\x00\x01\x02")


@pytest.mark.parametrize(
    "encoding,rate,nbytes",
    [
        ("pcm16", 8000, 320),
        ("pcm16", 16000, 640),
        ("pcm16", 24000, 960),
        ("pcm16", 48000, 1920),
        ("mulaw", 8000, 160),
        ("alaw", 8000, 160),
    ],
)
def test_frame_sizes_per_format(encoding, rate, nbytes):
    fmt = OutputFormat(encoding, rate)
    enc = FrameEncoder(fmt)
    assert fmt.frame_bytes == nbytes
    assert len(enc.encode(np.zeros(fmt.frame_samples, np.float32))) == nbytes
    assert len(enc.silence) == nbytes


@pytest.mark.parametrize("encoding,rate", [("pcm16", 44100), ("mulaw", 16000), ("alaw", 24000), ("opus", 48000)])
def test_unsupported_formats_are_refused(encoding, rate):
    with pytest.raises(ValueError):
        OutputFormat(encoding, rate)


def test_mulaw_frame_decodes_back_to_the_signal():
    fmt = OutputFormat("mulaw", 8000)
    x = (0.5 * np.sin(np.arange(160) / 5)).astype(np.float32)
    y = ulaw_decode(FrameEncoder(fmt).encode(x)) / 32767.0
    assert np.max(np.abs(y - x)) < 0.02


@pytest.mark.parametrize("encoding,rate", [("pcm16", 8000), ("pcm16", 24000), ("mulaw", 8000), ("alaw", 8000)])
def test_frame_encoder_is_bit_exact_with_the_reference_codecs_over_the_full_range(encoding, rate):
    from audio.g711 import alaw_encode, ulaw_encode

    fmt = OutputFormat(encoding, rate)
    enc = FrameEncoder(fmt)
    n = fmt.frame_samples
    sweep = np.linspace(-1.0, 1.0, 65536 * 3, dtype=np.float32)  # every int16 code, ties included
    reference = {"pcm16": lambda s: s.astype("<i2").tobytes(), "mulaw": ulaw_encode, "alaw": alaw_encode}[encoding]
    got, want = [], []
    for i in range(0, len(sweep) - n + 1, n):
        frame = sweep[i : i + n]
        got.append(enc.encode(frame))
        want.append(reference(float_to_int16(frame)))
    assert b"".join(got) == b"".join(want)
