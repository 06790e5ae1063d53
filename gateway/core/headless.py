"""A session with no media leg: its audio goes to one consumer as soon as it is in order (the OpenAI speech route).

`HeadlessPlayout` stands in for `audio.Playout` inside a `Session`, so a
request goes through the very same pipeline as a call — frontend, chunker,
two chunks in flight, engine deadlines, capacity — but nothing paces the
audio: each piece is handed on as the engine yields it. For the engine's
deadlines it models a client that starts playing at the first audio and
plays in real time (what a streaming player does), so a request is served
like a call with that much audio buffered, never ahead of calls about to
run dry.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable

import numpy as np

from audio.playout import PlayoutEvent

END = None


class HeadlessError(Exception):
    """The session failed a text chunk (engine refused or failed it), or ended before its turn did."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class HeadlessPlayout:
    """The `Playout` face a `Session` uses (open/push/mark/close/flush, buffered_ms, current_turn), without a clock."""

    def __init__(
        self, sample_rate: int, on_event: Callable[[PlayoutEvent], None], clock: Callable[[], float] = time.monotonic
    ):
        self.sample_rate = sample_rate
        self.on_event = on_event
        self.clock = clock
        self._queue: asyncio.Queue = asyncio.Queue()
        self._turns: list[str] = []  # open turns, in order (a speech request has one)
        self._opened_at: dict[str, float] = {}
        self._first_at: float | None = None
        self._delivered = 0  # samples handed on, all turns
        self._chunk_samples: dict[str, dict[int, int]] = {}
        self._ended = False

    # ------------------------------------------------------------ the Session's side
    def open_utterance(self, turn_id: str) -> None:
        if turn_id in self._opened_at:
            raise ValueError(f"utterance {turn_id!r} is already open")
        self._turns.append(turn_id)
        self._opened_at[turn_id] = self.clock()
        self._chunk_samples[turn_id] = {}

    def push(self, turn_id: str, chunk: int, pcm: np.ndarray) -> None:
        if turn_id not in self._opened_at or not len(pcm):
            return
        pcm = np.nan_to_num(np.asarray(pcm, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
        now = self.clock()
        if self._first_at is None:
            self._first_at = now
            self._emit("first_audio", now, turn_id, ttfa_ms=round((now - self._opened_at[turn_id]) * 1000.0, 1))
        chunks = self._chunk_samples[turn_id]
        chunks[chunk] = chunks.get(chunk, 0) + len(pcm)
        self._delivered += len(pcm)
        self._queue.put_nowait(pcm)

    def mark(self, turn_id: str, chunk: int, payload: dict | None = None) -> None:
        if turn_id in self._opened_at:
            self._emit(
                "mark",
                self.clock(),
                turn_id,
                chunk=chunk,
                played_ms=self._ms(sum(self._chunk_samples[turn_id].values())),
            )

    def close_utterance(self, turn_id: str) -> None:
        if turn_id in self._opened_at:
            self._end(turn_id, interrupted=False)
            if not self._turns and not self._ended:
                self._ended = True
                self._queue.put_nowait(END)

    def flush(self) -> list[dict]:
        ended = [self._end(t, interrupted=True) for t in list(self._turns)]
        self.fail("interrupted", "the request was cancelled")
        return ended

    def close(self) -> None:
        self.fail("session_closed", "the session closed before its audio was complete")

    @property
    def buffered_ms(self) -> float:
        """What a client playing in real time since the first audio would still hold."""
        if self._first_at is None:
            return 0.0
        return max(0.0, self._ms(self._delivered) - (self.clock() - self._first_at) * 1000.0)

    @property
    def current_turn(self) -> str | None:
        return self._turns[0] if self._turns else None

    def on_session_event(self, event: dict) -> None:
        """The session's events as they are emitted: an error (engine refused or failed a chunk) ends the stream."""
        if event.get("type") == "error":
            self.fail(event["code"], event["message"])

    # ------------------------------------------------------------ the consumer's side
    def fail(self, code: str, message: str) -> None:
        """Ends the stream with an error (the consumer raises it after the audio already queued)."""
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(HeadlessError(code, message))

    async def audio(self) -> AsyncIterator[np.ndarray]:
        """float32 PCM pieces in order, until the turn is complete; raises HeadlessError on failure."""
        while True:
            item = await self._queue.get()
            if item is END:
                return
            if isinstance(item, HeadlessError):
                raise item
            yield item

    @property
    def delivered_ms(self) -> float:
        return self._ms(self._delivered)

    # ------------------------------------------------------------ internals
    def _end(self, turn_id: str, interrupted: bool) -> dict:
        self._turns.remove(turn_id)
        self._opened_at.pop(turn_id, None)
        chunks = self._chunk_samples.pop(turn_id, {})
        data = {
            "played_ms": self._ms(sum(chunks.values())),
            "interrupted": interrupted,
            "started": bool(chunks),
            "gaps": {"micro": 0, "audible": 0},  # nothing is paced here, so nothing can run dry
            "chunk_played_ms": {k: self._ms(v) for k, v in chunks.items()},
        }
        self._emit("utterance_end", self.clock(), turn_id, **data)
        return {"turn_id": turn_id, **data}

    def _ms(self, samples: int) -> float:
        return round(samples * 1000.0 / self.sample_rate, 1)

    def _emit(self, type_: str, now: float, turn_id: str, **data) -> None:
        self.on_event(PlayoutEvent(type_, now, turn_id, data))
