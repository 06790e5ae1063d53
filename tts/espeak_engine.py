"""A CPU demo voice: eSpeak NG through the `espeakng-loader` wheel (docs/engine.md).

eSpeak NG is GPL-3.0, so it stays an optional extra (`pip install 'voxgate[espeak]'`);
nothing imports this module unless `engine.kind: espeak` is chosen. The library
is global, not thread-safe state, so ONE worker thread owns it: it takes requests
earliest-deadline first, synthesises each text chunk (a formant synthesiser runs
at a few hundred times real time on one core), resamples 22.05 kHz → 24 kHz and
hands the chunk to the event loop with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import heapq
import itertools
import logging
import math
import re
import threading

import numpy as np

from tts.engine import (
    SAMPLE_RATE,
    Engine,
    EngineError,
    PcmChunk,
    SynthesisRequest,
    SynthesisStream,
    WordTiming,
    WordTimings,
)

log = logging.getLogger(__name__)

MISSING_MESSAGE = (
    "the eSpeak NG demo voice needs the optional 'espeak' extra "
    "(pip install 'voxgate[espeak]', which installs espeakng-loader; eSpeak NG is GPL-3.0)"
)

# eSpeak voice per ISO 639-1 language (the languages GET /v1/voices offers); `auto` picks ru or en by script.
DEFAULT_VOICES = {
    "en": "en-us",
    "ru": "ru",
    "de": "de",
    "fr": "fr",
    "es": "es",
    "it": "it",
    "pt": "pt-br",
    "zh": "cmn",
    "ja": "ja",
    "ko": "ko",
}

# eSpeak's own pauses between sentences / clauses of one text (measured: ~300 / ~150 ms at 175 wpm).
SENTENCE_PAUSE_S = 0.25
CLAUSE_PAUSE_S = 0.12

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 1  # a phoneme event each phoneme: a pause phoneme ("_", "_:") ends the word before it
_EVENT_WORD, _EVENT_END, _EVENT_MSG_TERMINATED, _EVENT_PHONEME = 1, 5, 6, 7
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE = 1
_BUFFER_MS = 100
_CYRILLIC = re.compile(r"[\u0400-\u04FF]")
_LATIN = re.compile(r"[A-Za-z]")


class _Event(ctypes.Structure):
    """eSpeak NG's `espeak_EVENT` (speak_lib.h); `sample` counts from the start of the text's audio."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # 1-based, in characters (code points) of the text
        ("length", ctypes.c_int),  # the word's length in characters (word events)
        ("audio_position", ctypes.c_int),  # ms (rounded): `sample` is the exact figure
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),  # the phoneme's mnemonic (phoneme events)
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


def word_spans(events: list[tuple[int, int, int, int, bool]], total: int) -> list[tuple[int, int, int, int]]:
    """Each word event's (char_start, char_end, start, end) in eSpeak's samples, from the synth callback's
    events (type, text_position, length, sample, is_pause_phoneme). A word ends where the next word starts,
    where a pause phoneme or a clause's end follows it, or where the audio ends: never inside a pause."""
    spans = []
    for i, (kind, position, length, start, _) in enumerate(events):
        if kind != _EVENT_WORD or length <= 0:
            continue
        end = total
        for later_kind, _, _, sample, pause in events[i + 1 :]:
            boundary = later_kind in (_EVENT_WORD, _EVENT_END, _EVENT_MSG_TERMINATED) or pause
            if boundary and sample > start:
                end = sample
                break
        spans.append((position - 1, position - 1 + length, start, min(end, total)))
    return spans


def espeak_available() -> bool:
    """Whether the optional `espeakng-loader` package can be imported."""
    try:
        import espeakng_loader  # noqa: F401
    except ImportError:
        return False
    return True


def language_of(text: str) -> str:
    """`ru` when the text is mostly Cyrillic, else `en` (the `auto` rule)."""
    return "ru" if len(_CYRILLIC.findall(text)) > len(_LATIN.findall(text)) else "en"


