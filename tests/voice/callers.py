"""Callers that talk: real-time caller audio for each leg's far-end client, and barge-in timing.

`PacedSource` is what a caller's microphone would produce: silence until
`play(pcm)`, then that audio, 20 ms per frame on an absolute schedule; it
remembers when the speech onset left, which is where barge-in latency
starts. `pump()` drives any leg's send function from it.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque

import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from audio.resample import StreamResampler


class PacedSource:
    def __init__(self, rate: int, frame_ms: int = 20):
        self.rate = rate
        self.frame = rate * frame_ms // 1000
        self.period = frame_ms / 1000.0
        self._queue: deque[np.ndarray] = deque()
        self._pending_onset: tuple[int, float] | None = None  # (frames until the onset frame, ms into it)
        self.onset_at: float | None = None  # wall time the onset sample was sent
        self.played_all = asyncio.Event()
        self.frames_sent = 0

    def play(self, pcm: np.ndarray, onset_ms: float | None = None) -> None:
        """Queue `pcm` (int16 at this rate); `onset_ms` into it is where the speech starts."""
        pcm = np.asarray(pcm, np.int16)
        pad = (-len(pcm)) % self.frame
        pcm = np.concatenate([pcm, np.zeros(pad, np.int16)])
        if onset_ms is not None:
            sample = int(onset_ms * self.rate / 1000)
            self._pending_onset = (len(self._queue) + sample // self.frame, (sample % self.frame) * 1000.0 / self.rate)
            self.onset_at = None
        self.played_all.clear()
        for i in range(0, len(pcm), self.frame):
            self._queue.append(pcm[i : i + self.frame])

    def next_frame(self, now: float | None = None) -> np.ndarray:
        now = time.monotonic() if now is None else now
        self.frames_sent += 1
        if self._pending_onset is not None:
            frames_left, ms = self._pending_onset
            if frames_left == 0:
                self.onset_at = now + ms / 1000.0
                self._pending_onset = None
            else:
                self._pending_onset = (frames_left - 1, ms)
        if self._queue:
            frame = self._queue.popleft()
            if not self._queue:
                self.played_all.set()
            return frame
        return np.zeros(self.frame, np.int16)


async def pump(source: PacedSource, send) -> None:
    """Sends one frame every 20 ms on an absolute schedule until cancelled; `send(int16 frame)` may be async."""
    start = time.monotonic()
    n = 0
    while True:
        due = start + n * source.period
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n += 1
        result = send(source.next_frame())
        if asyncio.iscoroutine(result):
            await result


class MicTrack(MediaStreamTrack):
    """An aiortc outbound track playing a PacedSource (the WebRTC caller's microphone), 48 kHz mono."""

    kind = "audio"

    def __init__(self, source: PacedSource):
        super().__init__()
        self.source = source
        self._start: float | None = None
        self._n = 0
        self._pts = 0
        self.time_base = fractions.Fraction(1, source.rate)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self._n * self.source.period
        if due > now:
            await asyncio.sleep(due - now)
        self._n += 1
        pcm = self.source.next_frame()
        frame = AudioFrame(format="s16", layout="mono", samples=len(pcm))
        frame.planes[0].update(pcm.astype("<i2").tobytes())
        frame.pts = self._pts
        frame.sample_rate = self.source.rate
        frame.time_base = self.time_base
        self._pts += len(pcm)
        return frame


def resample(pcm: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    rs = StreamResampler(rate_in, rate_out)
    x = np.concatenate([rs.process(pcm.astype(np.float32) / 32768.0), rs.flush()])
    return np.clip(x * 32768.0, -32768, 32767).astype(np.int16)


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None
