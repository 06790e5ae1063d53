"""The public face of the speech engine (docs/engine.md).

An `Engine` turns a `SynthesisRequest` into a `SynthesisStream` of float32
PCM chunks at 24 kHz. Engines run their work off the event loop (a worker
thread per device) and hand results back with `loop.call_soon_threadsafe`;
the stream is the only object the two sides share, and it only ever carries
immutable chunks, so the worker can later move into its own process.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import AsyncIterator

import numpy as np

SAMPLE_RATE = 24_000
CODEC_FRAME_SAMPLES = 1920  # one 80 ms codec frame at 24 kHz

_request_ids = itertools.count(1)


class EngineError(Exception):
    """A request-level failure with a stable protocol code (docs/protocol.md)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling for the talker and the code predictor; defaults from generation_config.json."""

    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    greedy: bool = False
    seed: int | None = None


@dataclass(frozen=True)
class SynthesisRequest:
    """One text chunk to speak.

    `deadline` is a `time.monotonic()` instant by which the playout needs this
    request's first audio; engines serve the earliest deadline first.
    """

    text: str
    voice: str = "default"
    language: str = "auto"
    instruct: str | None = None
    sampling: SamplingSettings = SamplingSettings()
    deadline: float = field(default_factory=time.monotonic)
    request_id: int = field(default_factory=lambda: next(_request_ids))
    tag: str = ""  # free text for logs and traces (session/turn/chunk)


@dataclass(frozen=True)
class VoiceClone:
    """A voice cloned from a reference recording (Qwen3-TTS Base checkpoints).

    `ref_audio` is the file's bytes (WAV); `ref_text` its transcript, needed for the
    in-context mode (the default, closest to the reference); `x_vector_only` uses the
    speaker embedding alone (no transcript; faster prompts, less like the reference).
    """

    name: str
    ref_audio: bytes
    ref_text: str | None = None
    x_vector_only: bool = False

    @property
    def kind(self) -> str:
        return "clone_xvector" if self.x_vector_only else "clone_icl"


WORD_SOURCES = ("engine", "aligner")  # where an engine's word timings come from (the gateway's own guess: "estimate")


@dataclass(frozen=True)
class WordTiming:
    """One word the engine spoke: `text[char_start:char_end]` of the request's text, heard from sample
    `start` to sample `end` of the request's audio (at the engine's rate, 0 = the request's first sample).
    `end` is where the word's speech ends, before any pause that follows it."""

    char_start: int
    char_end: int
    start: int
    end: int


@dataclass(frozen=True)
class WordTimings:
    """The words whose timings became known with a chunk (optional: engines without timings send none).
    Words come in order, each once per request, possibly spread over several chunks of the request."""

    words: tuple[WordTiming, ...]
    source: str = "engine"  # one of WORD_SOURCES


@dataclass(frozen=True)
class PcmChunk:
    """A piece of a request's audio: float32 mono at `SAMPLE_RATE`.

    `frame_index` is the index of the chunk's first codec frame (80 ms) within
    the request; `is_last` marks the request's final chunk (it may be empty).
    """

    pcm: np.ndarray
    frame_index: int
    is_last: bool
    text_end: int | None = None  # turn mode: the turn's text [0, text_end) is spoken once this chunk has played
    words: WordTimings | None = None  # word timings known with this chunk (None: this engine gives none)

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


_END = object()


