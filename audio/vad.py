"""Voice activity detection for many calls at once: one model pass per window for all of them.

Each call owns a `VadStream`: it is fed the caller's 16 kHz PCM as it
arrives, cuts it into the backend's windows and keeps that call's recurrent
model state. A `VadPool` wakes once per window period, takes every stream's
ready windows and runs ONE model call for all of them on its worker thread
(the event loop never runs the model), then hands each stream its
probabilities; a small per-stream state machine (`SpeechDetector`) turns
them into `started` / `stopped` events.

Backends share one interface (`VadBackend`):
* `silero` — Silero VAD v5 (the ONNX file the `silero-vad` wheel ships; run
  with onnxruntime, one intra-op thread). The per-call LSTM state and the
  64-sample context are passed in and out explicitly, so N calls stack into
  one batch.
* `webrtc` — the WebRTC VAD (`webrtcvad-wheels`): a few microseconds per
  window, far cheaper and far less accurate (it fires on music and noise).

The `silero_vad` Python package is never imported: importing it sets torch's
global thread count to 1 (`torch.set_num_threads(1)` at import), which would
slow the TTS engine sharing the process. Only its data file is located.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

log = logging.getLogger("voxgate.vad")

SAMPLE_RATE = 16000  # every stream is 16 kHz mono


class VadUnavailable(RuntimeError):
    """The chosen backend's package is not installed (install the `vad` extra)."""


# ---------------------------------------------------------------- backends
class VadBackend(Protocol):
    name: str
    window: int  # samples per window at 16 kHz

    def new_state(self) -> object: ...

    def infer(self, windows: np.ndarray, states: list) -> tuple[np.ndarray, list]:
        """float32 windows [N, window] of N different calls and their states → speech probability [N], new states."""


