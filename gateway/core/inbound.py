"""The caller's audio of a telephony call: decoded PCM for a future speech-recognition leg.

Media legs push int16 PCM as it arrives; consumers subscribe and read it as
an async stream of int16 arrays. Nobody may be listening (no STT yet), so
each subscriber has a bounded buffer that drops its oldest audio rather than
growing. With `telephony.record_inbound_dir` set, the call is also written to
a WAV file; a leg that knows the media timestamps (Twilio) fills lost packets
with silence so the recording keeps the call's timeline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections import deque

import numpy as np

from audio.filewriter import MonoWavWriter

log = logging.getLogger("voxgate.inbound")

# A timestamp jump beyond this is not packet loss but a lie; the recording does not pad it.
MAX_PAD_MS = 5000
# Media time may run this far ahead of arrival time (jitter); beyond it a timestamp is a lie the recording does not pad.
MAX_AHEAD_MS = 1000
# Caller audio may arrive this far ahead of real time (bursts after a network stall); the rest is dropped.
MAX_INBOUND_AHEAD_MS = 2000.0


class RealtimeCap:
    """A peer cannot push an hour of audio in a second: beyond real time plus `ahead_ms`, samples are dropped (and counted)."""

    def __init__(self, sample_rate: int, ahead_ms: float = MAX_INBOUND_AHEAD_MS, clock=time.monotonic):
        self.sample_rate = sample_rate
        self.ahead = ahead_ms / 1000.0
        self.clock = clock
        self._start: float | None = None
        self.accepted = 0
        self.dropped = 0

    def admit(self, pcm: np.ndarray) -> np.ndarray:
        now = self.clock()
        if self._start is None:
            self._start = now
        allowed = int((now - self._start + self.ahead) * self.sample_rate) - self.accepted
        if allowed >= len(pcm):
            self.accepted += len(pcm)
            return pcm
        keep = max(0, allowed)
        if not self.dropped:
            log.info(
                "caller audio arrives faster than real time: dropping what runs more than %.1f s ahead", self.ahead
            )
        self.dropped += len(pcm) - keep
        self.accepted += keep
        return pcm[:keep]


class InboundStream:
    """One subscriber's view: `async for pcm in stream` yields int16 arrays until the call ends."""

    def __init__(self, owner: "InboundAudio", max_samples: int):
        self._owner = owner
        self._max_samples = max_samples
        self._queue: deque[np.ndarray] = deque()
        self._samples = 0
        self._wakeup = asyncio.Event()
        self.closed = False
        self.dropped_samples = 0

    def _put(self, pcm: np.ndarray) -> None:
        self._queue.append(pcm)
        self._samples += len(pcm)
        while self._samples > self._max_samples and len(self._queue) > 1:
            old = self._queue.popleft()
            self._samples -= len(old)
            self.dropped_samples += len(old)
        self._wakeup.set()

    def _end(self) -> None:
        self.closed = True
        self._wakeup.set()

    def __aiter__(self) -> "InboundStream":
        return self

    async def __anext__(self) -> np.ndarray:
        while not self._queue:
            if self.closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        pcm = self._queue.popleft()
        self._samples -= len(pcm)
        return pcm

    def unsubscribe(self) -> None:
        self._owner._subscribers.discard(self)
        self._end()


class InboundAudio:
    """Caller audio of one call at `sample_rate` (8 kHz for Twilio and AudioSocket)."""

    def __init__(
        self, sample_rate: int = 8000, wav_path: str | None = None, max_ahead_ms: float = MAX_INBOUND_AHEAD_MS
    ):
        self.sample_rate = sample_rate
        self.cap = RealtimeCap(sample_rate, max_ahead_ms)
        self.samples_received = 0
        self.wav_path = wav_path
        self._subscribers: set[InboundStream] = set()
        self._wav: MonoWavWriter | None = None
        self._written = 0  # samples in the recording, silence padding included
        self._epoch: tuple[float, float] | None = None  # (arrival time, timestamp) of the first timed packet
        self.closed = False
        if wav_path:
            try:
                self._wav = MonoWavWriter(wav_path, sample_rate)
            except OSError as exc:  # a full disk must not end the call
                log.warning("cannot record inbound audio to %s: %s", wav_path, exc)
                self._wav = None

    def subscribe(self, max_buffer_ms: float = 2000.0) -> InboundStream:
        """A new async stream of the audio from now on (older audio is not replayed)."""
        stream = InboundStream(self, int(max_buffer_ms * self.sample_rate / 1000))
        if self.closed:
            stream._end()
        else:
            self._subscribers.add(stream)
        return stream

    def push(self, pcm: np.ndarray, timestamp_ms: float | None = None) -> None:
        """int16 samples as they arrived; `timestamp_ms` (from stream start) places them on the timeline."""
        if self.closed or not len(pcm):
            return
        pcm = self.cap.admit(np.asarray(pcm, dtype=np.int16))
        if not len(pcm):
            return
        self.samples_received += len(pcm)
        for stream in self._subscribers:
            stream._put(pcm)
        if self._wav is not None:
            if timestamp_ms is not None:
                now = time.monotonic()
                if self._epoch is None:
                    self._epoch = (now, timestamp_ms)
                ahead_ms = (timestamp_ms - self._epoch[1]) - (now - self._epoch[0]) * 1000.0
                at = int(timestamp_ms * self.sample_rate / 1000)
                gap = at - self._written
                if 0 < gap <= MAX_PAD_MS * self.sample_rate // 1000 and ahead_ms <= MAX_AHEAD_MS:
                    self._write(np.zeros(gap, dtype=np.int16))
            self._write(pcm)

    def _write(self, pcm: np.ndarray) -> None:
        try:
            self._wav.writeframes(pcm.astype("<i2", copy=False).tobytes())
            self._written += len(pcm)
        except OSError as exc:
            log.warning("inbound recording stopped: %s", exc)
            self._wav = None

    @property
    def dropped_samples(self) -> int:
        """Samples refused for arriving faster than real time."""
        return self.cap.dropped

    @property
    def duration_ms(self) -> float:
        return self.samples_received * 1000.0 / self.sample_rate

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for stream in list(self._subscribers):
            stream._end()
        self._subscribers.clear()
        if self._wav is not None:
            try:
                self._wav.close()
            except OSError:
                pass
            self._wav = None


def recording_path(directory: str | None, call_id: str, session_id: str) -> str | None:
    """Where a call's inbound WAV goes; call ids come from the far end, so they are sanitised."""
    if not directory:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:  # like a full disk, an unusable directory must not end (or leak) the call
        log.warning("cannot record inbound audio in %s: %s", directory, exc)
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id)[:80].lstrip(".") or "call"
    return os.path.join(directory, f"{safe}-{session_id}.inbound.wav")