class _Sink:
    """Stands in for a forwarded stream's queue (`SynthesisStream.forward`)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def put_nowait(self, item) -> None:
        self.fn(None if item is _END else item)


class SynthesisStream:
    """Async iterator over a request's `PcmChunk`s.

    The engine side calls `deliver` (from the event loop; worker threads go
    through `loop.call_soon_threadsafe`). The consumer iterates
    and may `cancel()`; the engine frees the request's slot at its next step.
    """

    def __init__(self, request: SynthesisRequest, engine: "Engine"):
        self.request = request
        self._engine = engine
        self._queue: asyncio.Queue = asyncio.Queue()
        self._done = False
        self.cancelled = False
        self.cancel_error: BaseException | None = None  # why the consumer cancelled, when it said (its watchdog)
        self._unread = 0  # samples delivered that the iterator has not handed out yet
        self._room: asyncio.Future | None = None  # an engine waiting in `_wait_for_room`
        self._room_limit = 0
        self._forwarded = False
        self.submitted_at = time.monotonic()
        self.first_audio_at: float | None = None

    # -- consumer side -------------------------------------------------
    def __aiter__(self) -> AsyncIterator[PcmChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[PcmChunk]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            self._unread -= len(item.pcm)
            if self._room is not None and self._unread <= self._room_limit:
                self._wake_engine()
            yield item

    def cancel(self, error: BaseException | None = None) -> None:
        """Stop this request; idempotent. Iteration ends at once, raising `error` when one is given
        (the consumer gave up on the request, e.g. its stall watchdog)."""
        if self.cancelled or self._done:
            return
        self.cancelled = True
        self.cancel_error = error
        self._engine._cancel(self)
        if error is not None:
            self._queue.put_nowait(error)
        self._finish()

    def set_deadline(self, deadline: float) -> None:
        """Tell the engine when the first audio (or the next audio) is needed."""
        self._engine._update_deadline(self, deadline)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def unread_samples(self) -> int:
        """Audio delivered that the consumer has not read yet (a consumer pacing its reads keeps it waiting)."""
        return self._unread

    def forward(self, sink) -> None:
        """Hand every item to `sink(item)` instead of the iterator: each `PcmChunk`, an exception when the
        stream fails, then `None` at its end. The engine service reads thousands of streams this way without a
        task each; a forwarded stream is not iterated."""
        self._forwarded = True
        pending, self._queue = self._queue, _Sink(sink)
        while not pending.empty():
            self._queue.put_nowait(pending.get_nowait())

    # -- engine side ---------------------------------------------------
    async def _wait_for_room(self, limit: int) -> None:
        """Returns once at most `limit` samples wait unread: an engine that reads its audio from a socket pauses
        here, and the sender meets TCP backpressure instead of this queue growing. At once when forwarded."""
        while self._unread > limit and not self._done and not self._forwarded:
            self._room, self._room_limit = asyncio.get_running_loop().create_future(), limit
            await self._room

    def _wake_engine(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)

    def deliver(self, item: PcmChunk | BaseException) -> None:
        """The engine's one way to its caller (on the event loop): a chunk (the stream ends after its last one),
        or the error that ends the stream. Anything after the end, or after a cancel, is dropped."""
        if self._done:
            return
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            self._finish()
            return
        if self.first_audio_at is None and len(item.pcm):
            self.first_audio_at = time.monotonic()
        self._unread += len(item.pcm)
        self._queue.put_nowait(item)
        if item.is_last:
            self._finish()

    def _deliver(self, chunk: PcmChunk) -> None:  # the older engines' spelling of `deliver`
        self.deliver(chunk)

    def _fail(self, error: BaseException) -> None:
        self.deliver(error)

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._queue.put_nowait(_END)
            self._wake_engine()


class TurnStream(SynthesisStream):
    """Turn mode: one generation for a whole agent turn, fed text as it arrives (`append`, then
    `finish`). The request's `text` is the first piece (may be empty). Chunks carry `text_end`.

    The engine pauses the stream (no step, no cost) while its next text has not arrived, holds
    end-of-speech until the text is finished, and ends the stream after the last word's audio.
    """

    def __init__(self, request: SynthesisRequest, engine: "Engine"):
        super().__init__(request, engine)
        self.text = request.text
        self.finished = False
        self.first_text_at = time.monotonic() if request.text.strip() else None

    def append(self, text: str) -> None:
        if self.finished:
            raise EngineError("bad_request", "the turn's text is already finished")
        if not isinstance(text, str):
            raise EngineError("bad_request", "turn text must be a string")
        if self.cancelled or self._done or not text:
            return  # a cancelled turn (barge-in) drops late text silently
        if self.first_text_at is None and text.strip():
            self.first_text_at = time.monotonic()
        self.text += text
        self._engine._turn_append(self, text)

    def finish(self) -> None:
        """No more text: the stream runs to its natural end."""
        if self.finished:
            return
        self.finished = True
        if not (self.cancelled or self._done):
            self._engine._turn_finish(self)


class Engine(ABC):
    """A speech engine; see the module docstring."""

    sample_rate: int = SAMPLE_RATE
    name: str = "engine"

    async def start(self) -> None:
        """Load models and start workers; called once on the event loop."""

    async def close(self) -> None:
        """Cancel everything and stop workers."""

    @abstractmethod
    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        """Queue a request; raises `EngineError('overloaded', …)` when full."""

    def voices(self) -> list[str]:
        """Speaker names this engine can speak with (empty: any name works)."""
        return []

    # Turn mode (docs/concepts.md): engines that can feed one generation with a turn's text as it comes.
    supports_turns: bool = False

    def open_turn(self, request: SynthesisRequest) -> TurnStream:
        """Open a turn; raises `EngineError('unsupported_mode', …)` where the engine (or the voice) has no
        turn mode (the caller falls back to sentence mode), `overloaded` when full."""
        raise EngineError("unsupported_mode", f"the {self.name} engine has no turn mode; use sentence mode")

    def turn_supported(self, voice: str) -> str | None:
        """None when `voice` can speak in turn mode here, else why not (the caller uses sentence mode)."""
        return None if self.supports_turns else f"the {self.name} engine has no turn mode"

    # Cloned voices (Base checkpoints). Engines that cannot clone refuse with a stable code.
    can_clone: bool = False

    async def add_voice(self, voice: VoiceClone) -> dict:
        """Register (or replace) a cloned voice; returns its description (name, kind, ...).
        Raises EngineError: `bad_audio`, `bad_voice`, `unsupported_voice`."""
        raise EngineError(
            "unsupported_voice", f"the {self.name} engine cannot clone voices (it needs a Qwen3-TTS Base checkpoint)"
        )

    def remove_voice(self, name: str) -> bool:
        """Forget a cloned voice; False when there was none by that name."""
        return False

    def cloned_voices(self) -> list[dict]:
        """The registered cloned voices' descriptions."""
        return []

    def stats(self) -> dict:
        """Counters for /metrics: at least `queued` and `active`."""
        return {"queued": 0, "active": 0}

    def health(self) -> str | None:
        """None while the engine serves; else why it cannot (its worker died or hangs). The gateway then
        answers /readyz with 503 and refuses new sessions with `engine_unavailable`."""
        return None

    # Hooks the stream calls; engines override what they support.
    def _cancel(self, stream: SynthesisStream) -> None:
        pass

    def _update_deadline(self, stream: SynthesisStream, deadline: float) -> None:
        pass

    def _turn_append(self, stream: TurnStream, text: str) -> None:
        pass

    def _turn_finish(self, stream: TurnStream) -> None:
        pass