def silero_model_path() -> str:
    """The ONNX model inside the installed `silero-vad` wheel, found without importing the package."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.origin:
        raise VadUnavailable("barge_in/vad needs the silero-vad wheel: pip install 'voxgate[vad]'")
    path = os.path.join(os.path.dirname(spec.origin), "data", "silero_vad.onnx")
    if not os.path.exists(path):
        raise VadUnavailable(f"the silero-vad wheel has no model at {path}")
    return path


class SileroBackend:
    """Silero VAD v5, batched: one `session.run` for N calls' windows with their stacked states."""

    name = "silero"
    window = 512  # 32 ms
    context = 64  # the model sees the last 64 samples of the previous window too

    def __init__(self, model_path: str | None = None):
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise VadUnavailable("the silero VAD backend needs onnxruntime: pip install 'voxgate[vad]'") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one core's worth per pass; the pool's thread is the only caller
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            model_path or silero_model_path(), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)

    def new_state(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((2, 128), np.float32), np.zeros(self.context, np.float32)

    def infer(self, windows: np.ndarray, states: list) -> tuple[np.ndarray, list]:
        n = len(windows)
        x = np.empty((n, self.context + self.window), np.float32)
        rnn = np.empty((2, n, 128), np.float32)
        for i, (h, ctx) in enumerate(states):
            x[i, : self.context] = ctx
            rnn[:, i] = h
        x[:, self.context :] = windows
        out, rnn_next = self._session.run(None, {"input": x, "state": rnn, "sr": self._sr})
        new_states = [(rnn_next[:, i].copy(), x[i, -self.context :].copy()) for i in range(n)]
        return out.reshape(n).astype(np.float32), new_states


class WebrtcBackend:
    """The WebRTC VAD: a cheap 0/1 per 30 ms window; `aggressiveness` 0 (lenient) … 3 (strict)."""

    name = "webrtc"
    window = 480  # 30 ms, one of the three frame sizes it accepts

    def __init__(self, aggressiveness: int = 3):
        try:
            import webrtcvad
        except ImportError as exc:
            raise VadUnavailable("the webrtc VAD backend needs webrtcvad-wheels: pip install 'voxgate[vad]'") from exc
        self._webrtcvad = webrtcvad
        self.aggressiveness = aggressiveness

    def new_state(self):
        return self._webrtcvad.Vad(self.aggressiveness)

    def infer(self, windows: np.ndarray, states: list) -> tuple[np.ndarray, list]:
        pcm = np.clip(windows * 32768.0, -32768, 32767).astype("<i2")
        probs = np.fromiter(
            (1.0 if vad.is_speech(row.tobytes(), SAMPLE_RATE) else 0.0 for vad, row in zip(states, pcm)),
            dtype=np.float32,
            count=len(pcm),
        )
        return probs, states


def make_backend(kind: str, **options) -> VadBackend:
    if kind == "silero":
        return SileroBackend(**options)
    if kind == "webrtc":
        return WebrtcBackend(**options)
    raise ValueError(f"unknown VAD backend {kind!r} (silero | webrtc)")


# ---------------------------------------------------------------- per-call decisions
@dataclass
class SpeechEvent:
    state: str  # started | stopped
    sample: int  # position in the call's 16 kHz input: onset (started) or end of the last speech window (stopped)
    speech_ms: float  # how long the speech had lasted when the event was decided (stopped: its whole length)


class SpeechDetector:
    """Hysteresis over window probabilities.

    `started` is decided once `onset_ms` of consecutive speech windows were
    seen and is dated at the first of them; `stopped` once `silence_ms` of
    windows fell below `end_threshold`, dated at the end of the last speech
    window. A lone loud window (a click) therefore starts nothing.
    """

    def __init__(
        self,
        window: int,
        threshold: float = 0.5,
        end_threshold: float | None = None,
        onset_ms: float = 64.0,
        silence_ms: float = 300.0,
    ):
        self.window = window
        self.threshold = threshold
        self.end_threshold = threshold - 0.15 if end_threshold is None else end_threshold
        window_ms = window * 1000.0 / SAMPLE_RATE
        self._onset_windows = max(1, int(np.ceil(onset_ms / window_ms - 1e-9)))
        self._silence_windows = max(1, int(np.ceil(silence_ms / window_ms - 1e-9)))
        self.speaking = False
        self._run = 0  # consecutive windows that argue for a change of state
        self._candidate = 0  # sample where the current run of speech began
        self._last_speech_end = 0
        self._onset = 0

    def feed(self, prob: float, end_sample: int) -> SpeechEvent | None:
        """One window's probability; `end_sample` is where the window ends in the stream."""
        start = end_sample - self.window
        if not self.speaking:
            if prob >= self.threshold:
                if self._run == 0:
                    self._candidate = start
                self._run += 1
                if self._run >= self._onset_windows:
                    self.speaking, self._run = True, 0
                    self._onset, self._last_speech_end = self._candidate, end_sample
                    return SpeechEvent(
                        "started", self._candidate, (end_sample - self._candidate) * 1000.0 / SAMPLE_RATE
                    )
            else:
                self._run = 0
            return None
        if prob >= self.end_threshold:
            self._run = 0
            self._last_speech_end = end_sample
            return None
        self._run += 1
        if self._run >= self._silence_windows:
            self.speaking, self._run = False, 0
            return SpeechEvent(
                "stopped", self._last_speech_end, (self._last_speech_end - self._onset) * 1000.0 / SAMPLE_RATE
            )
        return None

    def restart(self) -> None:
        """After a cut in the audio: a run of speech windows in progress does not carry over it."""
        if not self.speaking:
            self._run = 0

    def speech_ms(self, end_sample: int) -> float:
        """How long the current speech has lasted at `end_sample` (0 when silent)."""
        return (end_sample - self._onset) * 1000.0 / SAMPLE_RATE if self.speaking else 0.0


# ---------------------------------------------------------------- streams and the pool
class VadStream:
    """One call's caller audio → windows → (in the pool) probabilities → speech events.

    `on_window(stream, prob, end_sample)` sees every probability (barge-in
    timing needs the speech length while it grows); `on_event(stream, event)`
    sees `started` / `stopped`. Both run on the event loop.
    """

    def __init__(
        self,
        pool: "VadPool",
        detector: SpeechDetector,
        on_event: Callable[["VadStream", SpeechEvent], None] | None,
        on_window: Callable[["VadStream", float, int], None] | None,
        max_backlog_ms: float,
    ):
        self.pool = pool
        self.detector = detector
        self.on_event = on_event
        self.on_window = on_window
        self.state = pool.backend.new_state()
        self._window = pool.backend.window
        self._max_backlog = max(1, int(max_backlog_ms * SAMPLE_RATE / 1000) // self._window)
        self._buf = np.zeros(0, np.float32)
        self._ready: deque[np.ndarray] = deque()
        self.samples_in = 0  # samples pushed so far: the stream's clock
        self.samples_done = 0  # samples whose windows the model has judged
        self.dropped_windows = 0  # windows skipped because the pool fell behind
        self.last_prob = 0.0
        self.busy = False  # a pass holding this stream's state is running
        self.reset_pending = False  # audio was dropped: the next pass starts from a fresh model state
        self.closed = False

    def push(self, pcm: np.ndarray) -> None:
        """16 kHz mono audio, int16 or float32 in [-1, 1]."""
        if self.closed or not len(pcm):
            return
        pcm = np.asarray(pcm)
        if pcm.dtype == np.int16:
            pcm = pcm.astype(np.float32) / 32768.0
        else:
            pcm = pcm.astype(np.float32, copy=False)
        self.samples_in += len(pcm)
        buf = np.concatenate((self._buf, pcm)) if len(self._buf) else pcm
        w = self._window
        n = len(buf) // w
        for i in range(n):
            self._ready.append(buf[i * w : (i + 1) * w])
        self._buf = buf[n * w :].copy()
        if len(self._ready) > self._max_backlog:
            # The pool is behind: judge the newest audio and count the rest. The model must not see the
            # jump (a cut in the middle of music reads as speech): it restarts from a fresh state.
            while len(self._ready) > self._max_backlog:
                self._ready.popleft()
                self.dropped_windows += 1
                self.samples_done += w
            self.reset_pending = True
            log.warning("VAD fell behind: %d windows of one call dropped so far", self.dropped_windows)
        if n:
            self.pool._wake()

    def _apply(self, prob: float) -> None:
        self.samples_done += self._window
        self.last_prob = prob
        if self.on_window is not None:
            self.on_window(self, prob, self.samples_done)
        event = self.detector.feed(prob, self.samples_done)
        if event is not None and self.on_event is not None:
            self.on_event(self, event)

    def close(self) -> None:
        self.closed = True
        self._ready.clear()
        self.pool._streams.discard(self)


class VadPool:
    """All calls' VAD on one worker thread: one pass per window period, one model call per pass.

    A pass takes every stream's ready windows; a stream that has k windows
    waiting (it arrived in a burst) contributes to k consecutive model calls
    within the pass, since its window j+1 needs the state left by window j.
    """

    def __init__(self, backend: VadBackend, max_backlog_ms: float = 500.0):
        self.backend = backend
        self.max_backlog_ms = max_backlog_ms
        self._streams: set[VadStream] = set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"vad-{backend.name}")
        self._task: asyncio.Task | None = None
        self._wakeup: asyncio.Event | None = None
        self.period = backend.window / SAMPLE_RATE
        # counters (metrics, bench)
        self.passes = 0
        self.model_calls = 0
        self.windows = 0
        self.thread_cpu_s = 0.0  # CPU time the worker spent in passes
        self._lock = threading.Lock()

    def open(self, on_event=None, on_window=None, **detector_options) -> VadStream:
        stream = VadStream(
            self, SpeechDetector(self.backend.window, **detector_options), on_event, on_window, self.max_backlog_ms
        )
        self._streams.add(stream)
        return stream

    @property
    def streams(self) -> int:
        return len(self._streams)

    # -- one pass (the worker's part is pure: arrays in, arrays out)
    def _collect(self) -> list[tuple[VadStream, list[np.ndarray], object]]:
        work = []
        for stream in self._streams:
            if stream._ready and not stream.busy and not stream.closed:
                if stream.reset_pending:
                    stream.state = self.backend.new_state()
                    stream.detector.restart()
                    stream.reset_pending = False
                windows = list(stream._ready)
                stream._ready.clear()
                stream.busy = True
                work.append((stream, windows, stream.state))
        return work

    def _infer(self, jobs: list[tuple[list[np.ndarray], object]]) -> tuple[list[list[float]], list[object]]:
        """Worker thread: judge every job's windows, window j of all jobs in one model call."""
        t0 = time.thread_time()
        states = [state for _, state in jobs]
        probs: list[list[float]] = [[] for _ in jobs]
        depth = max((len(w) for w, _ in jobs), default=0)
        for j in range(depth):
            idx = [i for i, (w, _) in enumerate(jobs) if len(w) > j]
            batch = np.stack([jobs[i][0][j] for i in idx])
            out, new = self.backend.infer(batch, [states[i] for i in idx])
            for k, i in enumerate(idx):
                states[i] = new[k]
                probs[i].append(float(out[k]))
            with self._lock:
                self.model_calls += 1
                self.windows += len(idx)
        with self._lock:
            self.thread_cpu_s += time.thread_time() - t0
        return probs, states

    def _finish(self, work, probs, states) -> None:
        for (stream, _, _), p, state in zip(work, probs, states):
            stream.busy = False
            if stream.closed:
                continue
            stream.state = state
            for prob in p:
                stream._apply(prob)
        self.passes += 1

    def run_pass(self) -> int:
        """One pass on the calling thread (bench, tests); returns the windows judged."""
        work = self._collect()
        if not work:
            return 0
        probs, states = self._infer([(w, s) for _, w, s in work])
        self._finish(work, probs, states)
        return sum(len(p) for p in probs)

    # -- the loop's part
    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def start(self) -> None:
        if self._task is None:
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="vad-pool")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Gather for the rest of this window period, so one pass serves every call whose window filled.
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at = max(loop.time(), next_at) + self.period
            work = self._collect()
            if not work:
                continue
            try:
                probs, states = await loop.run_in_executor(self._executor, self._infer, [(w, s) for _, w, s in work])
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad pass must not end VAD for every call
                log.exception("VAD pass failed; its windows are skipped")
                for stream, windows, _ in work:
                    stream.busy = False
                    stream.samples_done += len(windows) * stream._window
                continue
            self._finish(work, probs, states)
            if any(s._ready for s in self._streams):
                self._wakeup.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for stream in list(self._streams):
            stream.close()
        self._executor.shutdown(wait=False)
