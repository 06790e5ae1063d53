"""`Qwen3Engine`: every request of the process served by one worker thread per device.

The worker loops over steps (DESIGN.md §3.1):

1. drop cancelled requests (their slots free now);
2. admit queued requests, earliest deadline first, into free slots (one batched prefill). With
   every slot taken, a stream that is seconds from running dry yields its slot to a request
   needed at least that much sooner, and resumes later by re-prefilling its prompt and frames (same sequence);
   Prefill has a budget (`prefill_budget_tokens` prompt positions per step): a burst of new calls is
   admitted over several steps, so running streams are never held for the whole burst;
3. one batched frame for all active slots (`TalkerBatch.launch`: talker step, 15-step code
   predictor, sampling; a CUDA graph per (batch bucket, length bucket) on CUDA; attention reads only
   the cache columns live rows use) and ONE wait for the whole batch's codes and next tokens;
4. one batched vocoder pass for the streams whose pending frames make their next packet
   (a ramp: 1 frame first for a fast first audio, then 2, then 4), earliest deadline first
   (`vocoder_rows` caps how many), with the codec's streaming decoder and one persistent
   state row per slot (frame-exact, equal to the offline decode). It runs on the vocoder lane —
   its own thread (and on CUDA its own stream) — while the next steps' talker work runs, so a
   step costs max(talker, vocoder), not their sum (`pipeline`); every codec-state change goes
   through the lane in order;
5. PCM handed to the event loop with `loop.call_soon_threadsafe` (by the lane, as soon as it is
   decoded).

A request's failure (bad voice, text too long, a vocoder error on its row) fails that
request only. The frame cap per request comes from its text length, so a sequence
without EOS ends cleanly. Per-request seeds are not honoured in a batch (one generator
per engine); greedy settings are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import math
import numbers
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tts.engine import (CODEC_FRAME_SAMPLES, Engine, EngineError, PcmChunk, SamplingSettings, SynthesisRequest,
                        SynthesisStream)

log = logging.getLogger("voxgate.qwen3")

FRAME_S = CODEC_FRAME_SAMPLES / 24000


@dataclass
class EngineSettings:
    model_dir: str | None = None
    random_weights: str | None = None  # "0.6b" | "1.7b": released shape, random weights (benches)
    device: str = "cuda"
    dtype: str = "bfloat16"
    codec_dtype: str = "float32"
    max_batch: int = 64
    max_queued: int = 1024
    max_seq_len: int = 1024  # KV cache columns per slot: prompt + frames
    max_frames: int = 900  # hard cap per request (72 s)
    frames_base: int = 24  # cap from text: base + per_token * text tokens
    frames_per_token: float = 8.0
    ignore_eos: bool = False  # benches: fixed lengths
    packet_ramp: tuple[int, ...] = (1, 2, 4)  # frames per packet; 4 (320 ms) measured best per frame
    vocoder_rows: int = 0  # rows vocoded per step at most (0: no limit)
    preempt_slack_s: float = 3.0  # with every slot taken, a stream this far from running dry yields its
    # slot to a deadline at least this much earlier and resumes later by re-prefilling its frames (0: never)
    use_cuda_graphs: bool | None = None  # None: on CUDA
    vocoder: str = "auto"  # auto | torch | onnxruntime | tensorrt (tts.qwen3.codec.vocoder)
    vocoder_cache: str | None = None  # ONNX exports and TensorRT engines (default ~/.cache/voxgate/vocoder)
    default_speaker: str | None = None
    voice_cache_dir: str | None = None  # Base: cloned voices' parts (x-vector, reference codes) on disk
    seed: int = 0
    pipeline: bool = True  # vocoder on its own lane (thread; CUDA stream), overlapping the talker steps
    live_lengths: bool = True  # decode attention over the longest live length's bucket, not max_seq_len
    kv_bucket: int = 256  # cache columns are read in multiples of this (graphs: one per bucket)
    prefill_budget_tokens: int = 0  # prompt positions prefilled per step at most (0: 1024 on CUDA, 256 on CPU);
    # the request at the head always gets in, so a long prompt is never starved
    compact: bool = True  # move streams down into free lower slots so the batch bucket follows live streams
    watch_syncs: bool = False  # count host syncs by watching every op (tts.qwen3.syncs; slower)
    pin_sdpa: bool = True  # CUDA: time the SDPA backends per shape at start and pin the fastest
    cpu_threads: int = 0  # CPU: torch intra-op threads (0: the cores shared by the worker and the vocoder
    # lane, i.e. half of them with the pipeline; -1: leave torch's setting alone)


@dataclass(eq=False)  # jobs compare by identity
class _Job:
    stream: SynthesisStream
    request: SynthesisRequest
    seq: int
    deadline: float
    cancelled: bool = False
    slot: int | None = None
    cap: int = 0
    generated: int = 0
    vocoded: int = 0  # frames decoded to PCM
    delivered: int = 0  # frames handed to the stream
    packets: int = 0
    generating: bool = True
    pending: list = field(default_factory=list)  # codes not yet vocoded
    pcm: list = field(default_factory=list)  # PCM not yet delivered
    codes: list = field(default_factory=list)  # every frame so far (to resume after preemption)
    admitted_at: float = 0.0
    prompt: object = None  # tts.qwen3.prompt.Prompt, kept to resume
    next_code0: int = -1  # the codebook-0 token already sampled for the next frame
    codec_state: object = None  # future of the stream's vocoder state row while it has no slot
    preempted: int = 0
    finished: bool = False  # its last chunk was handed to the vocoder lane
    est_len: int | None = None  # prompt positions, estimated for the prefill budget

    @property
    def priority(self) -> float:
        """When this stream's audio runs out: its deadline plus the audio already handed to the vocoder
        (the worker's own count, so the order does not depend on how far the vocoder lane has got)."""
        return self.deadline + self.vocoded * FRAME_S


def _check_deadline(deadline: object) -> None:
    # the worker sorts by it: a non-number there would kill the worker thread for every stream
    if isinstance(deadline, bool) or not isinstance(deadline, numbers.Real) or not math.isfinite(deadline):
        raise EngineError("bad_message", f"deadline must be a finite time.monotonic() instant, got {deadline!r}")


def _check_sampling(s: SamplingSettings) -> None:
    """Per-request settings land in device rows shared by the whole batch (and top-k's width is sticky):
    a bad value there would fail every stream at every step, so it is refused up front."""
    def real(v: object) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)

    ok = (isinstance(s.greedy, bool) and isinstance(s.top_k, numbers.Integral) and not isinstance(s.top_k, bool)
          and real(s.temperature) and real(s.top_p) and real(s.repetition_penalty)
          and s.temperature >= 0 and 0 < s.top_p <= 1 and s.repetition_penalty > 0)
    if not ok:
        raise EngineError("bad_message", "sampling needs temperature >= 0, an integer top_k, 0 < top_p <= 1, "
                                         f"repetition_penalty > 0 and a bool greedy; got {s}")


