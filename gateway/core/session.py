"""One call: text pieces → chunker → at most two chunks in flight in the engine → Playout → media leg.

A session has a text leg (where agent text comes from and events go) and a
media leg (where audio goes). Legs are small adapters implementing
`gateway.core.contracts.TextLeg` / `MediaLeg`; no transport logic lives here.

What the caller heard (marks, `played_ms`, `played_text`) is accounted in
`gateway.core.playback`: frames a congested leg skips are not played, and for
legs whose far end confirms playback the far end's confirmations decide.

Two in flight: while chunk k plays, chunk k+1 is synthesised; chunk k+2 is
submitted only once k is fully synthesised. Audio of a later in-flight chunk
is held back until the earlier one is complete, so the playout always
receives each turn's audio in order.

Paced calls (the shared clock or the leg's pull drains the playout) read an
engine's stream no further than `playout.max_ahead_ms` ahead of what plays:
the rest waits in the stream, and an engine that reads its audio from a socket
stops reading it (backpressure reaches the upstream server). Unpaced and
headless sessions read as fast as the engine speaks.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from audio.encode import FrameEncoder, OutputFormat
from audio.playout import Playout, PlayoutEvent
from audio.resample import StreamResampler
from gateway import protocol as P
from gateway.core.chunker import Chunker
from gateway.core.contracts import MediaLeg, TextLeg
from gateway.core.headless import HeadlessPlayout
from gateway.core.unpaced import UnpacedPlayout
from gateway.core.playback import PROGRESS_MARK_MS, PlaybackConfirmations, SpokenChunk, played_text
from gateway.config import Config, VoiceConfig
from gateway.metrics import GatewayMetrics
from tts import Engine, EngineError, SynthesisRequest, SynthesisStream, TurnWords
from tts.frontend import FrontendOptions, prepare_text, prepare_text_async

log = logging.getLogger("voxgate.session")
_WORD = re.compile(r"\S+")

MAX_IN_FLIGHT = 2
PACE_SLACK_S = 0.1  # a paced read resumes this far under the bound: a wake-up per 100 ms of audio, not a packet
SILENCE_LEVEL = 1e-3  # |sample| at or below this is silence (about -60 dBFS): where a chunk's speech ends
MODES = ("sentence", "turn")
ENDED_TURNS_REMEMBERED = 256  # ended turn ids whose late text gets `turn_closed` (an agent's tokens in flight)


@dataclass
class _Turn:
    turn_id: str
    chunker: Chunker
    texts: list[str] = field(default_factory=list)  # text chunks as the agent wrote them
    spoken: list[SpokenChunk | None] = field(
        default_factory=list
    )  # each chunk as the engine speaks it, with its word map
    pushed: dict[int, int] = field(default_factory=dict)  # chunk -> samples pushed to the playout
    complete: set[int] = field(default_factory=set)  # chunks fully synthesised (or failed)
    failed: set[int] = field(default_factory=set)  # chunks the engine refused or failed: skipped, the turn goes on
    final: bool = False
    closed: bool = False  # playout told no more audio will come
    chars: int = 0
    # turn mode: one engine stream for the whole turn (chunk 0), fed whole words as they come
    words: TurnWords | None = None
    unsent: str = ""  # released (normalised) text the engine stream has not been given yet
    stream: object = None  # the turn's TurnStream, once opened
    text_ready: asyncio.Event | None = None  # set when the first words (or final) arrive
    text_marks: list = field(default_factory=list)  # (output samples of chunk 0 pushed, spoken text end)
    words_sent: tuple[int, float] = (0, 0.0)  # turn mode: raw text and ms up to which audio.words went out
    language: str | None = None
    offsets: dict[int, int] = field(default_factory=dict)  # chunk -> its first sample on the turn's audio timeline
    samples: int = 0  # output samples of the turn pushed to the playout


@dataclass
class _Job:
    turn: _Turn
    index: int
    resampler: StreamResampler
    stream: SynthesisStream | None = None  # None while the text is being prepared
    held: list[np.ndarray] = field(default_factory=list)  # audio waiting for earlier chunks
    done: bool = False
    failed: bool = False  # the chunk was skipped (engine refused or failed it)
    task: asyncio.Task | None = None
    fed_at: float = 0.0  # loop time of the engine's last packet (the stall watchdog's reference)
    watchdog: asyncio.TimerHandle | None = None
    out_samples: int = 0  # output samples this job's audio has made (pushed or held)
    speech_end: int = 0  # output samples up to the last audible one (the estimate leaves trailing silence out)
    pacing: bool = False  # waiting for the playout to drain (a paced call): not a stall
    promoted: asyncio.Future | None = None  # a later chunk whose held audio is at its cap waits to become the head


class Session:
    def __init__(
        self,
        session_id: str,
        config: Config,
        engine: Engine,
        metrics: GatewayMetrics,
        voice: str,
        language: str = "auto",
        instruct: str | None = None,
        output: OutputFormat = OutputFormat(),
        on_closed: Callable[["Session"], None] | None = None,
        headless: bool = False,
        unpaced: bool = False,
    ):
        self.session_id = session_id
        self.config = config
        self.engine = engine
        self.metrics = metrics
        self.voice_name = voice
        self.voice: VoiceConfig = config.voices[voice]
        self.language = language if language != "auto" else self.voice.language
        self.instruct = instruct if instruct is not None else self.voice.instruct
        self.frontend = FrontendOptions(
            normalize=self.voice.normalize,
            stress=self.voice.stress,
            stress_format=self.voice.stress_format,
            stress_homographs=self.voice.stress_homographs,
            lexicon=self.voice.lexicon,
        )
        self._last_language = self.language if self.language != "auto" else "en"  # for chunks without letters
        self.output = output
        self.encoder = FrameEncoder(output)
        self.on_closed = on_closed
        self.text_leg: TextLeg | None = None
        self.media_leg: MediaLeg | None = None
        self.inbound = None  # the caller's audio (gateway.core.inbound.InboundAudio) on telephony legs
        self.call_details: dict = {}  # what the media leg knows of the call (SIP: {"sip": {...}}), for the agent
        self.created_at = time.monotonic()
        log_dir = config.server.log_dir
        # Paced: output samples the playout (and held audio) may hold before the engine's stream is read no further.
        self._max_ahead = None if unpaced or headless else int(config.playout.max_ahead_ms * output.sample_rate / 1000)
        # headless: no media leg; the audio goes to one consumer unpaced (gateway/core/headless.py).
        # unpaced: a live call whose audio leaves as made (output.pacing "none", gateway/core/unpaced.py).
        if unpaced:
            self.playout = UnpacedPlayout(output.sample_rate, on_event=self._on_playout_event)
        elif headless:
            self.playout = HeadlessPlayout(output.sample_rate, on_event=self._on_playout_event)
        else:
            self.playout = Playout(
                output.sample_rate,
                frame_ms=output.frame_ms,
                prebuffer_ms=config.playout.prebuffer_ms,
                session_id=session_id,
                on_event=self._on_playout_event,
                log_path=f"{log_dir}/{session_id}.events.jsonl" if log_dir else None,
                wav_path=f"{log_dir}/{session_id}.wav" if log_dir and config.server.record_wav else None,
                cause_provider=self._starved_cause,
                encoding=output.encoding,  # each packet encoded once at push; a frame's bytes are slices of it
            )
        self._turns: dict[str, _Turn] = {}
        self._ended_turns: OrderedDict[str, None] = OrderedDict()  # recently ended turn ids, oldest first
        self._confirmations = PlaybackConfirmations(self._release_done)  # for legs whose far end confirms playback
        self._congested: Callable[[], bool] | None = None  # the media leg's "the next frame will be skipped"
        self._send_now: Callable[[bytes], bool] | None = None  # the media leg's send_audio_now, if it has one
        self._confirming = False  # the media leg confirms playback (Twilio marks): turn.done waits for it
        self.absorbs_bursts = True  # the clock may catch up on this call with a burst (see attach_media)
        self._progress_at: dict[str, float] = {}  # turn -> played_ms of its last mark to a confirming far end
        self._stall_ticks = 0  # frames due but not played since the last tick (reported as one clock gap)
        self._pending: deque[tuple[_Turn, int]] = deque()  # text chunks not yet submitted
        self._inflight: deque[_Job] = deque()
        self._outbox: deque[dict] = deque()
        # Called with every event as it is emitted, whichever text leg is attached (e.g. the agent).
        self.observers: list[Callable[[dict], None]] = []
        if headless:  # a failed chunk fails the stream (seen as it is emitted, before the turn closes)
            self.observers.append(self.playout.on_session_event)
        self._draining = False
        self._interrupted_by = "agent"  # who asked for the barge-in now under way
        self._heard: tuple[str, float] | None = None  # (turn, ms of it played when the caller started to speak)
        self.caller_voice = None  # gateway.core.caller_voice.CallerVoice when the caller's speech is detected
        self.closed = False
        self._closed_event = asyncio.Event()
        self._close_callbacks: list[Callable[[], None]] = []
        self.mode = "sentence"
        self.mode_note: str | None = None  # why turn mode was asked for and not given
        self.word_timings = False  # session.start / call.attach `word_timings`: send audio.words events
        self.set_mode(getattr(config.chunker, "mode", "sentence"))

    def set_mode(self, mode: str | None) -> str:
        """`sentence` (the chunker: each clause or sentence its own generation) or `turn` (one generation
        per turn, fed words as they come). Turn mode falls back to sentence mode where the engine or
        the voice has none (`mode_note` says why). Applies to turns that start after the call."""
        if mode is None:
            return self.mode
        if mode not in MODES:
            raise P.ProtocolError(P.BAD_MESSAGE, f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode_note = None
        if mode == "turn":
            why = self.engine.turn_supported(self.voice.speaker or self.voice_name)
            if why is not None:
                self.mode_note = f"turn mode unavailable ({why}); speaking in sentence mode"
                mode = "sentence"
        self.mode = mode
        return mode

    # ------------------------------------------------------------ legs
    def attach_text(self, leg: TextLeg) -> None:
        self.text_leg = leg

    def attach_media(self, leg: MediaLeg) -> None:
        self.media_leg = leg
        self._congested = getattr(leg, "congested", None)
        self._send_now = getattr(leg, "send_audio_now", None)  # a send that never waits: no coroutine a frame
        self._confirming = bool(getattr(leg, "confirms_playback", False))  # read every tick: kept, not looked up
        # False when the far end plays each frame as it arrives (no buffer): the clock never bursts to it.
        self.absorbs_bursts = bool(getattr(leg, "absorbs_bursts", True))

    def detach_media(self) -> None:
        self.media_leg = None
        self._congested = None
        self._send_now = None
        self._confirming = False
        self.absorbs_bursts = True

    def playback_confirmed(self, mark_id: int, heard: bool = True) -> None:
        """The media leg's far end confirmed (`heard`) or dropped the mark the session gave the id `mark_id`.

        The one API for playback confirmations (Twilio mark echo, chan_websocket MEDIA_MARK_PROCESSED;
        see gateway.core.playback.PlaybackConfirmations): a mark counts as heard when the confirmation
        came before our clear. A chunk's client `mark` event goes out now; a turn.done waiting for this
        confirmation follows it."""
        mark = self._confirmations.confirm(mark_id, heard)
        if mark is None:
            return
        if mark.heard and mark.chunk_end:
            self.emit({"type": "mark", "turn_id": mark.turn_id, "chunk": mark.chunk, "played_ms": mark.played_ms})
        self._confirmations.ready(mark.turn_id)

    # ------------------------------------------------------------ text leg input
    async def handle(self, msg: dict) -> None:
        """A validated client message of the text leg (not session.start)."""
        mtype = msg["type"]
        try:
            if mtype == "text":
                self.add_text(msg["turn_id"], msg["text"], bool(msg.get("final", False)))
            elif mtype == "interrupt":
                await self.interrupt()
            elif mtype == "session.end":
                await self.end(drain=bool(msg.get("drain", False)))
            else:
                raise P.ProtocolError(P.UNKNOWN_TYPE, f"{mtype!r} is not handled by this session")
        except P.ProtocolError as exc:
            self.emit(exc.event())
        await self.flush_events()

    def add_text(self, turn_id: str, text: str, final: bool) -> None:
        if self.closed:
            raise P.ProtocolError(P.BAD_MESSAGE, "the session has ended")
        if self._draining:
            raise P.ProtocolError(P.SHUTTING_DOWN, "session.end(drain) was requested; no new text is accepted")
        turn = self._turns.get(turn_id)
        if turn is None and turn_id in self._ended_turns:
            raise P.ProtocolError(
                P.TURN_CLOSED, f"turn {turn_id!r} has ended (played out or interrupted); its late text is dropped"
            )
        limit = self.config.server.limits.max_text_per_turn
        if (turn.chars if turn else 0) + len(text) > limit:
            raise P.ProtocolError(P.TEXT_TOO_LONG, f"turn {turn_id!r} would exceed {limit} characters; piece dropped")
        if turn is None:
            if len(self._turns) >= self.config.server.limits.max_queued_turns:
                raise P.ProtocolError(
                    P.TOO_MANY_TURNS, f"at most {self.config.server.limits.max_queued_turns} turns may be queued"
                )
            c = self.config.chunker
            turn = _Turn(
                turn_id,
                Chunker(c.first_chunk_words, c.max_chunk_chars, c.min_chunk_chars, min_first_chars=c.min_first_chars),
            )
            self._turns[turn_id] = turn
            self.playout.open_utterance(turn_id)  # audio.start.ttfa_ms counts from here: the first text piece
            if self.mode == "turn":
                self._open_turn_mode(turn)
        elif turn.final:
            raise P.ProtocolError(P.TURN_CLOSED, f"turn {turn_id!r} already received final text")
        turn.chars += len(text)
        if turn.words is not None:
            self._turn_text(turn, text, final)
            return
        chunks = turn.chunker.push(text) if text else []
        if final:
            turn.final = True
            chunks += turn.chunker.flush()
        for chunk in chunks:
            self._queue_chunk(turn, chunk)
        self._pump()
        self._maybe_close_turn(turn)

    # ------------------------------------------------------------ turn mode
    def _open_turn_mode(self, turn: _Turn) -> None:
        turn.words = TurnWords(self._normalize_words)
        turn.text_ready = asyncio.Event()
        turn.texts.append("")  # chunk 0 is the whole turn
        turn.spoken.append(None)
        self._pending.append((turn, 0))

    def _normalize_words(self, text: str) -> str:
        """Whole words (tts.turn_words) through the frontend: the engine speaks what a chunk would."""
        prepared = prepare_text(text, self.language, self.frontend, self._last_language)
        self._last_language = prepared.language
        return prepared.text

    def _turn_text(self, turn: _Turn, text: str, final: bool) -> None:
        released = turn.words.append(text) if text else ""
        if final:
            turn.final = True
            released += turn.words.finish()
        turn.texts[0] = turn.words.raw
        stream = turn.stream
        if stream is not None and not stream.cancelled:
            if released:
                stream.append(released)
            if final:
                stream.finish()
        else:
            turn.unsent += released
            if turn.language is None and released.strip():
                turn.language = self._last_language
        if (released.strip() or final) and turn.text_ready is not None:
            turn.text_ready.set()
        self._pump()
        self._maybe_close_turn(turn)  # its stream may be over already (failed): the final text ends the turn

    async def _open_turn_stream(self, job: _Job) -> None:
        """The turn's engine stream, opened once its first words are out (or its text is final)."""
        turn = job.turn
        await turn.text_ready.wait()
        language = turn.language or (self.language if self.language != "auto" else self._last_language)
        request = SynthesisRequest(
            text="",
            voice=self.voice.speaker or self.voice_name,
            language=language,
            instruct=self.instruct,
            deadline=self._next_deadline(),
            tag=f"{self.session_id}/{turn.turn_id}/turn",
        )
        stream = self.engine.open_turn(request)
        turn.stream = job.stream = stream
        self.metrics.chunks.inc()
        if turn.unsent:
            stream.append(turn.unsent)
            turn.unsent = ""
        if turn.final:
            stream.finish()

    @staticmethod
    def _turn_spoken_all(turn: _Turn) -> bool:
        """Turn mode: the engine's audio so far reaches the end of the words it was given."""
        released = len(turn.words.raw[: turn.words.raw_offset(len(turn.words.spoken))].rstrip())
        spoken = turn.text_marks[-1][1] if turn.text_marks else 0
        return spoken >= released

    def _turn_played_text(self, turn: _Turn, chunk_played_ms: dict) -> str:
        """Turn mode: the text the engine had consumed for the frames that played (its chunks' `text_end`)."""
        heard = chunk_played_ms.get(0, 0.0) * self.output.sample_rate / 1000.0
        slack = 1 + self.output.sample_rate / 10_000
        end = 0
        for samples, text_end in turn.text_marks:
            if samples > heard + slack:
                break
            end = text_end
        return turn.words.raw_text(end)

    def _queue_chunk(self, turn: _Turn, text: str) -> None:
        turn.texts.append(text)
        turn.spoken.append(None)
        self._pending.append((turn, len(turn.texts) - 1))

    # ------------------------------------------------------------ engine side
    def _pump(self) -> None:
        while self._pending and len(self._inflight) < MAX_IN_FLIGHT:
            turn, index = self._pending.popleft()
            job = _Job(turn, index, StreamResampler(self.engine.sample_rate, self.output.sample_rate))
            self._inflight.append(job)
            job.task = asyncio.get_running_loop().create_task(self._run_job(job))

    async def _prepare(self, text: str):
        """Normalisation inline (sub-millisecond); Russian stress off the loop (a model)."""
        if self.frontend.stress:
            prepared = await prepare_text_async(text, self.language, self.frontend, self._last_language)
        else:
            prepared = prepare_text(text, self.language, self.frontend, self._last_language)
        self._last_language = prepared.language
        return prepared

    def _submit(self, job: _Job, prepared) -> None:
        turn, index = job.turn, job.index
        log.info(
            "session %s turn %s chunk %d speaks %r (%s)",
            self.session_id,
            turn.turn_id,
            index,
            prepared.text,
            prepared.language,
        )
        spoken = SpokenChunk.build(turn.texts[index], prepared.normalized or prepared.text)
        turn.spoken[index] = spoken.with_engine_text(prepared.text)
        request = SynthesisRequest(
            text=prepared.text,
            voice=self.voice.speaker or self.voice_name,
            language=prepared.language,
            instruct=self.instruct,
            deadline=self._next_deadline(),
            tag=f"{self.session_id}/{turn.turn_id}/{index}",
        )
        job.stream = self.engine.synthesize(request)
        self.metrics.chunks.inc()

    def _next_deadline(self) -> float:
        """When the playout would run dry without the next chunk's audio (a paced call's unread audio counts)."""
        unread = sum(job.stream.unread_samples for job in self._inflight if job.stream is not None)
        return time.monotonic() + self.ahead_samples / self.output.sample_rate + unread / self.engine.sample_rate

    async def _run_job(self, job: _Job) -> None:
        """Prepare one text chunk, submit it, and feed its audio to the playout in order."""
        try:
            if job.turn.words is not None:
                await self._open_turn_stream(job)
            else:
                self._submit(job, await self._prepare(job.turn.texts[job.index]))
            self._watch_stall(job)
            async for chunk in job.stream:
                job.fed_at = asyncio.get_running_loop().time()
                spoken = job.turn.spoken[job.index]
                if spoken is not None:  # where each engine packet starts, in output samples
                    spoken.frame_offsets.append(job.turn.pushed.get(job.index, 0) + sum(len(p) for p in job.held))
                if chunk.words is not None and spoken is not None:
                    spoken.add_timings(chunk.words, self.output.sample_rate / self.engine.sample_rate)
                self._deliver(job, job.resampler.process(chunk.pcm))
                if chunk.words is not None:
                    self._send_words(job.turn, job.index)
                if chunk.text_end is not None and job.turn.words is not None:
                    job.turn.text_marks.append((job.out_samples, chunk.text_end))
                    self._send_turn_words(job.turn)
                if self._max_ahead is not None:
                    await self._pace(job)
            self._deliver(job, job.resampler.flush())
        except asyncio.CancelledError:
            return
        except EngineError as exc:  # refused (overloaded), failed or stalled: the turn goes on without this chunk
            job.failed = True
            # The engine's own failures are `engine_error` to clients, whatever the engine called them.
            code = P.ENGINE_ERROR if exc.code in ("internal", P.ENGINE_ERROR) else exc.code
            self.emit(P.error_event(code, f"turn {job.turn.turn_id!r} chunk {job.index}: {exc.message}"))
        except Exception as exc:  # the engine (or the frontend) failed this chunk only
            job.failed = True
            log.exception("chunk failed")
            self.emit(P.error_event(P.ENGINE_ERROR, f"turn {job.turn.turn_id!r} chunk {job.index}: {exc}"))
        finally:
            if job.watchdog is not None:
                job.watchdog.cancel()  # also drops its reference to the job (no cycle left behind)
                job.watchdog = None
        if job not in self._inflight:
            return  # interrupted meanwhile
        job.done = True
        self._advance()
        await self.flush_events()

    async def _pace(self, job: _Job) -> None:
        """A paced call reads no more of the engine's stream while `playout.max_ahead_ms` waits to play.

        The audio ahead counts the playout's and the held audio of a later chunk. That chunk also stops once its
        own held audio reaches half the bound, and the head may always fill the playout to half the bound: the
        head's end is what releases the held audio, so it must never wait on it. The total stays within the
        bound and a packet (two where a packet overshoots the held half). Waits are timers sized to the excess,
        cancelled with the job (barge-in); the stall watchdog does not count them."""
        rate = self.output.sample_rate
        limit = self._max_ahead
        while job in self._inflight:
            excess = self.ahead_samples - limit
            own = sum(len(p) for p in job.held)
            if job is self._inflight[0]:
                excess = min(excess, int(self.playout.buffered_ms * rate / 1000) - limit // 2)
            elif own >= limit // 2:
                job.pacing = True
                job.promoted = asyncio.get_running_loop().create_future()
                await job.promoted  # `_advance` makes it the head and pushes its held audio
                continue
            if excess <= 0:
                break
            job.pacing = True
            await asyncio.sleep(excess / rate + PACE_SLACK_S)
        if job.pacing:
            job.pacing = False
            job.fed_at = asyncio.get_running_loop().time()

    def _watch_stall(self, job: _Job) -> None:
        """A hung engine must not hang the turn: no audio for `engine.stall_timeout_s` fails the chunk.

        One timer per chunk, re-armed only when it fires (a `wait_for` per packet costs a task and a
        timer each: a measurable share of the gateway's CPU at hundreds of calls). A bound method, not a
        closure: a closure that re-arms itself is a reference cycle, and every chunk would end as garbage
        for the cycle collector, whose pauses stall the shared clock."""
        loop = asyncio.get_running_loop()
        job.fed_at = loop.time()
        job.watchdog = loop.call_at(job.fed_at + self.config.engine.stall_timeout_s, self._check_stall, job)

    def _check_stall(self, job: _Job) -> None:
        if job.stream is None or job.stream.done:
            return
        loop, stall = asyncio.get_running_loop(), self.config.engine.stall_timeout_s
        if job.turn.words is not None and not job.turn.final:
            job.fed_at = loop.time()  # turn mode: a stream waiting for the agent's text is paused, not stalled
        if job.pacing:
            job.fed_at = loop.time()  # we stopped reading it: the engine is not late
        if loop.time() - job.fed_at >= stall:
            job.stream.cancel(
                EngineError(P.ENGINE_ERROR, f"no audio from the engine for {stall:g} s (engine.stall_timeout_s)")
            )
        else:
            job.watchdog = loop.call_at(job.fed_at + stall, self._check_stall, job)

    def _deliver(self, job: _Job, pcm: np.ndarray) -> None:
        if not len(pcm) or job not in self._inflight:
            return
        loud = np.flatnonzero(np.abs(pcm) > SILENCE_LEVEL)
        if len(loud):
            job.speech_end = job.out_samples + int(loud[-1]) + 1
        job.out_samples += len(pcm)
        if job is self._inflight[0]:
            self._push(job, pcm)
            deadline = None
            for later in list(self._inflight)[1:]:
                if later.stream is not None:
                    deadline = deadline or self._next_deadline()
                    later.stream.set_deadline(deadline)
        else:
            job.held.append(pcm)

    def _push(self, job: _Job, pcm: np.ndarray) -> None:
        turn = job.turn
        self.playout.push(turn.turn_id, job.index, pcm)
        turn.pushed[job.index] = turn.pushed.get(job.index, 0) + len(pcm)
        first = job.index not in turn.offsets
        if first:
            turn.offsets[job.index] = turn.samples
        turn.samples += len(pcm)
        if first:
            self._send_words(turn, job.index)  # words timed before the chunk's audio had its place

    def _advance(self) -> None:
        """Retire finished chunks at the head in order; release held audio of the next."""
        while self._inflight and self._inflight[0].done:
            job = self._inflight.popleft()
            job.turn.complete.add(job.index)
            if job.failed:
                job.turn.failed.add(job.index)
            else:
                self.playout.mark(job.turn.turn_id, job.index)
                spoken = job.turn.spoken[job.index]
                if spoken is not None:
                    spoken.finish(job.speech_end)
                    self._send_words(job.turn, job.index)
            self._maybe_close_turn(job.turn)
            if self._inflight:
                head = self._inflight[0]
                for pcm in head.held:
                    self._push(head, pcm)
                head.held.clear()
                if head.promoted is not None and not head.promoted.done():
                    head.promoted.set_result(None)
        self._pump()

    def _send_words(self, turn: _Turn, index: int) -> None:
        """audio.words: chunk `index`'s newly timed word groups, once its place on the turn's timeline is known."""
        spoken = turn.spoken[index]
        offset = turn.offsets.get(index)
        if not self.word_timings or spoken is None or offset is None:
            return
        words = spoken.take_words(offset, self.output.sample_rate)
        if words:
            source = spoken.source or "estimate"
            self.emit({"type": "audio.words", "turn_id": turn.turn_id, "words": words, "source": source})

    def _send_turn_words(self, turn: _Turn) -> None:
        """Turn mode's audio.words (estimate): the words the engine has consumed by the end of the audio so far
        (its chunks' text_end) are heard by then; the new ones share the audio since the last such words by letters."""
        if not self.word_timings:
            return
        samples, spoken_end = turn.text_marks[-1]
        raw_end = turn.words.raw_offset(spoken_end)
        done, at_ms = turn.words_sent
        new = []
        for m in _WORD.finditer(turn.words.raw, done):
            if m.end() > raw_end:
                break
            new.append(m)
        if not new:
            return
        end_ms = samples * 1000.0 / self.output.sample_rate
        letters, run, words = sum(len(m.group()) for m in new), 0, []
        for m in new:
            start = at_ms + (end_ms - at_ms) * run / letters
            run += len(m.group())
            end = at_ms + (end_ms - at_ms) * run / letters
            words.append({"text": m.group(), "start_ms": round(start, 3), "end_ms": round(end, 3)})
        turn.words_sent = (new[-1].end(), end_ms)
        self.emit({"type": "audio.words", "turn_id": turn.turn_id, "words": words, "source": "estimate"})

    @staticmethod
    def _timing_source(turn: _Turn | None) -> str:
        """turn.done.timing_source: where the word times of the turn's chunks that played came from."""
        if turn is None:
            return "estimate"
        sources = {
            (turn.spoken[i].source if turn.spoken[i] is not None else None) or "estimate"
            for i in turn.offsets
            if i not in turn.failed and i < len(turn.spoken)
        }
        return "mixed" if len(sources) > 1 else next(iter(sources), "estimate")

    def _maybe_close_turn(self, turn: _Turn) -> None:
        if turn.final and not turn.closed and len(turn.complete) == len(turn.texts):
            turn.closed = True
            self.playout.close_utterance(turn.turn_id)

    def _starved_cause(self) -> str:
        """Why the current utterance has no audio: the engine is late, or the agent's text is."""
        current = self.playout.current_turn
        if self._inflight and self._inflight[0].turn.turn_id == current:
            turn = self._inflight[0].turn
            if turn.words is not None and not turn.final and self._turn_spoken_all(turn):
                return "text"  # turn mode: the engine spoke every word it was given; the agent's next is late
            return "engine"
        if any(t.turn_id == current for t, _ in self._pending):
            return "engine"
        return "text"

    # ------------------------------------------------------------ playout → events
    def _on_playout_event(self, ev: PlayoutEvent) -> None:
        d = ev.data
        if ev.type == "mark" and self._confirming:  # the leg sends it with this id; its far end confirms it
            d["mark_id"] = self._confirmations.sent(ev.turn_id, d["chunk"], d["played_ms"], d["chunk_played_ms"])
            self._progress_at[ev.turn_id] = d["played_ms"]
        if self.media_leg is not None:
            self.media_leg.on_playout_event(ev)
        if ev.type == "first_audio":
            self.metrics.ttfa.observe(d["ttfa_ms"] / 1000.0)
            # at_ms: where the turn's first frame sits on the playout timeline (user.speech.at_ms uses the same clock)
            start = {"type": "audio.start", "turn_id": ev.turn_id, "ttfa_ms": d["ttfa_ms"]}
            if hasattr(self.playout, "ticks"):  # a headless session (no media leg) has no timeline
                start["at_ms"] = (self.playout.ticks - 1) * self.playout.frame_ms
            self.emit(start)
        elif ev.type == "mark":
            if not self._confirming:  # else the client hears of it when the far end confirms it
                self.emit(
                    {
                        "type": "mark",
                        "turn_id": ev.turn_id,
                        "chunk": d["chunk"],
                        "played_ms": d["played_ms"],
                        **self._chunk_text(ev.turn_id, d["chunk"]),
                    }
                )
        elif ev.type == "underrun_end":
            self.metrics.underruns.labels(kind=d["kind"], cause=d["cause"]).inc()
            self.metrics.underrun_seconds.labels(kind=d["kind"]).inc(d["duration_ms"] / 1000.0)
            self.emit(
                {
                    "type": "underrun",
                    "turn_id": ev.turn_id,
                    "duration_ms": d["duration_ms"],
                    "kind": d["kind"],
                    "cause": d["cause"],
                }
            )
        elif ev.type == "utterance_end":
            turn = self._turns.pop(ev.turn_id, None)
            self._remember_ended(ev.turn_id)
            self._progress_at.pop(ev.turn_id, None)
            self.metrics.turns.labels(interrupted=str(d["interrupted"]).lower()).inc()
            done = {
                "type": "turn.done",
                "turn_id": ev.turn_id,
                "played_ms": d["played_ms"],
                "interrupted": d["interrupted"],
                "gaps": d["gaps"],
            }
            onset = None
            if d["interrupted"]:
                done["interrupted_by"] = self._interrupted_by
                if self._heard is not None and self._heard[0] == ev.turn_id:
                    onset = self._heard[1]
            if self._confirming and not self.closed:  # heard, not sent: wait for the far end's confirmations
                self._confirmations.hold(ev.turn_id, (done, turn, onset), d["interrupted"], asyncio.get_running_loop())
            else:
                self._finish_done(done, turn, d["played_ms"], d["chunk_played_ms"], onset)

    def _chunk_text(self, turn_id: str, chunk: int) -> dict:
        """`mark.text`: the chunk's text as the agent wrote it (a client's transcript follows the marks)."""
        turn = self._turns.get(turn_id)
        return {"text": turn.texts[chunk]} if turn is not None and 0 <= chunk < len(turn.texts) else {}

    def _release_done(self, turn_id: str, held, heard_ms: float, heard_chunks: dict) -> None:
        """A turn.done that waited for confirmations: it reports what the far end confirmed."""
        done, turn, onset = held
        self._finish_done(done, turn, heard_ms, heard_chunks, onset, confirmed=True)
        asyncio.get_running_loop().create_task(self.flush_events())

    def _finish_done(
        self,
        done: dict,
        turn: _Turn | None,
        played_ms: float,
        chunk_played: dict,
        onset: float | None,
        confirmed: bool = False,
    ) -> None:
        sent_ms = done["played_ms"]  # what the playout sent
        done["played_ms"] = played_ms
        if confirmed:
            done["sent_ms"] = sent_ms  # played_ms is what the far end confirmed
        if onset is not None:
            # What played after the caller started to speak was talked over: not heard.
            done["caller_onset_ms"] = round(min(sent_ms, max(0.0, onset)), 1)
            chunk_played = _cut_played(chunk_played, min(played_ms, max(0.0, onset)))
        done["timing_source"] = self._timing_source(turn)
        if turn is None:
            done["played_text"] = ""
        elif turn.words is not None:
            done["played_text"] = self._turn_played_text(turn, chunk_played)
        else:
            done["played_text"] = self._played_text(turn, chunk_played)
        self.emit(done)
        if self._draining and not self._turns and not self._confirmations.holding:
            asyncio.get_running_loop().create_task(self._finish_drain())

    def _played_text(self, turn: _Turn, chunk_played_ms: dict) -> str:
        """Text of the chunks the caller heard, cut at the last heard word (gateway.core.playback)."""
        rate = self.output.sample_rate
        played = {index: ms * rate / 1000.0 for index, ms in chunk_played_ms.items()}
        # chunk_played_ms is rounded to 0.1 ms: a fully played chunk may read a few samples short
        return played_text(turn.spoken, turn.pushed, turn.complete, turn.failed, played, slack=1 + rate / 10_000)

    def _remember_ended(self, turn_id: str) -> None:
        self._ended_turns[turn_id] = None
        self._ended_turns.move_to_end(turn_id)
        while len(self._ended_turns) > ENDED_TURNS_REMEMBERED:
            self._ended_turns.popitem(last=False)

    # ------------------------------------------------------------ events out
    async def report(self, exc: P.ProtocolError) -> None:
        """A bad message of this session's text leg: its `error` event, in order with the others."""
        self.emit(exc.event())
        await self.flush_events()

    def emit(self, event: dict) -> None:
        if event.get("type") == "error":
            self.metrics.errors.labels(code=event["code"]).inc()
        for observe in self.observers:
            observe(event)
        self._outbox.append(event)

    async def flush_events(self) -> None:
        while self._outbox:
            event = self._outbox.popleft()
            if self.text_leg is not None:
                try:
                    await self.text_leg.send_event(event)
                except Exception:  # a dead text leg must not break the media leg
                    log.debug("text leg send failed", exc_info=True)

    # ------------------------------------------------------------ clock side
    async def tick(self) -> None:
        """One 20 ms frame, driven by the shared clock (or by the media leg's pull)."""
        if self._stall_ticks:
            self.playout.stalled(self._stall_ticks)
            self._stall_ticks = 0
        congested = self._congested
        # Nothing to play, nothing to skip: an idle call's socket is not asked (most of a tick's cost at hundreds of calls)
        delivered = congested is None or not self.playout.has_utterance or not congested()
        frame = self.playout.tick(delivered=delivered)
        if delivered and frame.kind == "audio" and self._confirming:
            self._progress_mark(frame.turn_id)
        # `audio.start` goes before the turn's first frame; marks and `turn.done` after the frame
        # that completed them.
        if self._outbox and any(e.get("type") == "audio.start" for e in self._outbox):
            await self.flush_events()
        media = self.media_leg
        if media is not None:
            kind = frame.kind
            if kind == "audio" and delivered:
                data = frame.data
                if data is None:
                    data = self.encoder.encode(frame.pcm)
            elif kind == "audio" or kind == "gap" or kind == "paused" or media.send_idle_silence:
                data = (
                    self.encoder.silence
                )  # silence as it is, or a frame the congested leg skips anyway: nothing to encode
            else:
                data = None
            if data is not None:
                send_now = self._send_now
                if send_now is not None:
                    send_now(data)
                else:
                    await media.send_audio(data)
        if self._outbox:
            await self.flush_events()

    def stalled(self, ticks: int) -> None:
        """`ticks` frames were due and not played (the clock stalled or skipped this member): the schedule
        shifted, and the silence at the caller is reported as a gap with cause `clock`."""
        self._stall_ticks += ticks

    def _progress_mark(self, turn_id: str) -> None:
        """Inside a long chunk, a mark every PROGRESS_MARK_MS, so a barge-in is confirmed finer than a chunk."""
        progress = self.playout.progress(turn_id)
        if progress is None:
            return
        played_ms, chunk, chunk_played = progress
        if played_ms - self._progress_at.get(turn_id, 0.0) < PROGRESS_MARK_MS:
            return
        self._progress_at[turn_id] = played_ms
        mark_id = self._confirmations.sent(turn_id, chunk, played_ms, chunk_played, chunk_end=False)
        self.media_leg.on_playout_event(
            PlayoutEvent(
                "mark",
                time.monotonic(),
                turn_id,
                {
                    "chunk": chunk,
                    "played_ms": played_ms,
                    "chunk_played_ms": chunk_played,
                    "mark_id": mark_id,
                    "progress": True,
                },
            )
        )

    def tick_failed(self) -> None:
        """The clock caught an exception from this session's tick: end this session (`internal`), never the others."""
        log.error("session %s: its tick failed; ending the session", self.session_id)
        if not self.closed:
            error = P.error_event(P.INTERNAL, "internal error playing this call's audio; the session was ended")
            asyncio.get_running_loop().create_task(self.close(error))

    def pull_frame(self) -> tuple[np.ndarray, str]:
        """For legs that own the clock (WebRTC): one frame of float32 PCM and its kind."""
        if self._stall_ticks:
            self.playout.stalled(self._stall_ticks)
            self._stall_ticks = 0
        frame = self.playout.tick()
        if self._outbox:
            asyncio.get_running_loop().create_task(self.flush_events())
        return frame.pcm, frame.kind

    # ------------------------------------------------------------ barge-in and end
    async def interrupt(self, by: str = "agent", heard: tuple[str, float] | None = None) -> None:
        """Cancel queued and in-flight chunks, flush the playout, drop queued turns.

        `by` is who asked (`agent`, or `caller` for a barge-in by voice);
        `heard` = (turn, ms of it played when the caller started to speak)
        cuts that turn's `played_text` there.
        """
        self._cancel_synthesis()
        self._interrupted_by, self._heard = by, heard
        try:
            self.playout.flush()  # emits utterance_end (→ turn.done) for each open turn
        finally:
            self._interrupted_by, self._heard = "agent", None
        self._turns.clear()
        if self.media_leg is not None:
            self._confirmations.cleared()
            await self.media_leg.on_flush()
        await self.flush_events()

    def _cancel_synthesis(self) -> None:
        for job in self._inflight:
            if job.stream is not None:
                job.stream.cancel()
            if job.task is not None:
                job.task.cancel()
        self._inflight.clear()
        self._pending.clear()

    async def end(self, drain: bool = False) -> None:
        if self.closed:
            return
        if drain and self._turns:
            self._draining = True
            for turn in list(self._turns.values()):
                if not turn.final:
                    self.add_text_final(turn)
            return  # _finish_drain runs when the last turn is done
        await self.interrupt()
        await self.close()

    def add_text_final(self, turn: _Turn) -> None:
        if turn.words is not None:
            self._turn_text(turn, "", True)
            return
        turn.final = True
        for chunk in turn.chunker.flush():
            self._queue_chunk(turn, chunk)
        self._pump()
        self._maybe_close_turn(turn)

    async def _finish_drain(self) -> None:
        await self.close()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run `callback()` when the session closes (timers, per-leg cleanup)."""
        self._close_callbacks.append(callback)

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    async def close(self, error: dict | None = None) -> None:
        """Send session.ended (after an optional error) and release everything."""
        if self.closed:
            return
        self.closed = True
        self._cancel_synthesis()
        if self._turns:
            self.playout.flush()
            self._turns.clear()
        if error:
            self.emit(error)
        self._confirmations.release_all()  # turn.done waiting for confirmations goes out before session.ended
        self.emit({"type": "session.ended"})
        await self.flush_events()
        self.playout.close()
        self._closed_event.set()
        for callback in self._close_callbacks:
            callback()
        if self.on_closed:
            self.on_closed(self)

    @property
    def ahead_samples(self) -> int:
        """Output samples made and not yet played: the playout's and those held for a later chunk."""
        held = sum(sum(len(p) for p in job.held) for job in self._inflight)
        return int(self.playout.buffered_ms * self.output.sample_rate / 1000) + held

    @property
    def active_turns(self) -> int:
        return len(self._turns)


def _cut_played(chunk_played_ms: dict, total_ms: float) -> dict:
    """Per-chunk played time limited to the first `total_ms` of the turn (chunks play in index order)."""
    out, left = {}, total_ms
    for chunk in sorted(chunk_played_ms):
        take = min(chunk_played_ms[chunk], left)
        if take <= 0:
            break
        out[chunk] = take
        left -= take
    return out
