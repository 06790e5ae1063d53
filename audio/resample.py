"""Streaming resampling (soxr) and an exact 20 ms frame FIFO.

soxr's streaming output is bursty on small inputs, so a FIFO sits between it
and the frame clock. The resampler also keeps exact books: after `flush()` the
total output is exactly round(total_in * out_rate / in_rate) samples, so long
streams never drift.
"""

from __future__ import annotations

import numpy as np
import soxr


class StreamResampler:
    """float32 mono resampling in pieces; `flush()` ends the stream and drains soxr's delay."""

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ"):
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._passthrough = in_rate == out_rate
        self._stream = (
            None if self._passthrough else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        )
        self.samples_in = 0
        self.samples_out = 0

    def process(self, pcm: np.ndarray) -> np.ndarray:
        pcm = np.ascontiguousarray(pcm, dtype=np.float32)
        self.samples_in += len(pcm)
        if self._passthrough:
            out = pcm
        else:
            out = self._stream.resample_chunk(pcm, last=False)
        self.samples_out += len(out)
        return out

    def flush(self) -> np.ndarray:
        """Drain the tail; pads or trims so the total matches the exact expected length."""
        tail = np.zeros(0, dtype=np.float32)
        if not self._passthrough:
            tail = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        expected = (self.samples_in * self.out_rate + self.in_rate // 2) // self.in_rate
        missing = expected - (self.samples_out + len(tail))
        if missing > 0:
            tail = np.concatenate([tail, np.zeros(missing, dtype=np.float32)])
        elif missing < 0:
            tail = tail[: max(0, len(tail) + missing)]
        self.samples_out += len(tail)
        return tail


class FrameFifo:
    """Accumulates samples and hands out exact fixed-size frames."""

    def __init__(self, frame_samples: int):
        self.frame_samples = frame_samples
        self._buf = np.zeros(frame_samples * 64, dtype=np.float32)
        self._start = 0
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def push(self, pcm: np.ndarray) -> None:
        n = len(pcm)
        if self._end + n > len(self._buf):
            live = self._buf[self._start : self._end]
            size = max(len(self._buf), 2 * (len(live) + n))
            buf = np.zeros(size, dtype=np.float32) if size > len(self._buf) else self._buf
            buf[: len(live)] = live
            self._buf, self._start, self._end = buf, 0, len(live)
        self._buf[self._end : self._end + n] = pcm
        self._end += n

    def pop(self) -> np.ndarray | None:
        """One frame (a copy) or None when less than a frame is buffered."""
        if len(self) < self.frame_samples:
            return None
        frame = self._buf[self._start : self._start + self.frame_samples].copy()
        self._start += self.frame_samples
        return frame

    def pop_partial(self) -> np.ndarray:
        """Whatever is left, zero-padded to a frame (end of stream)."""
        frame = np.zeros(self.frame_samples, dtype=np.float32)
        n = len(self)
        frame[:n] = self._buf[self._start : self._end]
        self._start = self._end = 0
        return frame

    def clear(self) -> None:
        self._start = self._end = 0