def resample(x: np.ndarray, src_rate: int, dst_rate: int, taps: int = 16) -> np.ndarray:
    """Band-limited polyphase resampling with a Hann-windowed sinc (enough for a demo voice)."""
    if src_rate == dst_rate or len(x) == 0:
        return x.astype(np.float32, copy=False)
    g = math.gcd(src_rate, dst_rate)
    up, down = dst_rate // g, src_rate // g
    table = _polyphase_table(up, down, taps)
    offsets = np.arange(-taps // 2 + 1, taps // 2 + 1)
    padded = np.pad(x.astype(np.float32, copy=False), (taps, taps))
    n_out = len(x) * up // down
    out = np.empty(n_out, dtype=np.float32)
    for start in range(0, n_out, 16384):  # blocks bound the (n, taps) temporaries
        pos = np.arange(start, min(start + 16384, n_out)) * down
        base, phase = pos // up, pos % up
        window = padded[base[:, None] + (offsets + taps)[None, :]]
        out[start : start + len(pos)] = np.einsum("ij,ij->i", window, table[phase])
    return out


def _closing_pause_s(text: str) -> float:
    """The pause eSpeak makes after a sentence or clause inside one text; chunks are spoken one by one."""
    tail = text.rstrip().rstrip("\"')]»”")
    if tail.endswith((".", "!", "?", "…")):
        return SENTENCE_PAUSE_S
    if tail.endswith((",", ";", ":", "—")):
        return CLAUSE_PAUSE_S
    return 0.0


def _trim_leading_silence(pcm16: np.ndarray, rate: int, keep_ms: float = 5.0) -> np.ndarray:
    """eSpeak opens each text with 10-40 ms of silence: that is latency, not speech."""
    loud = np.flatnonzero(np.abs(pcm16) > 64)
    if not len(loud):
        return pcm16
    return pcm16[max(0, loud[0] - int(rate * keep_ms / 1000)) :]


@functools.lru_cache(maxsize=8)
def _polyphase_table(up: int, down: int, taps: int) -> np.ndarray:
    """Filter taps for each of the `up` output phases, normalised to unity gain at DC."""
    cutoff = min(1.0, up / down)
    offsets = np.arange(-taps // 2 + 1, taps // 2 + 1)
    dist = (np.arange(up) / up)[:, None] - offsets[None, :]
    h = cutoff * np.sinc(cutoff * dist) * (0.5 + 0.5 * np.cos(np.pi * dist / (taps / 2)))
    return (h / h.sum(axis=1, keepdims=True)).astype(np.float32)


def to_output_sample(sample: int, trimmed: int, rate: int) -> int:
    """An eSpeak sample index in the engine's output: the leading silence cut, resampled to SAMPLE_RATE."""
    return max(0, sample - trimmed) * SAMPLE_RATE // rate


def _word_timings(events, total: int, trimmed: int, rate: int, out_len: int) -> WordTimings:
    words = tuple(
        WordTiming(
            c0, c1, min(to_output_sample(s0, trimmed, rate), out_len), min(to_output_sample(s1, trimmed, rate), out_len)
        )
        for c0, c1, s0, s1 in word_spans(events, total)
    )
    return WordTimings(words, "engine")


class _Library:
    """The eSpeak NG shared library; used from the worker thread only."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError as exc:
            raise EngineError("engine_unavailable", MISSING_MESSAGE) from exc
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self.sample_rate = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, _BUFFER_MS, espeakng_loader.get_data_path().encode(), _INITIALIZE_PHONEME_EVENTS
        )
        if self.sample_rate <= 0:
            raise EngineError("engine_unavailable", f"eSpeak NG failed to initialise (code {self.sample_rate})")
        self._lib = lib
        self._pieces: list[np.ndarray] = []
        self.events: list[tuple[int, int, int, int, bool]] = []  # the last text's (see word_spans)
        self._abort = lambda: False
        self._callback = _CALLBACK(self._on_audio)  # kept alive: the library holds the pointer
        lib.espeak_SetSynthCallback(self._callback)
        self._voice: str | None = None

    def _on_audio(self, wav, n: int, events) -> int:
        if n > 0 and wav:
            self._pieces.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        i = 0
        while events and events[i].type != 0:  # the list ends with espeakEVENT_LIST_TERMINATED
            e = events[i]
            pause = e.type == _EVENT_PHONEME and e.id.startswith(b"_")
            self.events.append((e.type, e.text_position, e.length, e.sample, pause))
            i += 1
        return 1 if self._abort() else 0  # 1 tells eSpeak to stop this text

    def speak(self, text: str, voice: str, rate_wpm: int, abort) -> np.ndarray | None:
        """Int16 PCM at `sample_rate` for `text`, or None when `abort()` became true."""
        if voice != self._voice:
            if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise EngineError("unknown_voice", f"eSpeak NG has no voice {voice!r}")
            self._voice = voice
            self._lib.espeak_SetParameter(_PARAM_RATE, rate_wpm, 0)
        self._pieces, self.events, self._abort = [], [], abort
        data = text.encode("utf-8") + b"\0"
        code = self._lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if abort():
            return None
        if code != 0:
            raise EngineError("internal", f"eSpeak NG synthesis failed (code {code})")
        return np.concatenate(self._pieces) if self._pieces else np.zeros(0, np.int16)


class EspeakEngine(Engine):
    """eSpeak NG on one worker thread; one `PcmChunk` per text chunk (it is that fast)."""

    name = "espeak"

    def __init__(self, voices: dict[str, str] | None = None, rate_wpm: int = 175, max_queued: int = 1024):
        if not espeak_available():
            raise EngineError("engine_unavailable", MISSING_MESSAGE)
        self.language_voices = dict(DEFAULT_VOICES if voices is None else voices)
        self.rate_wpm = rate_wpm
        self.max_queued = max_queued
        self._jobs: list[tuple[float, int, SynthesisStream | None]] = []  # heap by deadline
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._cancelled: set[int] = set()
        self._active = 0
        self._current: SynthesisStream | None = None  # the request inside eSpeak now
        self._aborted = 0  # requests stopped in the middle of synthesis
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    @classmethod
    def from_config(cls, config) -> "EspeakEngine":
        """From the gateway's `Config`: `engine.max_queued`; the language picks the voice."""
        return cls(max_queued=config.engine.max_queued)

    async def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="espeak-worker", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self._start_error is not None:
            raise self._start_error

    async def close(self) -> None:
        if self._thread is None:
            return
        with self._wake:
            open_streams = [stream for _, _, stream in self._jobs if stream is not None]
            if self._current is not None:
                open_streams.append(self._current)
            for stream in open_streams:
                self._cancelled.add(stream.request.request_id)
            heapq.heappush(self._jobs, (float("-inf"), next(self._order), None))  # stop sentinel first
            self._wake.notify()
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        for stream in open_streams:  # their consumers must not wait forever
            stream._fail(EngineError("internal", "the eSpeak engine was closed"))

    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        if self._thread is None:
            raise EngineError("internal", "EspeakEngine.start() was not awaited")
        if not request.text.strip():
            stream = SynthesisStream(request, self)
            stream._deliver(PcmChunk(np.zeros(0, np.float32), 0, True))
            return stream
        with self._wake:
            if len(self._jobs) >= self.max_queued:
                raise EngineError("overloaded", "the eSpeak queue is full")
            stream = SynthesisStream(request, self)
            heapq.heappush(self._jobs, (request.deadline, next(self._order), stream))
            self._wake.notify()
        return stream

    def voices(self) -> list[str]:
        return []

    def stats(self) -> dict:
        return {"queued": len(self._jobs), "active": self._active, "aborted": self._aborted}

    def _cancel(self, stream: SynthesisStream) -> None:
        with self._wake:
            self._cancelled.add(stream.request.request_id)

    def _update_deadline(self, stream: SynthesisStream, deadline: float) -> None:
        with self._wake:
            for i, (_, order, queued) in enumerate(self._jobs):
                if queued is stream:
                    self._jobs[i] = (deadline, order, stream)
                    heapq.heapify(self._jobs)
                    return

    def voice_for(self, request: SynthesisRequest) -> str:
        language = request.language if request.language != "auto" else language_of(request.text)
        voice = self.language_voices.get(language)
        if voice is None:
            raise EngineError(
                "unsupported_language", f"the eSpeak demo voice speaks {sorted(self.language_voices)}, not {language!r}"
            )
        return voice

    # -- worker thread ---------------------------------------------------
    def _run(self) -> None:
        try:
            lib = _Library()
        except BaseException as exc:  # reported by start()
            self._start_error = exc
            self._ready.set()
            return
        self._ready.set()
        while True:
            with self._wake:
                while not self._jobs:
                    self._wake.wait()
                _, _, stream = heapq.heappop(self._jobs)
                if stream is None:
                    return
                rid = stream.request.request_id
                if rid in self._cancelled:
                    self._cancelled.discard(rid)
                    continue
                self._active = 1
                self._current = stream
            try:
                self._speak(lib, stream)
            finally:
                with self._wake:
                    self._active = 0
                    self._current = None
                    self._cancelled.discard(rid)

    def _speak(self, lib: _Library, stream: SynthesisStream) -> None:
        rid = stream.request.request_id
        try:
            voice = self.voice_for(stream.request)
            pcm16 = lib.speak(stream.request.text, voice, self.rate_wpm, lambda: rid in self._cancelled)
        except EngineError as exc:
            self._hand_over(stream._fail, exc)
            return
        except Exception as exc:  # never let one text kill the worker
            log.exception("eSpeak synthesis failed")
            self._hand_over(stream._fail, EngineError("internal", f"eSpeak NG failed: {exc}"))
            return
        if pcm16 is None:  # cancelled; the stream already ended on the consumer side
            self._aborted += 1
            return
        trimmed = _trim_leading_silence(pcm16, lib.sample_rate)
        pcm = resample(trimmed.astype(np.float32) / 32768.0, lib.sample_rate, SAMPLE_RATE)
        words = _word_timings(lib.events, len(pcm16), len(pcm16) - len(trimmed), lib.sample_rate, len(pcm))
        pause = _closing_pause_s(stream.request.text)
        if pause:
            pcm = np.concatenate([pcm, np.zeros(int(pause * SAMPLE_RATE), np.float32)])
        self._hand_over(stream._deliver, PcmChunk(pcm, 0, True, words=words))

    def _hand_over(self, fn, arg) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, arg)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass
