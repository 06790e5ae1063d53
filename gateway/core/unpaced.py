"""Unpaced output for a live session: its audio leaves as the engine makes it (`session.start.output.pacing: "none"`).

For clients that pace audio themselves (Pipecat's and LiveKit's output
transports, a browser's player), the shared clock would only add latency.
`UnpacedPlayout` stands in for `audio.Playout` inside a `Session` like the
speech route's `HeadlessPlayout` (gateway/core/headless.py) — same
pipeline, same two chunks in flight, same capacity — but for a call that
lives on: many turns in order, `interrupt`, marks and `turn.done`.

What the engine yields is queued in order with the turn's marks and ends; a
sender task (`pump`) hands each piece to the media leg as fast as the client
reads, and emits `audio.start` before a turn's first piece, `mark` once a
chunk's last piece was handed on, and `turn.done` once the turn's last one
was. `played_ms` and `played_text` therefore count what was *sent*: the
client alone knows how much of it it played.

For the engine's deadlines it models a client that plays whatever it
received in real time, from its first audio on (a virtual play head), so a
session with seconds of audio queued at its client is served after calls
that are about to run dry — as the headless speech requests are.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import numpy as np

from audio.playout import PlayoutEvent

# At most this much audio per binary message: a long engine packet goes out in slices, so an
# `interrupt` stops it within one slice and the client's first audio is not held back by a big encode.
MAX_PIECE_MS = 200
# The sender waits while the socket holds more unsent bytes than this (the client reads slower than
# the engine speaks): well below the event high-water mark, so events never find the socket full.
MAX_UNSENT_BYTES = 256 * 1024


@dataclass
class _Turn:
    turn_id: str
    opened_at: float
    latency_from: float | None = None  # set when it becomes the current turn
    started: bool = False
    sent: dict[int, int] = field(default_factory=dict)  # chunk -> samples handed to the leg


class UnpacedPlayout:
    """The `Playout` face a `Session` uses, driven by a sender task instead of the clock."""

    def __init__(
        self, sample_rate: int, on_event: Callable[[PlayoutEvent], None], clock: Callable[[], float] = time.monotonic
    ):
        self.sample_rate = sample_rate
        self.on_event = on_event
        self.clock = clock
        self._turns: dict[str, _Turn] = {}  # open turns in order
        self._items: deque = deque()  # ("audio", turn, chunk, pcm) | ("mark", turn, chunk) | ("end", turn)
        self._ready = asyncio.Event()
        self._play_end = 0.0  # clock time at which a real-time player would finish what it received
        self._closed = False
        self.sent_samples = 0  # all turns

    # ------------------------------------------------------------ the Session's side
    def open_utterance(self, turn_id: str) -> None:
        if turn_id in self._turns:
            raise ValueError(f"utterance {turn_id!r} is already open")
        now = self.clock()
        turn = _Turn(turn_id, now)
        self._turns[turn_id] = turn
        if len(self._turns) == 1:
            turn.latency_from = now

    def push(self, turn_id: str, chunk: int, pcm: np.ndarray) -> None:
        if turn_id not in self._turns or not len(pcm):
            return
        pcm = np.nan_to_num(np.asarray(pcm, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
        np.clip(pcm, -1.0, 1.0, out=pcm)
        now = self.clock()
        self._play_end = max(self._play_end, now) + len(pcm) / self.sample_rate
        self._put(("audio", turn_id, chunk, pcm))

    def mark(self, turn_id: str, chunk: int, payload: dict | None = None) -> None:
        if turn_id in self._turns:
            self._put(("mark", turn_id, chunk))

    def close_utterance(self, turn_id: str) -> None:
        if turn_id in self._turns:
            self._put(("end", turn_id))

    def flush(self) -> list[dict]:
        """Barge-in: drop what was not sent; every open turn ends as interrupted with what was sent."""
        self._items.clear()
        self._play_end = 0.0  # the client drops its buffer on turn.done(interrupted)
        return [self._end(turn_id, interrupted=True) for turn_id in list(self._turns)]

    def close(self) -> None:
        self._closed = True
        self._items.clear()
        self._ready.set()

    def restart_latency(self) -> None:
        turn = self._current()
        if turn is not None and not turn.started:
            turn.latency_from = self.clock()

    @property
    def buffered_ms(self) -> float:
        """What a client playing in real time since its first audio would still hold."""
        return max(0.0, self._play_end - self.clock()) * 1000.0

    @property
    def current_turn(self) -> str | None:
        turn = self._current()
        return turn.turn_id if turn else None

    def on_session_event(self, event: dict) -> None:
        """Every session event as it is emitted: no clock tick will flush it, so the sender does."""
        self._ready.set()

    # ------------------------------------------------------------ the sender
    async def pump(
        self,
        send: Callable[[np.ndarray], Awaitable[bool]],
        flush_events: Callable[[], Awaitable[None]],
        writable: Callable[[], Awaitable[bool]],
    ) -> None:
        """Hands the queued audio to `send` in order until `close()`; events go out via `flush_events`
        at their place between the pieces. `writable()` waits until the leg can take a piece (False:
        the leg is gone)."""
        piece = max(1, self.sample_rate * MAX_PIECE_MS // 1000)
        while not self._closed:
            if not self._items:
                await flush_events()  # events emitted outside the pieces (an engine error, user.speech)
                if self._items or self._closed:
                    continue
                self._ready.clear()
                await self._ready.wait()
                continue
            item = self._items.popleft()
            kind, turn_id = item[0], item[1]
            turn = self._turns.get(turn_id)
            if turn is None:  # flushed meanwhile
                continue
            if kind == "audio":
                pcm = item[3]
                for start in range(0, len(pcm), piece):
                    if not await writable():
                        return
                    if self._turns.get(turn_id) is not turn:  # interrupted while we waited
                        break
                    if not turn.started:
                        turn.started = True
                        self._emit(
                            "first_audio",
                            turn_id,
                            ttfa_ms=round((self.clock() - (turn.latency_from or turn.opened_at)) * 1000.0, 1),
                        )
                        await flush_events()  # audio.start goes before the turn's first audio
                        if self._turns.get(turn_id) is not turn:
                            break
                    part = pcm[start : start + piece]
                    # Counted before the send's await: the bytes are in the socket's buffer once send() runs.
                    turn.sent[item[2]] = turn.sent.get(item[2], 0) + len(part)
                    self.sent_samples += len(part)
                    if not await send(part):
                        return
            elif kind == "mark":
                self._emit("mark", turn_id, chunk=item[2], played_ms=self._ms(sum(turn.sent.values())))
                await flush_events()
            else:  # end
                self._end(turn_id, interrupted=False)
                await flush_events()

    # ------------------------------------------------------------ internals
    def _put(self, item: tuple) -> None:
        if not self._closed:
            self._items.append(item)
            self._ready.set()

    def _current(self) -> _Turn | None:
        return next(iter(self._turns.values()), None)

    def _end(self, turn_id: str, interrupted: bool) -> dict:
        turn = self._turns.pop(turn_id)
        nxt = self._current()
        if nxt is not None and nxt.latency_from is None:
            nxt.latency_from = max(nxt.opened_at, self.clock())  # a queued turn's latency counts from its turn
        data = {
            "played_ms": self._ms(sum(turn.sent.values())),
            "interrupted": interrupted,
            "started": turn.started,
            "gaps": {"micro": 0, "audible": 0},  # nothing is paced here, so nothing can run dry
            "chunk_played_ms": {k: self._ms(v) for k, v in turn.sent.items()},
        }
        self._emit("utterance_end", turn_id, **data)
        return {"turn_id": turn_id, **data}

    def _ms(self, samples: int) -> float:
        return round(samples * 1000.0 / self.sample_rate, 1)

    def _emit(self, type_: str, turn_id: str, **data) -> None:
        self.on_event(PlayoutEvent(type_, self.clock(), turn_id, data))
