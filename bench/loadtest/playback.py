"""A simulated caller's ear: received frames in, one frame heard per 20 ms tick.

Each caller keeps its own playback buffer. Frames enter with their arrival
time; the client clock drains one frame per tick at the tick's *scheduled*
time, so what is heard depends only on arrival times and the tick grid — a
late clock wake-up is caught up without hiding (or inventing) gaps.

Inside an utterance (first played frame → last played frame of a turn) a
tick without audio is a gap tick, either because nothing had arrived yet
(source `delivery`) or because the frame that arrived was digital silence —
the gateway fills its own underruns with silence frames (source `server`).
Silence before a turn's first audio is latency, and silence after its last
audio is its end: neither is a gap. This mirrors docs/concepts.md.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

FRAME_MS = 20
AUDIBLE_MS = 200.0  # docs/concepts.md: micro-gap < 200 ms <= audible gap
# The gateway may send `turn.done` just before the turn's last frame (same tick);
# the end marker waits one frame so that frame is still heard as part of the turn.
END_GRACE_S = FRAME_MS / 1000.0


def gap_kind(duration_ms: float) -> str:
    return "audible" if duration_ms >= AUDIBLE_MS else "micro"


@dataclass
class HeardGap:
    start: float  # scheduled time of its first silent tick (monotonic seconds)
    duration_ms: float
    source: str  # delivery | server | mixed
    kind: str

    def as_dict(self) -> dict:
        return {
            "start": round(self.start, 4),
            "duration_ms": self.duration_ms,
            "source": self.source,
            "kind": self.kind,
        }


@dataclass
class HeardTurn:
    """What the caller heard of one turn."""

    key: object
    first_play: float | None = None  # scheduled time of the first played frame
    last_audio: float | None = None  # scheduled time of the last audio frame
    end: float | None = None  # when the end marker was reached
    audio_frames: int = 0
    silent_frames: int = 0  # digital-silence frames played (inside gaps or at the edges)
    lead_silence_ms: float = 0.0  # silent frames before the first audio frame
    tail_ms: float = 0.0  # silence after the last audio frame (not a gap)
    gaps: list[HeardGap] = field(default_factory=list)


_END = object()  # end-of-turn marker in the buffer


class CallerPlayback:
    """One caller's playback buffer and its 20 ms drain.

    * `begin_turn(key)` — the caller started a turn; frames until `end_turn` belong to it.
    * `on_frame(t, payload)` — a binary frame arrived at monotonic time `t`.
    * `end_turn(t)` — the server said the turn is done (a frame arriving right after still counts).
    * `tick(T)` — the clock's tick scheduled at `T`; plays at most one frame.

    Playback of a turn starts `prebuffer_ms` after its first frame arrived
    (the caller's jitter buffer); after a gap it resumes with the next frame.
    `on_heard(turn)` is called when a turn's last frame has been played.
    """

    def __init__(
        self,
        silence: bytes,
        prebuffer_ms: float = 60.0,
        on_heard: Callable[[HeardTurn], None] | None = None,
        keep_audio: bool = False,
        trace_level: bool = False,
    ):
        self.silence = silence
        self.prebuffer_s = prebuffer_ms / 1000.0
        self.on_heard = on_heard
        self._buf: deque = deque()  # (arrival, payload or _END, HeardTurn)
        self._frames_buffered = 0
        self._turn: HeardTurn | None = None  # the turn frames are attributed to
        self._closing: HeardTurn | None = None  # turn.done came; late frames still belong to it
        self._playing: HeardTurn | None = None  # the turn being heard
        self._gap_start: float | None = None
        self._gap_ticks = 0
        self._gap_silent = 0
        self._seen_audio = False
        self.stray_frames = 0  # frames outside any turn (a protocol anomaly)
        self.played_frames = 0  # frames taken from the buffer (Twilio-style marks are echoed by this count)
        self.audio = bytearray() if keep_audio else None  # every tick's sound, for the WAV
        self.levels = array("H") if trace_level else None  # buffered frames at each tick

    # ---------------------------------------------------------------- input
    def begin_turn(self, key: object) -> HeardTurn:
        self._turn = HeardTurn(key)
        self._closing = None
        return self._turn

    def on_frame(self, t: float, payload: bytes) -> None:
        buf = self._buf
        if self._turn is None:
            if self._closing is not None and buf and buf[-1][1] is _END:
                end = buf.pop()  # a frame sent after turn.done: keep it before the end marker
                buf.append((t, payload, self._closing))
                buf.append(end)
                self._frames_buffered += 1
            else:
                self.stray_frames += 1
            return
        buf.append((t, payload, self._turn))
        self._frames_buffered += 1

    def end_turn(self, t: float) -> None:
        if self._turn is None:
            return
        self._buf.append((t + END_GRACE_S, _END, self._turn))
        self._closing = self._turn
        self._turn = None

    @property
    def buffered_frames(self) -> int:
        return self._frames_buffered

    @property
    def idle(self) -> bool:
        """Nothing playing and nothing waiting to be played."""
        return self._playing is None and not self._buf

    # ---------------------------------------------------------------- clock
    def tick(self, T: float) -> None:
        if self.levels is not None:
            self.levels.append(min(self._frames_buffered, 65535))
        if self._playing is None and not self._maybe_start(T):
            self._hear(None)
            return
        buf = self._buf
        if buf and buf[0][0] <= T:
            payload = buf[0][1]
            if payload is _END:
                buf.popleft()
                self._finish(T)
                self._hear(None)
                # A next turn's frames cannot be queued behind the marker yet
                # (callers are sequential), so the tick ends here.
                return
            buf.popleft()
            self._frames_buffered -= 1
            self.played_frames += 1
            if payload == self.silence:
                self._silent_tick(T, delivery=False)
            else:
                self._audio_tick(T)
            self._hear(payload)
        else:
            self._silent_tick(T, delivery=True)
            self._hear(None)

    def _maybe_start(self, T: float) -> bool:
        buf = self._buf
        if not buf or buf[0][0] > T:
            return False
        if buf[0][1] is _END:  # a turn with no audio at all
            turn = buf.popleft()[2]
            turn.end = T
            if self.on_heard is not None:
                self.on_heard(turn)
            return False
        if T < buf[0][0] + self.prebuffer_s:
            # Still filling the jitter buffer, unless the turn's end is already in.
            if not any(item[1] is _END and item[0] <= T for item in buf):
                return False
        self._playing = buf[0][2]
        self._playing.first_play = T
        self._gap_start = None
        self._gap_ticks = self._gap_silent = 0
        self._seen_audio = False
        return True

    def _audio_tick(self, T: float) -> None:
        turn = self._playing
        assert turn is not None
        if self._gap_ticks:
            if self._seen_audio:
                silent, ticks = self._gap_silent, self._gap_ticks
                source = "server" if silent == ticks else "delivery" if silent == 0 else "mixed"
                dur = ticks * FRAME_MS
                turn.gaps.append(HeardGap(self._gap_start, float(dur), source, gap_kind(dur)))
            else:
                turn.lead_silence_ms += self._gap_silent * FRAME_MS
            self._gap_ticks = self._gap_silent = 0
            self._gap_start = None
        self._seen_audio = True
        turn.audio_frames += 1
        turn.last_audio = T

    def _silent_tick(self, T: float, delivery: bool) -> None:
        turn = self._playing
        assert turn is not None
        if not delivery:
            turn.silent_frames += 1
            self._gap_silent += 1
        if self._gap_ticks == 0:
            self._gap_start = T
        self._gap_ticks += 1

    def _finish(self, T: float) -> None:
        turn = self._playing
        assert turn is not None
        if self._seen_audio:
            turn.tail_ms = self._gap_ticks * FRAME_MS
        else:
            turn.lead_silence_ms += self._gap_silent * FRAME_MS
        turn.end = T
        self._playing = None
        if self.on_heard is not None:
            self.on_heard(turn)

    def _hear(self, payload: bytes | None) -> None:
        if self.audio is not None:
            self.audio += payload if payload is not None else self.silence