class _WorkerDeath(BaseException):
    """An injected fault that ends the worker thread, as an error no `except Exception` catches would."""


class Qwen3Engine(Engine):
    name = "qwen3"

    def __init__(self, settings: EngineSettings, checkpoint=None, keep_codes: bool = True):
        self.settings = settings
        self._ckpt = checkpoint
        self._batch = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cond = threading.Condition()
        self._queue: list[_Job] = []
        self._jobs: dict[int, _Job] = {}  # by stream id
        self._slots: dict[int, _Job] = {}  # slot -> job whose talker row is generating
        self._held: dict[int, _Job] = {}  # slot -> job owning it (generating, or vocoding its last frames)
        self._vstate = None  # the codec's streaming state, one row per slot
        self._vocoder = None  # the vocoder backend (tts.qwen3.codec.vocoder.Vocoder) decoding codes
        self._clones = None  # tts.qwen3.cloned_voices.ClonedVoices on Base checkpoints
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._keep_codes = keep_codes
        # host_syncs: what made the host wait for the device, counted by watching the ops that ran (worker
        # and vocoder lane, the vocoder's PCM copy included) when `watch_syncs` is on; None otherwise.
        self.counters = {"steps": 0, "host_syncs": None, "frames": 0, "admitted": 0, "completed": 0, "failed": 0,
                         "cancelled": 0, "preempted": 0, "vocoder_calls": 0, "audio_s": 0.0, "compacted": 0,
                         "prefill_deferred": 0}
        self.timings = {"prefill": 0.0, "step": 0.0, "vocoder": 0.0}
        self.step_times: list | None = None  # (batch bucket, kv bucket, seconds, end perf_counter) per step
        self.prefill_times: list = []  # (requests, prompt positions, seconds, end) per admission, with step_times
        self.memory: dict = {}  # bytes at start: weights, kv_cache, codec_state, graphs (CUDA)
        self.trace: list | None = None  # (name, start_s, dur_s, args) spans when enabled
        # health (gateway /readyz): the worker's death, or a step that does not return
        self._died: str | None = None
        self._busy_since: float | None = None
        self.stall_after_s = 30.0
        self._fault: tuple[str, float] | None = None  # inject_fault (tests)
        self._tally = None  # tts.qwen3.syncs.SyncTally while watching
        self._lane: concurrent.futures.ThreadPoolExecutor | None = None
        self._lane_stream = None  # CUDA stream of the vocoder lane
        self._voc_inflight: concurrent.futures.Future | None = None
        self.cpu_threads: int | None = None

    # ------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg) -> "Qwen3Engine":
        """From gateway.config.EngineConfig-like attributes (model_dir, dtype, device, max_batch, max_queued)."""
        s = EngineSettings(model_dir=getattr(cfg, "model_dir", None))
        for name in ("device", "dtype", "max_batch", "max_queued", "vocoder", "vocoder_cache"):
            if getattr(cfg, name, None) is not None:
                setattr(s, name, getattr(cfg, name))
        return cls(s)

    def load(self) -> None:
        """Load weights and allocate the batch (blocking; `start` runs it off the event loop)."""
        import torch

        from tts.qwen3.batch import TalkerBatch
        from tts.qwen3.checkpoint import Checkpoint

        s = self.settings
        if s.device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError("no_device", f"engine device {s.device!r} is not available on this machine")
        if self._ckpt is None:
            if s.random_weights:
                self._ckpt = Checkpoint.random(s.random_weights, s.device, s.dtype, seed=s.seed)
            else:
                self._ckpt = Checkpoint.load(s.model_dir, s.device, s.dtype, s.codec_dtype)
        if self._ckpt.config.tts_model_type == "base":
            from tts.qwen3.cloned_voices import ClonedVoices
            from tts.qwen3.voice_clone import VoiceCloner

            self._clones = ClonedVoices(VoiceCloner(self._ckpt.model, self._ckpt.tokenizer, self._ckpt.model_dir,
                                                    s.voice_cache_dir, encoder=self._ckpt.codec_encoder))
        gen = torch.Generator(device=self._ckpt.model.talker.codec_head.weight.device).manual_seed(s.seed)
        cuda = torch.device(s.device).type == "cuda"
        if not cuda and s.cpu_threads >= 0:
            import os

            cores = os.cpu_count() or 1
            # two busy threads (talker, vocoder) each with its own intra-op team: more would oversubscribe
            torch.set_num_threads(s.cpu_threads or max(1, cores // 2 if s.pipeline else cores))
        self.cpu_threads = torch.get_num_threads()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        mem0 = torch.cuda.memory_allocated() if cuda else 0
        self._batch = TalkerBatch(self._ckpt.model, s.max_batch, s.max_seq_len, use_cuda_graphs=s.use_cuda_graphs,
                                  generator=gen, kv_step=s.kv_bucket, live_lengths=s.live_lengths)
        mem_kv = torch.cuda.memory_allocated() if cuda else 0
        if self._ckpt.codec is not None:
            from tts.qwen3.codec import CodecError
            from tts.qwen3.codec.vocoder import build_vocoder

            try:
                self._vocoder = build_vocoder(s.vocoder, self._ckpt.codec, max_batch=s.max_batch,
                                              packets=sorted({1, *s.packet_ramp}), cache_dir=s.vocoder_cache,
                                              cuda_graphs=s.use_cuda_graphs if cuda else False)
            except CodecError as e:
                raise EngineError("vocoder_unavailable", e.message) from None
            log.info("vocoder: %s serving (engine.vocoder %s)", self._vocoder.name, s.vocoder)
            # codec state for every slot now, not on the first admission
            self._vstate = self._vocoder.new_state(s.max_batch)
        mem_codec = torch.cuda.memory_allocated() if cuda else 0
        if cuda and s.pin_sdpa and self._batch.use_cuda_graphs:
            from tts.qwen3.attention import choose

            shape = self._ckpt.config.talker
            kv = self._ckpt.model.talker.model.layers[0].self_attn.kv_cache  # timed on the step's own views
            picked, _ = choose(shape, self._batch.buckets, self._batch.kv_buckets, self._batch.dtype, s.device,
                               cache=(kv.k_cache, kv.v_cache))
            self._batch.sdpa_backends = picked
            log.info("SDPA backend per (batch, kv_len): %s", picked)
        if self._batch.use_cuda_graphs and self._ckpt.config.tts_model_type == "base":
            # streaming-text prompts (Base): graphs read the text track by address, so it is sized once, for
            # the longest text a request can read (one row per frame), before any capture
            self._batch.reserve_trailing(min(s.max_frames, s.max_seq_len))
        graphs = self._batch.capture_all()
        if cuda:
            torch.cuda.synchronize()
        self.memory = self._memory_report(mem0, mem_kv, mem_codec, graphs)
        log.info("qwen3 engine memory: %s", {k: (f"{v / 2**20:.0f} MiB" if isinstance(v, int) else v)
                                             for k, v in self.memory.items()})
        if s.pipeline and cuda:
            self._lane_stream = torch.cuda.Stream()

    @property
    def vocoder_name(self) -> str | None:
        """The vocoder backend actually serving (None before load)."""
        return self._vocoder.name if self._vocoder is not None else None

    def _memory_report(self, mem0: int, mem_kv: int, mem_codec: int, graphs: int) -> dict:
        import torch

        def nbytes(tensors) -> int:
            return sum(t.numel() * t.element_size() for t in tensors)

        model = self._ckpt.model
        kv = nbytes(b for m in model.modules() if m.__class__.__name__ == "KVCache" for b in m.buffers())
        codec = self._ckpt.codec
        report = {"weights": nbytes(model.parameters()) + (nbytes(codec.parameters()) if codec is not None else 0),
                  "kv_cache": kv, "codec_state": nbytes(self._vstate.buffers) if self._vstate is not None else 0,
                  "graphs": graphs}
        if torch.device(self.settings.device).type == "cuda":
            report["graph_pool"] = torch.cuda.memory_allocated() - mem_codec
            report["allocated"] = torch.cuda.memory_allocated()
            report["reserved"] = torch.cuda.memory_reserved()
        return report

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._batch is None:
            await self._loop.run_in_executor(None, self.load)
        self._start_worker()

    def start_sync(self, loop: asyncio.AbstractEventLoop) -> None:
        """For benches/tests that load first and attach to a loop later."""
        self._loop = loop
        if self._batch is None:
            self.load()
        self._start_worker()

    def _start_worker(self) -> None:
        if self.settings.pipeline and self._lane is None:
            self._lane = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qwen3-vocoder")
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name="qwen3-worker", daemon=True)
            self._thread.start()

    async def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self._thread = None
        if self._lane is not None:
            self._lane.shutdown(wait=True)
            self._lane = None
        for job in list(self._jobs.values()):
            job.stream._fail(EngineError("internal", "engine closed"))
        self._jobs.clear()

    # ------------------------------------------------------------ API
    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        if self._died:
            raise EngineError("engine_unavailable", self._died)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not request.text or not request.text.strip():
            raise EngineError("bad_message", "text is empty")
        _check_deadline(request.deadline)
        _check_sampling(request.sampling)
        stream = SynthesisStream(request, self)
        with self._cond:
            if len(self._queue) >= self.settings.max_queued:
                raise EngineError("overloaded", f"engine queue is full ({self.settings.max_queued} requests waiting)")
            job = _Job(stream, request, next(self._seq), request.deadline)
            self._queue.append(job)
            self._jobs[id(stream)] = job
            self._cond.notify()
        return stream

    def voices(self) -> list[str]:
        if self._ckpt is None:
            return []
        if self._clones is not None:
            return self._clones.names()
        return sorted(self._ckpt.config.talker.spk_id)

    # -- cloned voices (Base checkpoints)
    @property
    def can_clone(self) -> bool:
        return self._clones is not None

    async def add_voice(self, voice) -> dict:
        if self._ckpt is None:
            raise EngineError("not_ready", "the engine is not loaded yet")
        if self._clones is None:
            return await super().add_voice(voice)
        return await asyncio.get_running_loop().run_in_executor(None, self.add_voice_sync, voice)

    def add_voice_sync(self, voice) -> dict:
        """`add_voice`, blocking (the CLI, benches, or an executor thread)."""
        if self._clones is None:
            raise EngineError("unsupported_voice", "this checkpoint is not a Base model: it cannot clone voices")
        with self._capture_gate():  # cloning runs on this thread's CUDA stream: never during a graph capture
            cv = self._clones.add(voice)
        if cv.clone.icl and self._vocoder is not None and self._lane is not None:
            # prime the vocoder row now, on the lane, so the voice's first call does not pay the reference decode
            t0 = time.perf_counter()
            self._primed(cv).result()
            cv.prepare_s += time.perf_counter() - t0
        return cv.info()

    def remove_voice(self, name: str) -> bool:
        return self._clones.remove(name) if self._clones is not None else False

    def cloned_voices(self) -> list[dict]:
        return self._clones.infos() if self._clones is not None else []

    def _primed(self, cv) -> concurrent.futures.Future:
        """The vocoder state after the voice's reference codes: decoded once per voice, on the lane."""
        if cv.primed is None:
            from tts.qwen3.cloned_voices import prime_vocoder

            cv.primed = self._on_lane(prime_vocoder, self._vocoder, cv.clone.ref_codes, max(self.settings.packet_ramp))
        return cv.primed

    def stats(self) -> dict:
        with self._cond:
            return {"queued": len(self._queue), "active": len(self._slots), **self.counters}

    def _cancel(self, stream: SynthesisStream) -> None:
        with self._cond:
            job = self._jobs.get(id(stream))
            if job is not None:
                job.cancelled = True
                self._cond.notify()

    def _update_deadline(self, stream: SynthesisStream, deadline: float) -> None:
        _check_deadline(deadline)
        with self._cond:
            job = self._jobs.get(id(stream))
            if job is not None:
                job.deadline = deadline - job.vocoded * FRAME_S

    # ------------------------------------------------------------ worker
    def watch_syncs(self, on: bool = True) -> None:
        """Count host syncs by watching every op of the worker and the vocoder lane (from the next step)."""
        from tts.qwen3.syncs import SyncTally

        with self._cond:
            self._tally = SyncTally() if on else None
            self.counters["host_syncs"] = 0 if on else None

    def _run(self) -> None:
        from tts.qwen3.syncs import watching

        if self.settings.watch_syncs and self._tally is None:
            self.watch_syncs(True)
        tally = None
        watch = watching(None)
        watch.__enter__()
        try:
            while True:
                with self._cond:
                    while not self._stop and not self._queue and not self._held:
                        self._cond.wait()
                    if self._stop:
                        return
                if self._tally is not tally:  # (re)enter the watch on this thread when it is switched
                    watch.__exit__(None, None, None)
                    tally = self._tally
                    watch = watching(tally)
                    watch.__enter__()
                self._busy_since = time.monotonic()
                self._iteration()
                self._busy_since = None
        except BaseException as exc:  # noqa: BLE001 - the worker is ending: no stream may wait on it forever
            self._died = f"the engine worker stopped ({type(exc).__name__}: {exc})"
            log.error("%s; its requests fail and new ones are refused", self._died)
            with self._cond:
                jobs, self._queue = list(self._jobs.values()), []
                self._jobs.clear()
            for job in jobs:
                self._post(job.stream._fail, EngineError("engine_error", self._died))
        finally:
            watch.__exit__(None, None, None)
            self._lane_join()

    # ------------------------------------------------------------ health and faults
    def health(self) -> str | None:
        if self._died:
            return self._died
        busy = self._busy_since
        if busy is not None and time.monotonic() - busy > self.stall_after_s:
            return f"the engine step has not returned for {time.monotonic() - busy:.1f} s (hung)"
        return None

    def inject_fault(self, kind: str, seconds: float = 3600.0) -> None:
        """Tests: the worker's next step `raise`s, `hang`s for `seconds`, or the worker `die`s."""
        if kind not in ("raise", "hang", "die"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._cond:
            self._fault = (kind, seconds)
            self._cond.notify()

    def _fault_point(self) -> None:
        fault, self._fault = self._fault, None
        if fault is None:
            return
        if fault[0] == "hang":
            time.sleep(fault[1])
        elif fault[0] == "raise":
            raise RuntimeError("injected fault: the step raised")
        else:
            raise _WorkerDeath("injected fault: the worker died")

    def _iteration(self) -> None:
        with self._cond:
            self._drop_cancelled()
            self._queue.sort(key=lambda j: (j.priority, j.seq))
            self._preempt_for_deadlines()
            if self.settings.compact:
                self._compact()
            free = [s for s in range(self.settings.max_batch) if s not in self._held]
            admit = self._take_admissions(len(free))
        try:
            if admit:
                self._admit(admit, free)
            if self._fault is not None:
                self._fault_point()
            if self._slots:
                self._step()
            if self._held:
                self._vocode()
            elif self._lane is not None and self._voc_inflight is not None and not self._slots:
                self._lane_join()  # nothing else to do: do not spin on the lock while the lane works
        except Exception as e:  # a device-level failure: fail what was in flight, keep serving
            log.exception("qwen3 worker step failed")
            self._fail_all_active(e)

    def _take_admissions(self, n_free: int) -> list[_Job]:
        """Under the lock, queue sorted: the jobs admitted this step — as many as fit in the free slots
        and in the prefill budget (the head always fits)."""
        if not n_free or not self._queue:
            return []
        budget = self.settings.prefill_budget_tokens or (1024 if self._batch.device.type == "cuda" else 256)
        taken, used = 0, 0
        for job in self._queue[:n_free]:
            need = self._prompt_len_estimate(job)
            if taken and used + need > budget:
                break
            taken, used = taken + 1, used + need
        if taken < min(n_free, len(self._queue)):
            self.counters["prefill_deferred"] += min(n_free, len(self._queue)) - taken
        admit, self._queue = self._queue[:taken], self._queue[taken:]
        return admit

    def _prompt_len_estimate(self, job: _Job) -> int:
        if job.prompt is not None:  # resuming: prompt + its frames
            return job.prompt.prefill.shape[0] + len(job.codes)
        if job.est_len is None:  # role/control tokens + the text's tokens (instruction included), once per job
            tok = self._ckpt.tokenizer
            text = job.request.text + (job.request.instruct or "")
            try:
                job.est_len = 16 + (len(tok.encode(text)) if tok is not None else len(text) // 4)
            except Exception:  # noqa: BLE001 - an estimate only; the prompt build reports real errors
                job.est_len = 16 + len(text)
        return job.est_len

    def _drop_cancelled(self) -> None:
        """Under the lock: cancelled jobs leave the queue, their slots and the vocoder list."""
        for job in [j for j in self._queue if j.cancelled]:
            self._queue.remove(job)
            self._forget(job, "cancelled")
        for slot, job in list(self._held.items()):
            if job.cancelled:
                self._release(job)
                self._forget(job, "cancelled")

    def _preempt_for_deadlines(self) -> None:
        """Under the lock, queue sorted: while the waiting requests outnumber the free slots and the next
        of them needs audio at least preempt_slack_s before a generating stream that is >= preempt_slack_s from
        running dry, that stream yields its slot. It keeps its frames, its next token and its vocoder state, and
        re-enters the queue at the time it runs dry."""
        slack = self.settings.preempt_slack_s
        if slack <= 0:
            return
        now = time.monotonic()
        waiting = [j for j in self._queue if not j.cancelled]
        for i, head in enumerate(waiting):
            if i < self.settings.max_batch - len(self._held):
                continue  # the heads before it and this one fit in the free slots
            victims = [j for j in self._slots.values() if not j.cancelled and j.codes]
            if not victims:
                return
            victim = max(victims, key=lambda j: j.priority)
            # the head must need audio at least `slack` sooner than the victim: without that margin two
            # streams with seconds buffered swap the slot (a re-prefill each) every time their priorities cross
            if victim.priority - now < slack or victim.priority - head.priority < slack:
                return
            slot = victim.slot
            if self._vstate is not None:  # after the lane's work in flight on that row
                victim.codec_state = self._on_lane(self._vstate.select, [slot])
            self._release(victim)
            victim.slot = None
            victim.preempted += 1
            self.counters["preempted"] += 1
            self._queue.append(victim)
            self._queue.sort(key=lambda j: (j.priority, j.seq))

    def _compact(self) -> None:
        """Under the lock: a generating stream above a free lower slot moves down into it (its KV rows,
        sampler state and vocoder row), so slots 0..n-1 stay dense and the batch bucket follows the number
        of live streams, not the highest slot ever used. Only streams with nothing left to vocode move:
        their vocoder row is then idle, and the move goes through the lane in order."""
        if not self._slots:
            return
        free = sorted(s for s in range(max(self._held) + 1) if s not in self._held)
        for src in sorted(self._slots, reverse=True):
            if not free or free[0] >= src:
                return
            job = self._slots[src]
            if job.cancelled or job.pending:
                continue
            dst = free.pop(0)
            self._batch.move(src, dst)
            if self._vstate is not None:
                self._on_lane(self._move_vocoder_row, src, dst)
            del self._slots[src], self._held[src]
            self._slots[dst] = self._held[dst] = job
            job.slot = dst
            free.append(src)
            free.sort()
            self.counters["compacted"] += 1

    def _move_vocoder_row(self, src: int, dst: int) -> None:
        self._vstate.assign([dst], self._vstate.select([src]))

    def _release(self, job: _Job) -> None:
        """Under the lock: the job gives up its talker row and its slot."""
        if self._slots.get(job.slot) is job:
            self._batch.release(job.slot)
            del self._slots[job.slot]
        if self._held.get(job.slot) is job:
            del self._held[job.slot]

    def _forget(self, job: _Job, outcome: str) -> None:
        if self._jobs.pop(id(job.stream), None) is not None:
            self.counters[outcome] += 1

    def _post(self, fn, *args) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    def _fail(self, job: _Job, error: EngineError) -> None:
        self._post(job.stream._fail, error)
        with self._cond:
            self._release(job)
            self._forget(job, "failed")

    def _fail_all_active(self, error: Exception) -> None:
        err = error if isinstance(error, EngineError) else EngineError("internal", f"engine step failed: {error}")
        for job in list(self._held.values()):
            self._fail(job, err)

    # -- the vocoder lane: every codec-state change and decode, in submission order
    def _on_lane(self, fn, *args) -> concurrent.futures.Future:
        if self._lane is None:  # serial engine: now, on the worker
            fut: concurrent.futures.Future = concurrent.futures.Future()
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever reads the future
                fut.set_exception(e)
            return fut
        tally = self._tally

        def run():
            from tts.qwen3.syncs import watching

            with self._capture_gate(), watching(tally), self._lane_stream_ctx():
                return fn(*args)

        return self._lane.submit(run)

    def _capture_gate(self):
        """Held by work on other threads that calls into CUDA: a graph capture holds it (tts.qwen3.batch)."""
        import contextlib

        return self._batch.capture_gate.use() if self._batch is not None else contextlib.nullcontext()

    def _lane_stream_ctx(self):
        import contextlib

        import torch

        if self._lane_stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._lane_stream)

    def _lane_join(self) -> None:
        fut, self._voc_inflight = self._voc_inflight, None
        if fut is not None:
            fut.result()

    # -- admission
    def _voice(self, request: SynthesisRequest) -> dict:
        cfg = self._ckpt.config
        if cfg.tts_model_type == "custom_voice":
            speaker = request.voice
            if not speaker or speaker == "default" or speaker.lower() not in cfg.talker.spk_id:
                if speaker and speaker != "default":
                    raise EngineError("unknown_voice", f"voice {speaker!r} is not a speaker of this checkpoint")
                speaker = self.settings.default_speaker or sorted(cfg.talker.spk_id)[0]
            return {"speaker": speaker, "instruct": request.instruct}
        if cfg.tts_model_type == "voice_design":
            return {"instruct": request.instruct}
        # Base: a cloned voice, in the official generate_voice_clone layout (streaming text)
        return {"clone": self._clones.get(request.voice), "streaming_text": True}

    def _prompt(self, job: _Job):
        from tts.qwen3.prompt import PromptError, build_prompt

        req = job.request
        try:
            if self._ckpt.tokenizer is None:  # random-weight benches: a prompt of the right length, no text
                return self._bench_prompt(req.text)
            voice = self._voice(req)
            cv = voice.get("clone")
            if cv is not None:
                voice["clone"] = cv.clone
                if cv.clone.icl and self._vocoder is not None:  # the vocoder row continues after the reference
                    job.codec_state = self._primed(cv)
            return build_prompt(self._ckpt.model.talker, self._ckpt.config, self._ckpt.tokenizer, req.text,
                                language=req.language, **voice)
        except PromptError as e:
            raise EngineError(e.code, e.message) from None

    def _resume_prompt(self, job: _Job):
        import torch

        from tts.qwen3.prompt import Prompt

        p, talker = job.prompt, self._ckpt.model.talker
        codes = torch.from_numpy(np.stack(job.codes)).to(p.prefill.device)
        n, n_text = codes.shape[0], p.trailing_text.shape[0]
        text = torch.stack([p.trailing_text[i] if i < n_text else p.pad for i in range(n)])
        with torch.inference_mode():
            frames = talker.embed_frame(codes) + text
        return Prompt(prefill=torch.cat([p.prefill, frames]), trailing_text=p.trailing_text, pad=p.pad,
                      text_tokens=p.text_tokens)

    def _bench_prompt(self, text: str):
        import torch

        from tts.qwen3.prompt import Prompt

        talker, cfg = self._ckpt.model.talker, self._ckpt.config
        n = max(1, len(text) // 4)  # about one token per 4 characters
        dev = talker.codec_head.weight.device
        g = torch.Generator(device=dev).manual_seed(len(text))
        ids = torch.randint(0, cfg.talker.text_vocab_size, (n + 12,), generator=g, device=dev)
        pad = talker.embed_text(torch.tensor([cfg.tts_pad_token_id], device=dev))[0]
        return Prompt(prefill=talker.embed_text(ids), trailing_text=pad.new_zeros((0, pad.shape[0])), pad=pad, text_tokens=n)

    def _sampling(self, req: SynthesisRequest) -> tuple[dict, dict]:
        s, gen = req.sampling, self._ckpt.generation
        talker = dict(temperature=float(s.temperature), top_k=int(s.top_k), top_p=float(s.top_p), greedy=s.greedy,
                      repetition_penalty=1.0 if s.greedy else float(s.repetition_penalty))
        predictor = dict(temperature=gen.subtalker_temperature if not s.greedy else 1.0, top_k=gen.subtalker_top_k,
                         top_p=gen.subtalker_top_p, greedy=s.greedy or not gen.subtalker_dosample)
        return talker, predictor

    def _admit(self, jobs: list[_Job], free: list[int]) -> None:
        import torch

        t0 = time.perf_counter()
        ready, prompts, tset, pset = [], [], [], []
        resumes = []
        for job in jobs:
            try:
                if job.prompt is None:
                    prompt = job.prompt = self._prompt(job)
                    length = prompt.prefill.shape[0]
                    cap = int(self.settings.frames_base + self.settings.frames_per_token * prompt.text_tokens)
                    cap = min(cap, self.settings.max_frames, self.settings.max_seq_len - length - 1)
                    if cap < 1:
                        raise EngineError("text_too_long", f"text needs {length} prompt positions; the engine "
                                                           f"holds {self.settings.max_seq_len} per request")
                    job.cap = cap
                    resume = None
                else:  # resuming after preemption: the prompt plus every frame so far, in one prefill
                    prompt = self._resume_prompt(job)
                    resume = (job.next_code0, np.stack(job.codes))
                ts, ps = self._sampling(job.request)
            except EngineError as e:
                self._fail(job, e)
                continue
            except Exception as e:  # noqa: BLE001 - one request's bug fails that request only
                log.exception("prompt failed")
                self._fail(job, EngineError("internal", f"could not prepare the request: {e}"))
                continue
            ready.append(job)
            resumes.append(resume)
            prompts.append(prompt)
            tset.append(ts)
            pset.append(ps)
        if not ready:
            return
        slots = free[: len(ready)]
        with self._cond:
            for job, slot in zip(ready, slots):
                job.slot = slot
                self._slots[slot] = job
                self._held[slot] = job
        fresh = [slot for slot, r, job in zip(slots, resumes, ready) if r is None and job.codec_state is None]
        for job, slot in zip(ready, slots):
            job.admitted_at = job.admitted_at or time.monotonic()
            if job.codec_state is not None:
                self._on_lane(self._restore_vocoder_row, slot, job.codec_state)
                job.codec_state = None
        if fresh and self._vstate is not None:
            self._on_lane(self._vstate.reset, fresh)
        self._batch.admit(slots, prompts, tset, pset, resumes)
        if self._batch.device.type == "cuda" and self.trace is not None:
            torch.cuda.synchronize()
        if self.step_times is not None:
            self.prefill_times.append((len(ready), sum(p.prefill.shape[0] for p in prompts),
                                       time.perf_counter() - t0, time.perf_counter()))
        self.counters["admitted"] += len(ready)
        self._span("prefill", t0, {"rows": len(ready)})
        self.timings["prefill"] += time.perf_counter() - t0

    # -- one frame for everyone
    def _step(self) -> None:
        t0 = time.perf_counter()
        if self._batch.stage_marks is not None:
            self._stage_reset()
        n_rows = max(self._slots) + 1
        bucket = self._batch.launch(n_rows)
        t_launch = time.perf_counter()
        out = self._batch.read(n_rows)  # the step's one wait: codes and next tokens of the whole batch
        if self.trace is not None:
            self.trace.append(("decode_step" if self._batch.use_cuda_graphs else "decode_step (eager)", t0,
                               t_launch - t0, {"rows": n_rows, "bucket": bucket, "kv_len": self._batch.last_kv_len}))
            self.trace.append(("host_sync", t_launch, time.perf_counter() - t_launch, {"rows": n_rows}))
        groups = self._batch.groups
        eos = self._ckpt.config.talker.codec_eos_token_id
        with self._cond:
            self.counters["steps"] += 1
            if self._tally is not None:
                self.counters["host_syncs"] = self._tally.count
            for slot, job in list(self._slots.items()):
                if job.cancelled:
                    continue
                job.pending.append(out[slot, :groups].copy())
                job.codes.append(job.pending[-1])
                job.next_code0 = int(out[slot, groups])
                job.generated += 1
                self.counters["frames"] += 1
                ended = (out[slot, groups] == eos and not self.settings.ignore_eos) or job.generated >= job.cap
                if ended:
                    job.generating = False
                    self._batch.release(slot)
                    del self._slots[slot]  # the slot stays held until its last frames are vocoded
        dt = time.perf_counter() - t0
        self.timings["step"] += dt
        if self.step_times is not None:
            self.step_times.append((bucket, self._batch.last_kv_len, dt, time.perf_counter()))

    # -- vocoder
    def _restore_vocoder_row(self, slot: int, saved: concurrent.futures.Future) -> None:
        self._vstate.assign([slot], saved.result())

    def _packet_target(self, job: _Job) -> int:
        ramp = self.settings.packet_ramp
        return ramp[min(job.packets, len(ramp) - 1)]

    def _decode(self, entries: list[tuple[int, list]], owners: dict[int, int]) -> list[np.ndarray]:
        """On the lane: decode the frames of (slot, frames) entries (their state rows advance in place).
        `owners`: slot -> id of the job holding it when the work was handed over."""
        import torch

        from tts.qwen3.codec import StreamingCodecState

        codec, vs, g = self._vocoder, self._vstate, self._batch.groups
        n = max(slot for slot, _ in entries) + 1
        chosen = {slot for slot, _ in entries}
        t = len(entries[0][1])
        if all(len(f) == t for _, f in entries) and all(s in chosen for s in owners if s < n):
            # Common case: streams in step (same packet size, every held slot below n chosen): decode slots
            # 0..n-1 on a view of the state, no gather/scatter of state rows. Rows without a live
            # stream decode zeros; they are reset when their slot is reused.
            codes = np.zeros((n, t, g), dtype=np.int64)
            for slot, frames in entries:
                codes[slot] = np.stack(frames)
            view = StreamingCodecState(vs.frames[:n], [b[:n] for b in vs.buffers])
            pcm = self._codec_call(codes, view)
            return [pcm[slot] for slot, _ in entries]
        out: dict[int, np.ndarray] = {}
        by_len: dict[int, list[tuple[int, list]]] = {}
        for e in entries:
            by_len.setdefault(len(e[1]), []).append(e)
        for t, group in by_len.items():
            idx = [slot for slot, _ in group]
            codes = np.stack([np.stack(frames) for _, frames in group])
            sub = vs.select(idx)
            pcm = self._codec_call(codes, sub)
            vs.assign(idx, sub)
            out.update({slot: row for slot, row in zip(idx, pcm)})
        return [out[slot] for slot, _ in entries]

    def _codec_call(self, codes: np.ndarray, state) -> np.ndarray:
        """One vocoder call: codes to the device, decode, PCM to the host (one wait, counted)."""
        import torch

        from tts.qwen3.syncs import wait_for

        codec = self._vocoder
        cuda = codec.device.type == "cuda"
        src = torch.from_numpy(codes)
        with torch.inference_mode():
            if cuda:
                src = src.pin_memory().to(codec.device, non_blocking=True)
            wav = codec.decode_step(src, state).float()
            host = torch.empty(wav.shape, dtype=torch.float32, pin_memory=cuda)
            host.copy_(wav, non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        wait_for(event)
        with self._cond:
            self.counters["vocoder_calls"] += 1
            if self._tally is not None:
                self.counters["host_syncs"] = self._tally.count
        return host.numpy()

    def _vocode(self) -> None:
        """Hand the streams whose pending frames make their next packet (or that ended) to the lane. The
        previous hand-over is waited for first (at most one in flight: a vocoder slower than the talker
        slows the loop rather than queueing work)."""
        self._lane_join()
        with self._cond:
            live = [j for j in self._held.values() if not j.cancelled and not j.finished]
            owners = {slot: id(job) for slot, job in self._held.items() if not job.cancelled}
        # a stream is decoded once its pending frames make its next packet (1, 2, 4 ...), or at its end
        todo = sorted((j for j in live if j.pending and (len(j.pending) >= self._packet_target(j) or not j.generating)),
                      key=lambda j: (j.priority, j.seq))
        if self.settings.vocoder_rows:
            todo = todo[: self.settings.vocoder_rows]
        ending = [j for j in live if not j.generating and not j.pending]  # everything vocoded: last chunk only
        tasks = []
        for job in todo + ending:
            frames, job.pending = job.pending, []
            job.vocoded += len(frames)
            job.packets += 1
            last = not job.generating
            job.finished = last
            tasks.append((job, job.slot, frames, last))
        if not tasks:
            return
        with self._cond:  # a finished stream's slot is free from now: its vocoder row's next user is reset
            for job, _, _, last in tasks:  # on the lane after this work, so the slot need not wait for it
                if last:
                    self._release(job)
        if self._ckpt.codec is None and any(f for _, _, f, _ in tasks):
            raise EngineError("internal", "this checkpoint has no codec decoder")
        self._voc_inflight = self._on_lane(self._decode_and_deliver, tasks, owners)

    def _decode_and_deliver(self, tasks: list, owners: dict[int, int]) -> None:
        """On the lane: decode, then hand each stream its chunk (and finish the ones that ended)."""
        t0 = time.perf_counter()
        entries = [(slot, frames) for _, slot, frames, _ in tasks if frames]
        pcms: list = []
        if entries:
            try:
                pcms = self._decode(entries, owners)
            except Exception as e:  # noqa: BLE001 - fail the streams in this call, keep serving
                log.exception("vocoder failed")
                for job, _, frames, _ in tasks:
                    if frames:
                        self._fail(job, EngineError("internal", f"vocoder failed: {e}"))
                tasks = [t for t in tasks if not t[2]]
                pcms = []
            self._span("vocoder", t0, {"rows": len(entries)})
            self.timings["vocoder"] += time.perf_counter() - t0
        it = iter(pcms)
        for job, _, frames, last in tasks:
            pcm = next(it) if frames else np.zeros(0, dtype=np.float32)
            if job.cancelled:
                continue
            self._post(job.stream._deliver, PcmChunk(pcm, job.delivered, last))
            job.delivered += len(frames)
            with self._cond:
                self.counters["audio_s"] += len(frames) * FRAME_S
            if last:
                self._complete(job)

    def _complete(self, job: _Job) -> None:
        with self._cond:
            self._release(job)
            self._forget(job, "completed")

    # -- tracing
    def enable_trace(self, stages: bool = True) -> None:
        """Record spans; with `stages` (eager only) also code_predictor / talker_step / sampling
        inside each step, synchronising the device between them (slower: for traces, not numbers)."""
        self.trace = []
        if stages and self._batch is not None and not self._batch.use_cuda_graphs:
            import torch

            cuda = self._batch.device.type == "cuda"
            last = [time.perf_counter()]

            def mark(name: str) -> None:
                if cuda:
                    torch.cuda.synchronize()
                now = time.perf_counter()
                self.trace.append((name, last[0], now - last[0], {}))
                last[0] = now

            def reset() -> None:
                last[0] = time.perf_counter()

            self._batch.stage_marks = mark
            self._stage_reset = reset

    def _span(self, name: str, t0: float, args: dict) -> None:
        if self.trace is not None:
            self.trace.append((name, t0, time.perf_counter() - t0, args))
