"""`Qwen3Engine`: every request of the process served by one worker thread per device.

The worker loops over steps (docs/engine.md):

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

Where each part lives (each an object with its own state; tts/qwen3/README.md has the contract):

* this file — `Qwen3Engine`, the face: construction and loading, the `tts.Engine` API (requests, voices,
  stats); it wires the parts below and holds no scheduling state of its own;
* `scheduler.py` — `Scheduler`: steps 1-2 and the bookkeeping of 3-4 (queue, slots, EDF, prefill budget,
  preemption, turn pauses, compaction), host state only, no torch, behind its own lock;
* `step_loop.py` — `StepLoop`, the executor: the worker thread, the device, the batch and its graphs
  (prompts, prefill, step 3, the device work of the scheduler's decisions);
* `vocoder_lane.py` — `VocoderLane`: steps 4-5, its thread and CUDA stream, the codec state rows;
* `diagnostics.py` — `Diagnostics`: health, injected faults (tests), timings and trace spans;
* `jobs.py` — `EngineSettings`, one request's state (`Job`), request checks, the frame-cap rule.

Served to other processes, the engine is `tts.service` (`voxgate engine`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from tts.engine import Engine, EngineError, SynthesisRequest, SynthesisStream, TurnStream
from tts.qwen3.diagnostics import Diagnostics
from tts.qwen3.jobs import EngineSettings, check_deadline, check_sampling
from tts.qwen3.scheduler import Scheduler
from tts.qwen3.step_loop import StepLoop
from tts.qwen3.vocoder_lane import VocoderLane

log = logging.getLogger("voxgate.qwen3")

__all__ = ["EngineSettings", "Qwen3Engine"]


class Qwen3Engine(Engine):
    name = "qwen3"

    def __init__(self, settings: EngineSettings, checkpoint=None, keep_codes: bool = True):
        self.settings = settings
        self._ckpt = checkpoint
        self._batch = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clones = None  # tts.qwen3.cloned_voices.ClonedVoices on Base checkpoints
        self._keep_codes = keep_codes
        self.memory: dict = {}  # bytes at start: weights, kv_cache, codec_state, graphs (CUDA)
        self.cpu_threads: int | None = None
        self.diagnostics = Diagnostics()
        # host_syncs (counters): what made the host wait for the device, counted by watching the ops that ran
        # (worker and vocoder lane, the vocoder's PCM copy included) when `watch_syncs` is on; None otherwise.
        self.scheduler = Scheduler(settings, cuda=settings.device.startswith("cuda"))
        self.lane = VocoderLane(settings, self.scheduler, self.diagnostics, self.deliver)
        self.step_loop = StepLoop(settings, self.scheduler, self.lane, self.diagnostics, self.deliver)

    def deliver(self, items: list) -> None:
        """Every way a request's audio or failure reaches its caller: `(stream, PcmChunk | error)` pairs from
        the worker or the lane, handed to the streams on the event loop in one callback, in order."""
        if items:
            self._loop.call_soon_threadsafe(_deliver_all, items)

    # ------------------------------------------------------------ the parts' state, as the engine's
    counters = property(lambda self: self.scheduler.counters)
    timings = property(lambda self: self.diagnostics.timings)
    prefill_times = property(lambda self: self.diagnostics.prefill_times)
    recent_step_s = property(lambda self: self.diagnostics.recent_step_s)
    trace = property(lambda self: self.diagnostics.trace)
    _cond = property(lambda self: self.scheduler.lock)  # the scheduler's lock (tests hold it to batch calls)
    _jobs = property(lambda self: self.scheduler.jobs)
    _held = property(lambda self: self.scheduler.held)
    _vocoder = property(lambda self: self.lane.vocoder)

    @property
    def step_times(self) -> list | None:
        return self.diagnostics.step_times

    @step_times.setter
    def step_times(self, value: list | None) -> None:
        self.diagnostics.step_times = value

    @property
    def stall_after_s(self) -> float:
        return self.diagnostics.stall_after_s

    @stall_after_s.setter
    def stall_after_s(self, value: float) -> None:
        self.diagnostics.stall_after_s = value

    @property
    def _lane(self):
        return self.lane.pool

    @_lane.setter
    def _lane(self, pool) -> None:
        self.lane.pool = pool

    def _on_lane(self, fn, *args):
        return self.lane.submit(fn, *args)

    # ------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg) -> "Qwen3Engine":
        """From gateway.config.EngineConfig-like attributes (model_dir, dtype, device, max_batch, max_queued)."""
        s = EngineSettings(model_dir=getattr(cfg, "model_dir", None))
        for name in ("device", "dtype", "max_batch", "max_queued", "vocoder", "vocoder_cache", "aligner_dir"):
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

            self._clones = ClonedVoices(
                VoiceCloner(
                    self._ckpt.model,
                    self._ckpt.tokenizer,
                    self._ckpt.model_dir,
                    s.voice_cache_dir,
                    encoder=self._ckpt.codec_encoder,
                )
            )
        gen = torch.Generator(device=self._ckpt.model.talker.codec_head.weight.device).manual_seed(s.seed)
        cuda = torch.device(s.device).type == "cuda"
        if not cuda and s.cpu_threads >= 0:
            import os

            cores = os.cpu_count() or 1
            # two busy threads (talker, vocoder) each with its own intra-op team: more would oversubscribe.
            # The team keeps its size when a small batch waits for its vocoder pass instead (a lone stream's
            # ops are too small for more threads: 2 threads ran c=1 15-30 % slower than 1 on two cores)
            torch.set_num_threads(s.cpu_threads or max(1, cores // 2 if s.pipeline else cores))
        self.cpu_threads = torch.get_num_threads()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        mem0 = torch.cuda.memory_allocated() if cuda else 0
        self._batch = TalkerBatch(
            self._ckpt.model,
            s.max_batch,
            s.max_seq_len,
            use_cuda_graphs=s.use_cuda_graphs,
            generator=gen,
            kv_step=s.kv_bucket,
            live_lengths=s.live_lengths,
        )
        mem_kv = torch.cuda.memory_allocated() if cuda else 0
        self.scheduler.bind(
            self._ckpt.tokenizer,
            self._ckpt.config.talker.codec_eos_token_id,
            self._ckpt.config.tts_eos_token_id,
            cuda=cuda,
        )
        self.step_loop.attach(self._ckpt, self._batch, self._clones)
        vocoder = None
        if self._ckpt.codec is not None:
            from tts.qwen3.codec import CodecError
            from tts.qwen3.codec.vocoder import build_vocoder

            try:
                vocoder = build_vocoder(
                    s.vocoder,
                    self._ckpt.codec,
                    max_batch=s.max_batch,
                    packets=sorted({1, *s.packet_ramp}),
                    cache_dir=s.vocoder_cache,
                    cuda_graphs=s.use_cuda_graphs if cuda else False,
                )
            except CodecError as e:
                raise EngineError("vocoder_unavailable", e.message) from None
            log.info("vocoder: %s serving (engine.vocoder %s)", vocoder.name, s.vocoder)
        self.lane.load(vocoder, self._batch, s.max_batch, cuda=cuda)
        mem_codec = torch.cuda.memory_allocated() if cuda else 0
        if cuda and s.pin_sdpa and self._batch.use_cuda_graphs:
            from tts.qwen3.attention import choose

            shape = self._ckpt.config.talker
            kv = self._ckpt.model.talker.model.layers[0].self_attn.kv_cache  # timed on the step's own views
            picked, _ = choose(
                shape,
                self._batch.buckets,
                self._batch.kv_buckets,
                self._batch.dtype,
                s.device,
                cache=(kv.k_cache, kv.v_cache),
            )
            self._batch.sdpa_backends = picked
            log.info("SDPA backend per (batch, kv_len): %s", picked)
        if cuda and s.pin_sdpa:
            from tts.qwen3.attention import prefill_backend

            self._batch.prefill_backend, why = prefill_backend(self._ckpt.config.talker, self._batch.dtype, s.device)
            log.info("SDPA backend of the prefill: %s (%s)", self._batch.prefill_backend, why)
        if self._batch.use_cuda_graphs and self._ckpt.config.tts_model_type == "base":
            # streaming-text prompts (Base): graphs read the text track by address, so it is sized once, for
            # the longest text a request can read (one row per frame), before any capture
            self._batch.reserve_trailing(min(s.max_frames, s.max_seq_len))
        graphs = self._batch.capture_all()
        if cuda:
            torch.cuda.synchronize()
        self.memory = self._memory_report(mem0, mem_kv, mem_codec, graphs)
        log.info(
            "qwen3 engine memory: %s",
            {k: (f"{v / 2**20:.0f} MiB" if isinstance(v, int) else v) for k, v in self.memory.items()},
        )
        if s.aligner_dir and self.lane.vocoder is not None:  # word timings per request (tts/aligner/lane.py)
            from tts.aligner.lane import load_word_lane

            self.lane.align_words(load_word_lane(s.aligner_dir, s.device, s.dtype, self.deliver, self.sample_rate))

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
        report = {
            "weights": nbytes(model.parameters()) + (nbytes(codec.parameters()) if codec is not None else 0),
            "kv_cache": kv,
            "codec_state": self.lane.state_bytes,
            "graphs": graphs,
        }
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
        self.lane.start()
        self.step_loop.start()

    async def close(self) -> None:
        self.scheduler.close()
        await asyncio.get_running_loop().run_in_executor(None, self.step_loop.join)
        self.lane.shutdown()
        _deliver_all([(stream, EngineError("internal", "engine closed")) for stream in self.scheduler.drain_all()])

    # ------------------------------------------------------------ API
    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        if self._died:
            raise EngineError("engine_unavailable", self._died)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not request.text or not request.text.strip():
            raise EngineError("bad_message", "text is empty")
        check_deadline(request.deadline)
        check_sampling(request.sampling)
        stream = SynthesisStream(request, self)
        self._enqueue(stream, request)
        return stream

    # -- turn mode (tts.qwen3.turn_feed): one stream per agent turn, fed text as it comes
    @property
    def supports_turns(self) -> bool:
        return self._ckpt is None or self._ckpt.tokenizer is not None  # random-weight benches have no text

    def open_turn(self, request: SynthesisRequest) -> TurnStream:
        from tts.qwen3.turn_feed import TurnFeed

        if self._died:
            raise EngineError("engine_unavailable", self._died)
        if self._ckpt is None or self._ckpt.tokenizer is None:
            raise EngineError("unsupported_mode", "this engine has no text tokenizer (random weights): no turn mode")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        check_deadline(request.deadline)
        check_sampling(request.sampling)
        stream = TurnStream(request, self)
        turn = TurnFeed(self._ckpt.tokenizer)
        if request.text:
            turn.inbox += turn.tokenize(request.text)
        self._enqueue(stream, request, turn)
        return stream

    def _enqueue(self, stream, request: SynthesisRequest, turn=None) -> None:
        self.scheduler.enqueue(stream, request, turn)

    def _turn_append(self, stream: TurnStream, text: str) -> None:
        self.scheduler.turn_text(stream, text)

    def _turn_finish(self, stream: TurnStream) -> None:
        self.scheduler.turn_finish(stream)

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
        with self.lane.capture_gate():  # cloning runs on this thread's CUDA stream: never during a graph capture
            cv = self._clones.add(voice)
        if cv.clone.icl and self.lane.vocoder is not None and self.lane.pool is not None:
            # prime the vocoder row now, on the lane, so the voice's first call does not pay the reference decode
            t0 = time.perf_counter()
            self.lane.primed(cv).result()
            cv.prepare_s += time.perf_counter() - t0
        return cv.info()

    def remove_voice(self, name: str) -> bool:
        return self._clones.remove(name) if self._clones is not None else False

    def cloned_voices(self) -> list[dict]:
        return self._clones.infos() if self._clones is not None else []

    def stats(self) -> dict:
        return self.scheduler.stats()

    def _cancel(self, stream: SynthesisStream) -> None:
        self.scheduler.cancel(stream)

    def _update_deadline(self, stream: SynthesisStream, deadline: float) -> None:
        check_deadline(deadline)
        self.scheduler.update_deadline(stream, deadline)

    # ------------------------------------------------------------ diagnostics
    @property
    def _died(self) -> str | None:
        return self.diagnostics.died

    def health(self) -> str | None:
        return self.diagnostics.health()

    def inject_fault(self, kind: str, seconds: float = 3600.0) -> None:
        """Tests: the worker's next step `raise`s, `hang`s for `seconds`, or the worker `die`s."""
        self.diagnostics.inject_fault(kind, seconds)
        self.scheduler.notify()

    def enable_trace(self, stages: bool = True) -> None:
        self.step_loop.enable_trace(stages)

    def watch_syncs(self, on: bool = True) -> None:
        self.step_loop.watch_syncs(on)


def _deliver_all(items: list) -> None:
    """On the event loop: each stream's chunk or error (one callback per vocoder call or failure)."""
    for stream, item in items:
        stream.deliver(item)
