"""The Qwen3 engine's step loop: the worker thread, admission (prompts, prefill) and one batched frame.

Each iteration drops cancelled requests, lets the scheduler pick admissions, prefills them, runs one
batched talker + code-predictor frame for every active slot with ONE wait for the whole batch, and hands
the frames to the vocoder lane. A request's failure fails that request only; a step that raises fails
what was in flight and the worker serves on; a worker that dies fails every stream (none waits forever).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from tts.engine import EngineError, SynthesisRequest
from tts.qwen3.jobs import Job

log = logging.getLogger("voxgate.qwen3")


class StepLoop:
    """Mixin of `Qwen3Engine` (tts/qwen3/engine.py): the state it reads is set up there."""

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
                self._busy_since = t0 = time.monotonic()
                self._iteration()
                self._busy_since = None
                self._note_iteration(time.monotonic() - t0)
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

    def _iteration(self) -> None:
        with self._cond:
            self._drop_cancelled()
            if self._turns_open:
                self._turns_update()
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
            if not admit and not self._slots and self._turns_open:
                with self._cond:  # only turns waiting for text: sleep until text (or anything) arrives
                    if not any(j.pending or j.pcm for j in self._held.values()):
                        self._cond.wait(0.05)
        except Exception as e:  # a device-level failure: fail what was in flight, keep serving
            log.exception("qwen3 worker step failed")
            self._fail_all_active(e)

    def _post(self, fn, *args) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    def _fail(self, job: Job, error: EngineError) -> None:
        self._post(job.stream._fail, error)
        with self._cond:
            self._release(job)
            self._forget(job, "failed")

    def _fail_all_active(self, error: Exception) -> None:
        err = error if isinstance(error, EngineError) else EngineError("internal", f"engine step failed: {error}")
        for job in list(self._held.values()):
            self._fail(job, err)

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

    # -- turn mode (tts.qwen3.turn_feed) ------------------------------------------------
    def _turn_ready(self, job: Job) -> bool:
        """Under the lock: the turn's prefill text is known. Builds its voice head the first time."""
        feed = job.turn
        feed.drain()
        if feed.codec is None:
            if not feed.has_text():
                return False
            try:
                self._turn_head(job)
            except EngineError as e:
                job.cancelled = True
                self._post(job.stream._fail, e)
                return False
        return feed.can_prefill()

    def _turn_head(self, job: Job) -> None:
        import torch

        from tts.qwen3.prompt import PromptError, voice_head

        feed, req, talker = job.turn, job.request, self._ckpt.model.talker
        voice = self._voice(req)
        voice.pop("streaming_text", None)
        cv = voice.pop("clone", None)
        clone = cv.clone if cv is not None else None
        if cv is not None and clone.icl and self._vocoder is not None:
            job.codec_state = self._primed(cv)
        try:
            head = voice_head(talker, self._ckpt.config, self._ckpt.tokenizer, language=req.language, clone=clone, **voice)
        except PromptError as e:
            raise EngineError(e.code, e.message) from None
        with torch.inference_mode():
            feed.head = torch.cat(head.parts)
            if clone is not None and clone.icl:
                feed.prefix = list(clone.ref_ids)
                feed.codec = torch.cat([head.bos_codec, talker.embed_frame(clone.ref_codes.to(head.pad.device))])
            else:
                feed.codec = head.bos_codec
        feed.pad = head.pad
        # body tokens a segment may take: its prompt and frame cap fit the slot (and, under graphs, the text rows)
        room = self.settings.max_seq_len - (feed.head.shape[0] + feed.n_codec) - 1
        if self._batch.use_cuda_graphs:
            room = min(room, self._batch.trailing_capacity)
        feed.limit = max(1, int((room - self.settings.frames_base) / max(self.settings.frames_per_token, 1.0)))
        feed.fill()

    def _turn_prompt(self, job: Job):
        import torch

        from tts.qwen3.prompt import Prompt

        feed, cfg, talker = job.turn, self._ckpt.config, self._ckpt.model.talker
        track = feed.track(cfg.tts_eos_token_id)
        n_c = feed.n_codec
        first = track[:n_c] + [cfg.tts_pad_token_id] * max(0, n_c - len(track))
        dev = feed.head.device
        with torch.inference_mode():
            emb = talker.embed_text(torch.tensor(first + track[n_c:], dtype=torch.long, device=dev))
        prefill = torch.cat([feed.head, emb[:n_c] + feed.codec])
        feed.rows_written = len(track) - n_c if len(track) > n_c else 0
        feed.eos_written = feed.finished
        return Prompt(prefill=prefill, trailing_text=emb[n_c:], pad=feed.pad, text_tokens=len(feed.body))

    def _turn_cap(self, job: Job) -> int:
        """The stream's frame count at which this segment ends at the latest."""
        feed = job.turn
        length = job.prompt.prefill.shape[0]
        room = min(self.settings.max_frames, self.settings.max_seq_len - length - 1)
        if feed.finished:
            room = max(1, min(room, int(self.settings.frames_base + self.settings.frames_per_token * len(feed.body))))
        return feed.frame0 + room

    def _next_segment(self, slot: int, job: Job) -> None:
        """Under the lock: a cut turn's segment ended; the stream continues with a fresh prompt (re-queued,
        its vocoder row kept, as a preempted stream's is)."""
        job.turn.next_segment(job.generated)
        self._batch.release(slot)
        del self._slots[slot]
        if self._vstate is not None:
            job.codec_state = self._on_lane(self._vstate.select, [slot])
        if self._held.get(slot) is job:
            del self._held[slot]
        job.slot, job.prompt, job.paused = None, None, False
        self.counters["turn_segments"] = self.counters.get("turn_segments", 0) + 1
        self._queue.append(job)

    def _turns_update(self) -> None:
        """Under the lock: new text into the turns' slots; pause the rows whose next text row is missing,
        resume the ones whose text came; hold end-of-speech until `tts_eos` is in the track."""
        import torch

        cfg = self._ckpt.config
        for slot, job in list(self._held.items()):
            feed = job.turn
            if feed is None or job.cancelled or not job.generating:
                continue
            feed.drain()
            track = feed.track(cfg.tts_eos_token_id)
            n_c = feed.n_codec
            rows = len(track) - n_c
            if rows > feed.rows_written:
                with torch.inference_mode():
                    emb = self._ckpt.model.talker.embed_text(torch.tensor(track[n_c + feed.rows_written:],
                                                                          dtype=torch.long, device=feed.head.device))
                self._batch.write_text(slot, feed.rows_written, emb)
                feed.rows_written = rows
            if feed.finished and not feed.eos_written:
                feed.eos_written = True
            if feed.finished and job.cap != self._turn_cap(job):
                job.cap = self._turn_cap(job)
                self._batch.set_eos_at(slot, feed.eos_row())
            waiting = not feed.eos_written and job.generated - feed.frame0 >= feed.rows_written
            if waiting and not job.paused:
                job.paused = True
                self._batch.set_active(slot, False)
                self._slots.pop(slot, None)
                self.counters["turn_pauses"] = self.counters.get("turn_pauses", 0) + 1
            elif not waiting and job.paused:
                job.paused = False
                self._batch.set_active(slot, True)
                self._slots[slot] = job

    def _prompt(self, job: Job):
        from tts.qwen3.prompt import PromptError, build_prompt

        req = job.request
        if job.turn is not None:
            return self._turn_prompt(job)
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

    def _resume_prompt(self, job: Job):
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

    def _admit(self, jobs: list[Job], free: list[int]) -> None:
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
                    if job.turn is not None:
                        cap = self._turn_cap(job)
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
        for job, slot in zip(ready, slots):
            if job.turn is not None:  # end-of-speech held until tts_eos; paused at once if its text ran out
                self._batch.set_eos_at(slot, job.turn.eos_row())
        if any(job.turn is not None for job in ready):
            with self._cond:
                self._turns_update()
        if self._batch.device.type == "cuda" and self.trace is not None:
            torch.cuda.synchronize()
        if self.step_times is not None:
            self.prefill_times.append((len(ready), sum(p.prefill.shape[0] for p in prompts),
                                       time.perf_counter() - t0, time.perf_counter()))
        self.counters["admitted"] += len(ready)
        self._span("prefill", t0, {"rows": len(ready)})
        self.timings["prefill"] += time.perf_counter() - t0

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
                if job.turn is not None:
                    job.turn.note_frame(job.generated)
                ended = (out[slot, groups] == eos and not self.settings.ignore_eos) or job.generated >= job.cap
                if ended and job.turn is not None and job.turn.has_next_segment():
                    self._next_segment(slot, job)
                    continue
                if ended:
                    job.generating = False
                    self._batch.release(slot)
                    del self._slots[slot]  # the slot stays held until its last frames are vocoded
        dt = time.perf_counter() - t0
        self.timings["step"] += dt
        self.recent_step_s.append(dt)
        if self.step_times is not None:
            self.step_times.append((bucket, self._batch.last_kv_len, dt, time.perf_counter()))
