"""Jitter-buffered playout: the single truth about what the caller heard (docs/concepts.md).

The producer side opens utterances (one per turn, in order), pushes their
audio tagged with the text chunk it belongs to, places marks after a chunk's
audio, and closes the utterance when no more audio will come. The consumer
side calls `tick()` once per 20 ms frame.

Latency vs gap: the silence between an utterance becoming current and its
first frame (after the prebuffer target is met) is latency (TTFA). Once the
first frame played, every tick with no audio while the utterance is not
finished is an underrun; it ends with the next audio (no second prebuffer)
and is classified micro (< 200 ms) or audible (>= 200 ms).
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from audio.encode import encode_pcm
from audio.filewriter import LogFile, WavFile
from audio.pcm import float_to_int16, frame_samples

AUDIBLE_GAP_MS = 200.0


@dataclass
class PlayoutEvent:
    type: str  # utterance_start | first_audio | underrun_start | underrun_end | mark | utterance_end
    t: float  # clock time of the tick that produced it
    turn_id: str
    data: dict = field(default_factory=dict)

    def to_json(self, session_id: str) -> str:
        return json.dumps(
            {"type": self.type, "t": round(self.t, 6), "session": session_id, "turn_id": self.turn_id, **self.data}
        )


@dataclass(slots=True)
class Frame:
    pcm: (
        np.ndarray
    )  # float32, frame_samples long; a reused buffer, valid until the next tick (read-only zeros when not audio)
    kind: str  # audio | gap | latency | idle | paused
    turn_id: str | None = None
    data: bytes | None = None  # an audio frame's wire bytes, when the playout has an `encoding` (else None)


@dataclass
class _Utterance:
    turn_id: str
    opened_at: float
    latency_from: float | None = None  # set when it becomes current
    started: bool = False
    closed: bool = False  # no more audio will be pushed
    played_samples: int = 0
    pushed_samples: int = 0
    chunk: int | None = None  # chunk now playing
    chunk_played: dict = field(default_factory=dict)  # chunk -> samples played
    underrun_ticks: int = 0
    lost_ticks: int = 0  # audio frames in a row that the leg could not send (backpressure): a `network` gap
    lost_chunk: int | None = None
    underrun_cause: str = ""
    underrun_chunk: int | None = None
    gaps: dict = field(default_factory=lambda: {"micro": 0, "audible": 0})
    # ("audio", chunk, pcm[, wire bytes]) | ("mark", chunk, payload) | ("end",), in push order. Tuples, not lists: the
    # collector stops tracking a tuple of str, int and ndarray, so a buffered utterance adds nothing to the
    # objects every full collection walks (a list per packet did, ~40 per call mid-turn).
    segments: deque = field(default_factory=deque)
    head_offset: int = 0  # samples of the first audio segment already played


class Playout:
    def __init__(
        self,
        sample_rate: int,
        frame_ms: int = 20,
        prebuffer_ms: float = 60.0,
        session_id: str = "",
        on_event: Callable[[PlayoutEvent], None] | None = None,
        log_path: str | None = None,
        wav_path: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        cause_provider: Callable[[], str] | None = None,
        encoding: str | None = None,
    ):
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.frame_samples = frame_samples(sample_rate, frame_ms)
        self.prebuffer_samples = int(round(prebuffer_ms * sample_rate / 1000))
        self.session_id = session_id
        self.on_event = on_event
        self.clock = clock
        self.cause_provider = cause_provider or (lambda: "engine")
        self._utterances: deque[_Utterance] = deque()
        self._by_id: dict[str, _Utterance] = {}
        self._buffered = 0  # audio samples waiting, all utterances
        self._frame = np.zeros(self.frame_samples, dtype=np.float32)
        # Every tick without audio returns this one read-only frame of zeros: no fill, no copy
        self._silence = np.zeros(self.frame_samples, dtype=np.float32)
        self._silence.flags.writeable = False
        self._idle = Frame(self._silence, "idle")
        # `encoding` (pcm16, mulaw, alaw): each pushed packet is encoded once, whole, and every audio frame
        # carries its wire bytes as slices of its packets' bytes (`Frame.data`): one numpy pass per packet
        # instead of four per frame. Byte for byte what FrameEncoder makes of the frame (both encode sample by
        # sample, with the same float32 arithmetic; tests/audio/test_playout.py compares them).
        self.encoding = encoding
        self._bps = 0 if encoding is None else (2 if encoding == "pcm16" else 1)
        self._silence_bytes = b"" if encoding is None else encode_pcm(self._silence, encoding)
        # Files are written by the writer thread (audio.filewriter): a slow disk never stalls a tick.
        self._log = LogFile(log_path) if log_path else None
        self._wav = None
        if wav_path:
            self._wav = WavFile(wav_path, sample_rate)
            self._wav_int16 = np.zeros(self.frame_samples, dtype=np.int16)
        self.ticks = 0
        self._paused_ticks = 0  # > 0: holding the current utterance (caller speech onset), at most this many more ticks
        self.paused_total_ms = 0.0

    # ------------------------------------------------------------ producer side
    def open_utterance(self, turn_id: str) -> None:
        """A turn's text started arriving; its latency clock starts when it becomes current."""
        if turn_id in self._by_id:
            raise ValueError(f"utterance {turn_id!r} is already open")
        utt = _Utterance(turn_id=turn_id, opened_at=self.clock())
        self._utterances.append(utt)
        self._by_id[turn_id] = utt
        if len(self._utterances) == 1:
            self._make_current(utt, utt.opened_at)

    def push(self, turn_id: str, chunk: int, pcm: np.ndarray) -> None:
        utt = self._by_id.get(turn_id)
        if utt is None or utt.closed or not len(pcm):
            return
        utt.pushed_samples += len(pcm)
        # Cleaned once per packet, so the 20 ms path never checks again: finite, within [-1, 1] (FrameEncoder relies on it).
        pcm = np.nan_to_num(np.asarray(pcm, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
        np.clip(pcm, -1.0, 1.0, out=pcm)
        if self._bps:
            utt.segments.append(("audio", chunk, pcm, encode_pcm(pcm, self.encoding)))
        else:
            utt.segments.append(("audio", chunk, pcm))
        self._buffered += len(pcm)

    def mark(self, turn_id: str, chunk: int, payload: dict | None = None) -> None:
        """Fires a `mark` event when everything pushed so far for the turn has played."""
        utt = self._by_id.get(turn_id)
        if utt is not None and not utt.closed:
            utt.segments.append(("mark", chunk, payload or {}))

    def close_utterance(self, turn_id: str) -> None:
        """No more audio for this turn; it ends once its buffered audio has played."""
        utt = self._by_id.get(turn_id)
        if utt is None or utt.closed:
            return
        utt.closed = True
        utt.segments.append(("end",))

    def flush(self) -> list[dict]:
        """Barge-in: drop all buffered audio, end the current and queued utterances as interrupted.

        Returns the `utterance_end` data of each ended utterance, current first.
        """
        ended = []
        now = self.clock()
        self._buffered = 0
        self._paused_ticks = 0
        while self._utterances:
            utt = self._utterances.popleft()
            if utt.underrun_ticks:
                self._end_underrun(utt, now)
            ended.append(self._end_utterance(utt, now, interrupted=True))
        return ended

    # ------------------------------------------------------------ consumer side
    @property
    def buffered_ms(self) -> float:
        return self._buffered * 1000.0 / self.sample_rate

    @property
    def has_utterance(self) -> bool:
        """An utterance is open (playing, waiting for its prebuffer, or queued): the next tick may play audio."""
        return bool(self._utterances)

    @property
    def current_turn(self) -> str | None:
        return self._utterances[0].turn_id if self._utterances else None

    @property
    def in_utterance(self) -> bool:
        """True while the current utterance has started playing (frames go on the wire)."""
        return bool(self._utterances) and self._utterances[0].started

    # ------------------------------------------------------------ holding for the caller
    def pause(self, max_ms: float = 2000.0) -> bool:
        """Hold the playing utterance (silence, nothing consumed, no underrun) for at most `max_ms`.

        For a caller who may be starting to barge in: `resume()` if it was a
        cough, `flush()` if it was speech. False when nothing is playing.
        """
        if not self.in_utterance:
            return False
        self._paused_ticks = max(1, int(max_ms // self.frame_ms))
        return True

    def resume(self) -> None:
        self._paused_ticks = 0

    @property
    def paused(self) -> bool:
        return self._paused_ticks > 0

    def restart_latency(self) -> None:
        """The far end can hear us from now on (its media leg just connected): the current utterance's
        latency counts from now, not from when its text arrived."""
        if self._utterances and not self._utterances[0].started:
            self._utterances[0].latency_from = max(self._utterances[0].latency_from or 0.0, self.clock())

    def progress(self, turn_id: str) -> tuple[float, int, dict] | None:
        """(played ms, chunk now playing, played ms per chunk) of an open utterance."""
        utt = self._by_id.get(turn_id)
        if utt is None or utt.chunk is None:
            return None
        return self._ms(utt.played_samples), utt.chunk, {k: self._ms(v) for k, v in utt.chunk_played.items()}

    def played_ms(self, turn_id: str) -> float:
        utt = self._by_id.get(turn_id)
        return utt.played_samples * 1000.0 / self.sample_rate if utt else 0.0

    def stalled(self, ticks: int) -> None:
        """`ticks` frames were due but never played (our clock stalled; the far end heard silence and the
        rest of the utterance shifted): a gap with cause `clock` when an utterance is playing."""
        utt = self._current()
        if ticks <= 0 or utt is None or not utt.started:
            return
        now = self.clock()
        duration = ticks * self.frame_ms
        kind = "audible" if duration >= AUDIBLE_GAP_MS else "micro"
        utt.gaps[kind] += 1
        self._emit("underrun_start", now, utt.turn_id, chunk=utt.chunk, cause="clock")
        self._emit("underrun_end", now, utt.turn_id, chunk=utt.chunk, duration_ms=duration, kind=kind, cause="clock")

    def tick(self, delivered: bool = True) -> Frame:
        """One frame. `delivered=False`: the media leg will skip it (backpressure): its audio is consumed
        but not played, and the run of such frames is a gap with cause `network`."""
        self.ticks += 1
        if not self._utterances:
            return self._out(self._idle) if self._wav else self._idle
        now = self.clock()
        silence = self._silence
        utt = self._utterances[0]
        if self._paused_ticks and utt.started:
            self._paused_ticks -= 1
            self.paused_total_ms += self.frame_ms
            return self._out(Frame(silence, "paused", utt.turn_id))
        if not utt.started:
            avail = utt.pushed_samples
            if avail == 0:
                # Marks of chunks that made no audio (an emoji-only reply) are played at once.
                while utt.segments and utt.segments[0][0] == "mark":
                    seg = utt.segments.popleft()
                    self._emit("mark", now, utt.turn_id, chunk=seg[1], played_ms=0.0, **seg[2])
                if utt.segments and utt.segments[0][0] == "end":
                    # A turn that produced no audio at all (e.g. empty final text).
                    self._pop_end(utt, now)
                    return self._out(Frame(silence, "latency", utt.turn_id))
            if avail < self.prebuffer_samples and not (utt.closed and avail > 0):
                return self._out(Frame(silence, "latency", utt.turn_id))
            utt.started = True
            self._emit("first_audio", now, utt.turn_id, ttfa_ms=round((now - utt.latency_from) * 1000.0, 1))
        frame = self._frame
        frame.fill(0.0)
        parts = [] if self._bps else None
        filled = self._fill(utt, frame, now, delivered, parts)
        still_current = bool(self._utterances) and self._utterances[0] is utt  # False when the frame ended it
        if filled and still_current:
            if not delivered:
                self._lose(utt, now)
            elif utt.lost_ticks:
                self._end_lost(utt, now)
        if filled == 0 and still_current:
            # No audio this tick inside a started utterance: underrun.
            if utt.underrun_ticks == 0:
                utt.underrun_cause = self.cause_provider()
                utt.underrun_chunk = utt.chunk
                self._emit("underrun_start", now, utt.turn_id, chunk=utt.chunk, cause=utt.underrun_cause)
            utt.underrun_ticks += 1
            return self._out(Frame(silence, "gap", utt.turn_id))
        if parts is None:
            return self._out(Frame(frame, "audio", utt.turn_id))
        return self._out(Frame(frame, "audio", utt.turn_id, self._frame_bytes(parts)))

    def _frame_bytes(self, parts: list) -> bytes:
        """The frame's wire bytes from its audio's byte slices, the rest silence (a frame the utterance ended in)."""
        full = len(self._silence_bytes)
        if len(parts) == 1 and len(parts[0]) == full:
            return parts[0]  # the common case: the whole frame inside one packet
        n = sum(len(b) for b in parts)
        if n < full:
            parts.append(self._silence_bytes[n:])
        return b"".join(parts)

    def close(self) -> None:
        if self._log:
            self._log.close()
            self._log = None
        if self._wav:
            self._wav.close()
            self._wav = None

    # ------------------------------------------------------------ internals
    def _current(self) -> _Utterance | None:
        return self._utterances[0] if self._utterances else None

    def _make_current(self, utt: _Utterance, now: float) -> None:
        utt.latency_from = max(now, utt.opened_at)
        self._emit("utterance_start", now, utt.turn_id)

    def _fill(
        self, utt: _Utterance, frame: np.ndarray, now: float, delivered: bool = True, parts: list | None = None
    ) -> int:
        """Copies the current utterance's audio into `frame` (and its wire bytes into `parts`, when given);
        fires marks and the end on the way."""
        pos = 0
        segs = utt.segments
        while segs:
            seg = segs[0]
            kind = seg[0]
            if kind == "audio":
                if pos == self.frame_samples:
                    break
                if utt.underrun_ticks:
                    self._end_underrun(utt, now)
                chunk, pcm, offset = seg[1], seg[2], utt.head_offset
                n = min(self.frame_samples - pos, len(pcm) - offset)
                frame[pos : pos + n] = pcm[offset : offset + n]
                if parts is not None:
                    bps = self._bps
                    parts.append(seg[3][offset * bps : (offset + n) * bps])
                pos += n
                offset += n
                self._buffered -= n
                utt.chunk = chunk
                if delivered:  # a skipped frame's audio is gone, but nobody heard it
                    utt.played_samples += n
                    utt.chunk_played[chunk] = utt.chunk_played.get(chunk, 0) + n
                if offset == len(pcm):
                    segs.popleft()
                    utt.head_offset = 0
                else:
                    utt.head_offset = offset
            elif kind == "mark":
                segs.popleft()
                self._emit(
                    "mark",
                    now,
                    utt.turn_id,
                    chunk=seg[1],
                    played_ms=self._ms(utt.played_samples),
                    chunk_played_ms={k: self._ms(v) for k, v in utt.chunk_played.items()},
                    **seg[2],
                )
            else:  # end
                if utt.underrun_ticks:
                    self._end_underrun(utt, now)
                if pos and not delivered:
                    self._lose(utt, now)  # the utterance's last frame was skipped too
                self._pop_end(utt, now)
                return max(pos, 1)  # the utterance is over; this frame is not a gap
        return pos

    def _pop_end(self, utt: _Utterance, now: float) -> None:
        utt.segments.clear()
        self._utterances.popleft()
        self._end_utterance(utt, now, interrupted=False)
        if self._utterances:
            self._make_current(self._utterances[0], now)

    def _end_underrun(self, utt: _Utterance, now: float) -> None:
        duration = utt.underrun_ticks * self.frame_ms
        kind = "audible" if duration >= AUDIBLE_GAP_MS else "micro"
        utt.gaps[kind] += 1
        self._emit(
            "underrun_end",
            now,
            utt.turn_id,
            chunk=utt.underrun_chunk,
            duration_ms=duration,
            kind=kind,
            cause=utt.underrun_cause,
        )
        utt.underrun_ticks = 0

    def _lose(self, utt: _Utterance, now: float) -> None:
        if utt.lost_ticks == 0:
            utt.lost_chunk = utt.chunk
            self._emit("underrun_start", now, utt.turn_id, chunk=utt.chunk, cause="network")
        utt.lost_ticks += 1

    def _end_lost(self, utt: _Utterance, now: float) -> None:
        duration = utt.lost_ticks * self.frame_ms
        kind = "audible" if duration >= AUDIBLE_GAP_MS else "micro"
        utt.gaps[kind] += 1
        self._emit(
            "underrun_end", now, utt.turn_id, chunk=utt.lost_chunk, duration_ms=duration, kind=kind, cause="network"
        )
        utt.lost_ticks = 0

    def _end_utterance(self, utt: _Utterance, now: float, interrupted: bool) -> dict:
        if utt.lost_ticks:
            self._end_lost(utt, now)
        self._by_id.pop(utt.turn_id, None)
        data = {
            "played_ms": self._ms(utt.played_samples),
            "interrupted": interrupted,
            "started": utt.started,
            "gaps": dict(utt.gaps),
            "chunk_played_ms": {k: self._ms(v) for k, v in utt.chunk_played.items()},
        }
        self._emit("utterance_end", now, utt.turn_id, **data)
        return {"turn_id": utt.turn_id, **data}

    def _ms(self, samples: int) -> float:
        return round(samples * 1000.0 / self.sample_rate, 1)

    def _emit(self, type_: str, now: float, turn_id: str, **data) -> None:
        event = PlayoutEvent(type_, now, turn_id, data)
        if self._log:
            self._log.write_line(event.to_json(self.session_id) + "\n")
        if self.on_event:
            self.on_event(event)

    def _out(self, frame: Frame) -> Frame:
        if self._wav:
            self._wav.write_frames(float_to_int16(frame.pcm, out=self._wav_int16).tobytes())
        return frame
