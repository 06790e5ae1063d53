"""Compressed copies of a known recording, encoded with PyAV (FFmpeg's encoders), for reference-format tests."""

from __future__ import annotations

import io

import numpy as np

# name -> (container, encoder, encoder sample rate, bit rate); the rates each codec takes
FORMATS = {
    "mp3": ("mp3", "libmp3lame", 44100, 128_000),
    "m4a": ("ipod", "aac", 44100, 128_000),
    "aac": ("adts", "aac", 44100, 128_000),
    "ogg_opus": ("ogg", "libopus", 48000, 64_000),
    "webm_opus": ("webm", "libopus", 48000, 64_000),
    "flac": ("flac", "flac", 44100, None),
}


def encode(samples: np.ndarray, fmt: str, rate: int | None = None) -> bytes:
    """float32 mono [n] or [n, 2] at FORMATS[fmt]'s rate (or `rate`) -> the file's bytes."""
    import av

    container, codec, default_rate, bit_rate = FORMATS[fmt]
    rate = rate or default_rate
    x = samples if samples.ndim == 2 else samples[:, None]
    layout = "mono" if x.shape[1] == 1 else "stereo"
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)  # as write_wav quantises
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        if bit_rate:
            stream.bit_rate = bit_rate
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm.reshape(1, -1)), format="s16", layout=layout)
        frame.sample_rate, frame.pts = rate, 0
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()
