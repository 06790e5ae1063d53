"""Output formats of the wire: pcm16 at 8/16/24/48 kHz, μ-law and A-law at 8 kHz."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audio.g711 import alaw_encode, ulaw_encode
from audio.pcm import frame_samples

PCM16_RATES = (8000, 16000, 24000, 48000)
ENCODINGS = ("pcm16", "mulaw", "alaw")


@dataclass(frozen=True)
class OutputFormat:
    encoding: str = "pcm16"
    sample_rate: int = 24000
    frame_ms: int = 20

    def __post_init__(self) -> None:
        # Exact types: a rate of 8000.0 (JSON has one number type) would pass `in PCM16_RATES` and size buffers with floats.
        if not isinstance(self.sample_rate, int) or isinstance(self.sample_rate, bool):
            raise ValueError(f"sample_rate must be an integer, not {self.sample_rate!r}")
        if not isinstance(self.encoding, str) or self.encoding not in ENCODINGS:
            raise ValueError(f"encoding {self.encoding!r} is not one of {', '.join(ENCODINGS)}")
        if self.encoding == "pcm16" and self.sample_rate not in PCM16_RATES:
            raise ValueError(f"pcm16 supports sample rates {PCM16_RATES}, not {self.sample_rate}")
        if self.encoding in ("mulaw", "alaw") and self.sample_rate != 8000:
            raise ValueError(f"{self.encoding} is 8000 Hz only, not {self.sample_rate}")

    @property
    def frame_samples(self) -> int:
        return frame_samples(self.sample_rate, self.frame_ms)

    @property
    def frame_bytes(self) -> int:
        return self.frame_samples * (2 if self.encoding == "pcm16" else 1)


class FrameEncoder:
    """Encodes one float32 frame to wire bytes; reuses its int16 buffer."""

    def __init__(self, fmt: OutputFormat):
        self.format = fmt
        self._int16 = np.zeros(fmt.frame_samples, dtype=np.int16)
        self._scratch = np.zeros(fmt.frame_samples, dtype=np.float32)
        self._encode = {"pcm16": lambda s: s.astype("<i2", copy=False).tobytes(), "mulaw": ulaw_encode, "alaw": alaw_encode}[fmt.encoding]
        self.silence = self.encode(np.zeros(fmt.frame_samples, dtype=np.float32))

    def encode(self, frame: np.ndarray) -> bytes:
        """`frame` must be finite (the playout cleans NaN on push); runs every 20 ms per call, so no allocations."""
        s = self._scratch
        np.multiply(frame, 32767.0, out=s)
        np.clip(s, -32768.0, 32767.0, out=s)
        np.rint(s, out=s)
        self._int16[...] = s
        return self._encode(self._int16)
