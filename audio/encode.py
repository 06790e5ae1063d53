"""Output formats of the wire: pcm16 at 8/16/24/48 kHz, μ-law and A-law at 8 kHz."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audio.g711 import encode_table_by_bits
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
    """Encodes one float32 frame to wire bytes, into buffers it keeps.

    It runs every 20 ms for every call, so each step is one numpy call writing
    into a preallocated array, with numpy scalars as constants (on 160 samples,
    np.clip, fancy indexing and Python-float arguments cost more than the
    arithmetic), and the range check lives where audio enters the playout.
    """

    _SCALE = np.float32(32767.0)

    def __init__(self, fmt: OutputFormat):
        self.format = fmt
        n = fmt.frame_samples
        self._scratch = np.zeros(n, dtype=np.float32)
        self._int16 = np.zeros(n, dtype=np.int16)
        self._bits = self._int16.view(np.uint16)
        self._table = None if fmt.encoding == "pcm16" else encode_table_by_bits(fmt.encoding)
        self._bytes = np.zeros(n, dtype=np.uint8)
        self.silence = self.encode(np.zeros(n, dtype=np.float32))

    def encode(self, frame: np.ndarray) -> bytes:
        """`frame` must be finite and within [-1, 1]: the playout makes every pushed packet so."""
        s = self._scratch
        np.multiply(frame, self._SCALE, s)
        np.rint(s, s)
        self._int16[...] = s
        if self._table is None:
            return self._int16.tobytes()  # little-endian on every platform we run on
        self._table.take(self._bits, out=self._bytes)
        return self._bytes.tobytes()


def encode_pcm(pcm: np.ndarray, encoding: str) -> bytes:
    """Any length of float32 PCM (finite, within [-1, 1]) to wire bytes: the unpaced path's pieces.

    Allocates per call, unlike FrameEncoder: it runs once per engine packet, not every 20 ms."""
    ints = np.rint(pcm * np.float32(32767.0)).astype(np.int16)
    if encoding == "pcm16":
        return ints.astype("<i2", copy=False).tobytes()
    return encode_table_by_bits(encoding).take(ints.view(np.uint16)).astype(np.uint8, copy=False).tobytes()
