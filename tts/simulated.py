"""SimulatedEngine: no model, one shared simulated device (docs/engine.md).

Audio is a deterministic voiced tone pattern, `ms_per_char` of audio per
character. The device produces at most `capacity_x` audio-seconds per wall
second in total; each active request runs at most at 1/`stream_rtf` real
time. Capacity goes to requests in scheduling order (earliest deadline first,
or first come first served), so under load the requests at the back of the
order slow down or stall — queueing, latency and gaps appear as on a real GPU.
A request's first packet also waits `first_packet_ms` after admission.

It exists to load-test the gateway alone; it is not a stand-in for Qwen3.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np

from tts.engine import (
    CODEC_FRAME_SAMPLES,
    SAMPLE_RATE,
    Engine,
    EngineError,
    PcmChunk,
    SynthesisRequest,
    SynthesisStream,
    TurnStream,
)

STEP_S = 0.01  # device model resolution
STALL_S = 5.0  # requests waiting and no step for this long: the device counts as hung (health)
FAULTS = ("raise", "hang", "die")

log = logging.getLogger("voxgate.simulated")


@dataclass
class SimulatedSettings:
    first_packet_ms: float = 60.0
    capacity_x: float = 50.0
    ms_per_char: float = 70.0
    stream_rtf: float = 0.1
    packet_ms: float = 320.0
    first_packet_audio_ms: float = 160.0
    scheduling: str = "edf"  # edf | fcfs
    max_queued: int = 4096


class _Job:
    __slots__ = ("stream", "total", "generated", "emitted", "admitted_at", "deadline", "seq", "frame", "turn", "pauses")

    def __init__(self, stream: SynthesisStream, total: int, seq: int, turn: bool = False):
        self.stream = stream
        self.total = total  # samples
        self.generated = 0.0  # samples the device has produced
        self.emitted = 0  # samples delivered
        self.admitted_at: float | None = None
        self.deadline = stream.request.deadline
        self.seq = seq
        self.frame = 0
        self.turn = turn  # turn mode: `total` grows as words arrive; ends only once the text is finished
        self.pauses = 0

    @property
    def waiting_for_text(self) -> bool:
        return self.turn and not self.stream.finished and self.generated >= self.total

    @property
    def complete(self) -> bool:
        return self.generated >= self.total and not (self.turn and not self.stream.finished)


_TONE_PERIOD = 10 * SAMPLE_RATE  # every component below repeats exactly every 10 s
_tone_tables: dict[int, np.ndarray] = {}


def _tone_table(voice: int) -> np.ndarray:
    table = _tone_tables.get(voice)
    if table is None:
        t = np.arange(_TONE_PERIOD, dtype=np.float64) / SAMPLE_RATE
        # f0(t) = base + depth*sin(w t); the phase is its closed-form integral, so any cut is seamless.
        base, depth, w = 110.0 + voice * 15.0, 12.0, 2 * np.pi * 0.7
        phase = 2 * np.pi * (base * t + depth / w * (1.0 - np.cos(w * t)))
        voiced = 0.5 * np.sin(phase) + 0.25 * np.sin(2 * phase) + 0.12 * np.sin(3 * phase)
        syllables = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t) ** 2  # ~8 syllables per second
        table = _tone_tables[voice] = (0.3 * voiced * syllables).astype(np.float32)
    return table


def tone(start: int, count: int, seed: int) -> np.ndarray:
    """Deterministic voiced-speech-like audio for samples [start, start+count).

    Sliced from a precomputed periodic table: the simulated device must cost the
    gateway's process next to nothing, or it would distort load tests.
    """
    table = _tone_table(seed % 7)
    out = np.empty(count, dtype=np.float32)
    pos, offset = 0, start % _TONE_PERIOD
    while pos < count:
        n = min(count - pos, _TONE_PERIOD - offset)
        out[pos : pos + n] = table[offset : offset + n]
        pos, offset = pos + n, 0
    return out


class SimulatedEngine(Engine):
    name = "simulated"
    can_clone = True  # it stands in for a GPU engine in gateway tests: cloned voices speak its tone audio

    def __init__(self, settings: SimulatedSettings | None = None, clock=time.monotonic):
        self.settings = settings or SimulatedSettings()
        if self.settings.scheduling not in ("edf", "fcfs"):
            raise ValueError(f"scheduling must be edf or fcfs, not {self.settings.scheduling!r}")
        self.clock = clock
        self._jobs: list[_Job] = []
        self._by_stream: dict[int, _Job] = {}
        self._seq = 0
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self.audio_seconds = 0.0
        self.requests = 0
        self.step_failures = 0
        self._fault: tuple[str, float] | None = None  # injected by tests (inject_fault)
        self._dead: str | None = None  # why the device loop ended, if it ended on its own
        self._last_step = clock()
        self._busy_since: float | None = None  # a step in progress began then
        self.stall_after_s = STALL_S

    @classmethod
    def from_config(cls, sim) -> "SimulatedEngine":
        return cls(
            SimulatedSettings(**{k: getattr(sim, k) for k in SimulatedSettings.__dataclass_fields__ if hasattr(sim, k)})
        )

    async def start(self) -> None:
        if self._task is None:
            self._last_step = self.clock()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="simulated-device")
            self._task.add_done_callback(self._device_ended)

    # ------------------------------------------------------------ faults and health
    def inject_fault(self, kind: str, seconds: float = 3600.0) -> None:
        """The device's next step fails on purpose: `raise` (that step raises; the device goes on), `hang`
        (no step for `seconds`), `die` (the device loop ends, as a worker thread that dies would)."""
        if kind not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, not {kind!r}")
        self._fault = (kind, seconds)
        self._wake.set()

    def health(self) -> str | None:
        if self._dead:
            return self._dead
        now = self.clock()
        if self._busy_since is not None and now - self._busy_since > self.stall_after_s:
            return f"the engine step has not returned for {now - self._busy_since:.1f} s (hung)"
        if self._jobs and now - self._last_step > self.stall_after_s:
            return f"the engine made no step for {now - self._last_step:.1f} s with {len(self._jobs)} requests waiting"
        return None

    def _fail_all(self, error: EngineError) -> None:
        jobs, self._jobs, self._by_stream = self._jobs, [], {}
        for job in jobs:
            job.stream._fail(error)

    def _device_ended(self, task: asyncio.Task) -> None:
        if task.cancelled() and self._task is None:
            return  # close()
        exc = None if task.cancelled() else task.exception()
        self._dead = f"the engine worker stopped ({type(exc).__name__ if exc else 'cancelled'}: {exc})"
        log.error("%s; new sessions are refused with engine_unavailable", self._dead)
        self._fail_all(EngineError("engine_error", self._dead))

    async def close(self) -> None:
        for job in list(self._jobs):
            job.stream.cancel()
        task, self._task = self._task, None
        if task:
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled, or it had died already
                pass

    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        return self._open(SynthesisStream(request, self), turn=False)

    def _open(self, stream: SynthesisStream, turn: bool) -> SynthesisStream:
        if self._dead:
            raise EngineError("engine_unavailable", self._dead)
        if len(self._jobs) >= self.settings.max_queued:
            raise EngineError("overloaded", f"engine queue full ({self.settings.max_queued} requests)")
        self._seq += 1
        job = _Job(stream, 0, self._seq, turn)
        job.total = self._samples(stream)
        self._jobs.append(job)
        self._by_stream[id(stream)] = job
        self.requests += 1
        self._wake.set()
        return stream

    # ------------------------------------------------------------ turn mode
    supports_turns = True

    def open_turn(self, request: SynthesisRequest) -> TurnStream:
        """A turn: audio for each whole word as it arrives (the unfinished last word waits, as the Qwen3
        turn tokenizer holds it); a stream waiting for text takes no device time."""
        return self._open(TurnStream(request, self), turn=True)

    @property
    def _samples_per_char(self) -> float:
        return self.settings.ms_per_char * SAMPLE_RATE / 1000

    def _samples(self, stream: SynthesisStream) -> int:
        text = stream.request.text if not isinstance(stream, TurnStream) else stream.text
        if isinstance(stream, TurnStream) and not stream.finished:
            cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"))
            text = text[:cut] if cut >= 0 else ""  # whole words only
        return int(round(len(text.strip()) * self._samples_per_char))

    def _turn_append(self, stream: TurnStream, text: str = "") -> None:
        job = self._by_stream.get(id(stream))
        if job is not None:
            job.total = self._samples(stream)
            self._wake.set()

    def _turn_finish(self, stream: TurnStream) -> None:
        self._turn_append(stream)

    def _text_end(self, job: _Job) -> int | None:
        if not job.turn:
            return None
        text = job.stream.text
        lead = len(text) - len(text.lstrip())
        spoken = lead + int(job.emitted / self._samples_per_char + 1e-6)
        return len(text) if job.complete and job.emitted >= job.total else min(spoken, len(text))

    async def add_voice(self, voice) -> dict:
        """Accepts a cloned voice (checked as a Base engine checks it) and keeps speaking its own tone."""
        from audio.reference import ReferenceAudioError, load_reference

        if not voice.x_vector_only and not (voice.ref_text and voice.ref_text.strip()):
            raise EngineError("bad_voice", f"voice {voice.name!r}: in-context cloning needs ref_text")
        try:
            ref = load_reference(voice.ref_audio)
        except ReferenceAudioError as e:
            raise EngineError("bad_audio", f"voice {voice.name!r}: {e.message}") from None
        self._clones = {**getattr(self, "_clones", {}), voice.name: voice.kind}
        return {"name": voice.name, "kind": voice.kind, "ref_seconds": round(ref.duration_s, 3)}

    def remove_voice(self, name: str) -> bool:
        return getattr(self, "_clones", {}).pop(name, None) is not None

    def cloned_voices(self) -> list[dict]:
        return [{"name": n, "kind": k} for n, k in getattr(self, "_clones", {}).items()]

    def stats(self) -> dict:
        active = sum(1 for j in self._jobs if j.admitted_at is not None)
        return {
            "queued": len(self._jobs) - active,
            "active": active,
            "audio_seconds": self.audio_seconds,
            "step_failures": self.step_failures,
        }

    def _cancel(self, stream: SynthesisStream) -> None:
        job = self._by_stream.pop(id(stream), None)
        if job is not None:
            self._jobs.remove(job)

    def _update_deadline(self, stream: SynthesisStream, deadline: float) -> None:
        job = self._by_stream.get(id(stream))
        if job is not None:
            job.deadline = deadline

    # ------------------------------------------------------------ device loop
    async def _run(self) -> None:
        last = self.clock()
        while True:
            if not self._jobs and self._fault is None:
                self._wake.clear()
                await self._wake.wait()
                last = self._last_step = self.clock()
            await asyncio.sleep(STEP_S)
            self._busy_since = self.clock()
            fault, self._fault = self._fault, None
            if fault and fault[0] == "hang":
                await asyncio.sleep(fault[1])
            if fault and fault[0] == "die":
                raise RuntimeError("injected fault: the engine worker died")
            now = self.clock()
            try:
                if fault and fault[0] == "raise":
                    raise RuntimeError("injected fault: the engine step raised")
                self._step(now, now - last)
            except Exception as exc:  # a failed step fails the requests it held; the device goes on
                self.step_failures += 1
                log.exception("simulated engine step failed")
                self._fail_all(EngineError("engine_error", f"the engine step failed: {exc}"))
            last = self._last_step = now
            self._busy_since = None

    def _step(self, now: float, dt: float) -> None:
        s = self.settings
        budget = s.capacity_x * dt * SAMPLE_RATE  # samples the device can make this step
        per_stream = dt / s.stream_rtf * SAMPLE_RATE
        key = (lambda j: (j.deadline, j.seq)) if s.scheduling == "edf" else (lambda j: j.seq)
        for job in sorted(self._jobs, key=key):
            if budget < 1.0:  # less than a sample left (float rounding)
                break
            if job.turn and job.total == 0 and not job.stream.finished:
                continue  # no whole word yet: nothing to start
            if job.waiting_for_text:
                continue  # paused: no step, no cost
            if job.admitted_at is None:
                job.admitted_at = now
            take = min(per_stream, budget, job.total - job.generated)
            job.generated += take
            budget -= take
        for job in list(self._jobs):
            if job.admitted_at is not None:
                self._emit(job, now)

    def _emit(self, job: _Job, now: float) -> None:
        s = self.settings
        if now - job.admitted_at < s.first_packet_ms / 1000.0:
            return
        done = job.complete
        packet = (s.first_packet_audio_ms if job.emitted == 0 else s.packet_ms) * SAMPLE_RATE / 1000
        ready = int(job.generated) - job.emitted
        if job.waiting_for_text and ready > 0:
            packet = min(packet, ready)  # paused for text: hand over what is made
        while ready >= packet or (done and (ready > 0 or job.emitted == 0 or job.emitted < job.total)):
            n = min(ready, int(packet)) if not done else ready
            pcm = tone(job.emitted, n, job.stream.request.request_id)
            job.emitted += n
            ready -= n
            last = done and job.emitted >= job.total
            frame = job.frame
            job.frame += n // CODEC_FRAME_SAMPLES
            self.audio_seconds += n / SAMPLE_RATE
            if last:
                self._jobs.remove(job)
                self._by_stream.pop(id(job.stream), None)
            job.stream._deliver(PcmChunk(pcm, frame, last, self._text_end(job)))
            if last:
                return
            packet = s.packet_ms * SAMPLE_RATE / 1000
