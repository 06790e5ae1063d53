"""The Qwen3 engine's step loop (the executor): the worker thread, the device, the batch and its graphs.

Each iteration asks the scheduler (tts.qwen3.scheduler) for a plan, carries out its device work (row
releases, saved vocoder rows, compaction moves, turn text rows), builds the admissions' prompts and
prefills them, runs one batched talker + code-predictor frame for every generating slot with ONE wait for
the whole batch, reports the codes back (`Scheduler.update`) and hands the frames to the vocoder lane.
Every torch call here runs with the scheduler's lock released. The loop knows a request by its id (`rid`)
and keeps its own device state for it (`RequestState`: prompt, turn voice head, saved vocoder row) until
the scheduler's `Drop`. A request's failure fails that request
only; a step that raises fails what was in flight and the worker serves on; a worker that dies fails every
stream (none waits forever).
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from tts.engine import EngineError, SynthesisRequest
from tts.qwen3.scheduler import (
    Admission,
    Drop,
    EosAt,
    Move,
    Release,
    SaveRow,
    Scheduler,
    SetActive,
    StepResult,
    WriteText,
)
from tts.qwen3.staging import to_device

log = logging.getLogger("voxgate.qwen3")


class RequestState:
    """The step loop's own state for one request (device tensors and futures; the worker thread alone)."""

    __slots__ = ("prompt", "head", "codec", "pad", "saved_row")

    def __init__(self):
        self.prompt = None  # tts.qwen3.prompt.Prompt, kept to resume after preemption
        self.head = self.codec = self.pad = None  # a turn's voice head, codec track and pad row
        self.saved_row = None  # future of its vocoder state row while it has no slot (or a clone's primed row)


class StepLoop:
    def __init__(self, settings, scheduler: Scheduler, lane, diagnostics, deliver):
        self.settings = settings
        self.scheduler = scheduler
        self.lane = lane  # tts.qwen3.vocoder_lane.VocoderLane
        self.diag = diagnostics
        self.deliver = deliver  # Qwen3Engine.deliver: (stream, chunk or error) pairs to the callers
        self.ckpt = None  # tts.qwen3.checkpoint.Checkpoint
        self.batch = None  # tts.qwen3.batch.TalkerBatch
        self.clones = None  # tts.qwen3.cloned_voices.ClonedVoices (Base checkpoints)
        self.tally = None  # tts.qwen3.syncs.SyncTally while watching
        self.thread: threading.Thread | None = None
        self._stage_reset = None
        self.requests: dict[int, RequestState] = {}  # by rid

    def _state(self, rid: int) -> RequestState:
        st = self.requests.get(rid)
        if st is None:
            st = self.requests[rid] = RequestState()
        return st

    def attach(self, ckpt, batch, clones) -> None:
        self.ckpt, self.batch, self.clones = ckpt, batch, clones

    # ------------------------------------------------------------ thread
    def start(self) -> None:
        if self.thread is None:
            self.scheduler.open()
            self.thread = threading.Thread(target=self.run, name="qwen3-worker", daemon=True)
            self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def watch_syncs(self, on: bool = True) -> None:
        """Count host syncs by watching every op of the worker and the vocoder lane (from the next step)."""
        from tts.qwen3.syncs import SyncTally

        self.tally = SyncTally() if on else None
        self.lane.watch(self.tally)
        self.scheduler.set_counter("host_syncs", 0 if on else None)

    def run(self) -> None:
        from tts.qwen3 import syncs

        if self.settings.watch_syncs and self.tally is None:
            self.watch_syncs(True)
        tally = None
        watch = syncs.watching(None)
        watch.__enter__()
        try:
            while self.scheduler.wait_for_work():
                if self.tally is not tally:  # (re)enter the watch on this thread when it is switched
                    watch.__exit__(None, None, None)
                    tally = self.tally
                    watch = syncs.watching(tally)
                    watch.__enter__()
                self.diag.busy_since = t0 = time.monotonic()
                held = self.iteration()
                self.diag.busy_since = None
                self.lane.note_iteration(time.monotonic() - t0, held)
        except BaseException as exc:  # noqa: BLE001 - the worker is ending: no stream may wait on it forever
            self.diag.died = f"the engine worker stopped ({type(exc).__name__}: {exc})"
            log.error("%s; its requests fail and new ones are refused", self.diag.died)
            error = EngineError("engine_error", self.diag.died)
            self.deliver([(stream, error) for stream in self.scheduler.drain_all()])
            self.requests.clear()
        finally:
            watch.__exit__(None, None, None)
            self.lane.join()

    def iteration(self) -> int:
        """One step; returns the slots held while it ran (the vocoder lane's small-batch choice)."""
        sched = self.scheduler
        if sched.turns_open:
            for rid, request in sched.turns_needing_heads():
                self._turn_head(rid, request)
        plan = sched.schedule()
        held = 0
        try:
            self.apply(plan.ops)
            if plan.admit:
                self.admit(plan.admit)
            if self.diag.fault is not None:
                self.diag.fault_point()
            rows = sched.rows()
            if rows:
                self.step(rows)
            self.lane.join()
            work = sched.vocoder_work()
            held = work.held
            self.lane.hand_over(work)
            if not plan.admit and not rows and sched.turns_open:
                sched.wait_for_text()
        except Exception as e:  # a device-level failure: fail what was in flight, keep serving
            log.exception("qwen3 worker step failed")
            self._fail_all_active(e)
        return held

    def apply(self, ops: list) -> None:
        """The device work of the scheduler's decisions, in its order."""
        batch, lane = self.batch, self.lane
        for op in ops:
            if isinstance(op, Release):
                batch.release(op.slot)
            elif isinstance(op, SaveRow):  # after the lane's work in flight on that row
                self._state(op.rid).saved_row = lane.save_row(op.slot)
            elif isinstance(op, Move):
                batch.move(op.src, op.dst)
                lane.move_row(op.src, op.dst)
            elif isinstance(op, WriteText):
                import torch

                with torch.inference_mode():
                    rows = self.ckpt.model.talker.embed_text(to_device(op.ids, batch.device, torch.long))
                batch.write_text(op.slot, op.start, rows)
            elif isinstance(op, EosAt):
                batch.set_eos_at(op.slot, op.row)
            elif isinstance(op, SetActive):
                batch.set_active(op.slot, op.on)
            elif isinstance(op, Drop):
                self.requests.pop(op.rid, None)
            else:
                raise TypeError(f"unknown scheduler op {op!r}")

    def fail(self, rid: int, error: EngineError) -> None:
        self.requests.pop(rid, None)
        stream = self.scheduler.fail(rid)
        if stream is not None:
            self.deliver([(stream, error)])

    def _fail_all_active(self, error: Exception) -> None:
        err = error if isinstance(error, EngineError) else EngineError("internal", f"engine step failed: {error}")
        for rid in self.scheduler.held_rids():
            self.fail(rid, err)

    # ------------------------------------------------------------ prompts
    def _voice(self, request: SynthesisRequest) -> dict:
        cfg = self.ckpt.config
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
        return {"clone": self.clones.get(request.voice), "streaming_text": True}

    def _turn_head(self, rid: int, req: SynthesisRequest) -> None:
        """A turn's voice head (and an in-context clone's reference frames), built once its first text came."""
        import torch

        from tts.qwen3.prompt import PromptError, voice_head

        talker, st = self.ckpt.model.talker, self._state(rid)
        try:
            voice = self._voice(req)
            voice.pop("streaming_text", None)
            cv = voice.pop("clone", None)
            clone = cv.clone if cv is not None else None
            if cv is not None and clone.icl and self.lane.vocoder is not None:
                st.saved_row = self.lane.primed(cv)
            head = voice_head(
                talker, self.ckpt.config, self.ckpt.tokenizer, language=req.language, clone=clone, **voice
            )
        except PromptError as e:
            self.fail(rid, EngineError(e.code, e.message))
            return
        except EngineError as e:
            self.fail(rid, e)
            return
        except Exception as e:  # noqa: BLE001 - one turn's bug fails that turn only
            log.exception("turn voice head failed")
            self.fail(rid, EngineError("internal", f"could not prepare the turn: {e}"))
            return
        prefix = []
        with torch.inference_mode():
            st.head = torch.cat(head.parts)
            if clone is not None and clone.icl:
                prefix = list(clone.ref_ids)
                st.codec = torch.cat([head.bos_codec, talker.embed_frame(clone.ref_codes.to(head.pad.device))])
            else:
                st.codec = head.bos_codec
        st.pad = head.pad
        head_len, n_codec = int(st.head.shape[0]), int(st.codec.shape[0])
        room = self.settings.max_seq_len - (head_len + n_codec) - 1
        if self.batch.use_cuda_graphs:  # under graphs the text rows are sized once
            room = min(room, self.batch.trailing_capacity)
        self.scheduler.head_built(rid, head_len, n_codec, prefix, room)

    def _turn_prompt(self, adm: Admission):
        """A turn segment's prompt: its voice head, then the text track so far over the codec track."""
        import torch

        from tts.qwen3.prompt import Prompt

        st, cfg, talker = self.requests[adm.rid], self.ckpt.config, self.ckpt.model.talker
        track = list(adm.track)
        n_c = int(st.codec.shape[0])
        first = track[:n_c] + [cfg.tts_pad_token_id] * max(0, n_c - len(track))
        dev = st.head.device
        with torch.inference_mode():
            emb = talker.embed_text(to_device(first + track[n_c:], dev, torch.long))
        prefill = torch.cat([st.head, emb[:n_c] + st.codec])
        return Prompt(prefill=prefill, trailing_text=emb[n_c:], pad=st.pad, text_tokens=adm.text_tokens)

    def _prompt(self, adm: Admission):
        from tts.qwen3.prompt import PromptError, build_prompt

        req = adm.request
        if adm.turn:
            return self._turn_prompt(adm)
        try:
            if self.ckpt.tokenizer is None:  # random-weight benches: a prompt of the right length, no text
                return self._bench_prompt(req.text)
            voice = self._voice(req)
            cv = voice.get("clone")
            if cv is not None:
                voice["clone"] = cv.clone
                if cv.clone.icl and self.lane.vocoder is not None:  # the vocoder row continues after the reference
                    self._state(adm.rid).saved_row = self.lane.primed(cv)
            return build_prompt(
                self.ckpt.model.talker, self.ckpt.config, self.ckpt.tokenizer, req.text, language=req.language, **voice
            )
        except PromptError as e:
            raise EngineError(e.code, e.message) from None

    def _resume_prompt(self, p, codes: np.ndarray):
        import torch

        from tts.qwen3.prompt import Prompt

        talker = self.ckpt.model.talker
        codes = to_device(codes, p.prefill.device, torch.long)
        n, n_text = codes.shape[0], p.trailing_text.shape[0]
        text = torch.stack([p.trailing_text[i] if i < n_text else p.pad for i in range(n)])
        with torch.inference_mode():
            frames = talker.embed_frame(codes) + text
        return Prompt(
            prefill=torch.cat([p.prefill, frames]), trailing_text=p.trailing_text, pad=p.pad, text_tokens=p.text_tokens
        )

    def _bench_prompt(self, text: str):
        import torch

        from tts.qwen3.prompt import Prompt

        talker, cfg = self.ckpt.model.talker, self.ckpt.config
        n = max(1, len(text) // 4)  # about one token per 4 characters
        dev = talker.codec_head.weight.device
        g = torch.Generator(device=dev).manual_seed(len(text))
        ids = torch.randint(0, cfg.talker.text_vocab_size, (n + 12,), generator=g, device=dev)
        pad = talker.embed_text(to_device([cfg.tts_pad_token_id], dev, torch.long))[0]
        return Prompt(
            prefill=talker.embed_text(ids), trailing_text=pad.new_zeros((0, pad.shape[0])), pad=pad, text_tokens=n
        )

    def _sampling(self, req: SynthesisRequest) -> tuple[dict, dict]:
        s, gen = req.sampling, self.ckpt.generation
        talker = dict(
            temperature=float(s.temperature),
            top_k=int(s.top_k),
            top_p=float(s.top_p),
            greedy=s.greedy,
            repetition_penalty=1.0 if s.greedy else float(s.repetition_penalty),
        )
        predictor = dict(
            temperature=gen.subtalker_temperature if not s.greedy else 1.0,
            top_k=gen.subtalker_top_k,
            top_p=gen.subtalker_top_p,
            greedy=s.greedy or not gen.subtalker_dosample,
        )
        return talker, predictor

    # ------------------------------------------------------------ admission and the step
    def admit(self, admissions: tuple[Admission, ...]) -> None:
        """Prompts for the admissions (a resumed one: its prompt and every frame so far), one batched prefill."""
        import torch

        t0 = time.perf_counter()
        ready, prompts, tset, pset, resumes = [], [], [], [], []
        for adm in admissions:
            try:
                if adm.resume is None:
                    prompt = self._prompt(adm)
                    self._state(adm.rid).prompt = prompt
                    self.scheduler.prompt_built(adm.rid, int(prompt.prefill.shape[0]), prompt.text_tokens)
                    resume = None
                else:  # resuming after preemption: the prompt plus every frame so far, in one prefill
                    prompt = self._resume_prompt(self.requests[adm.rid].prompt, adm.resume.codes)
                    resume = (adm.resume.next_code0, adm.resume.codes)
                ts, ps = self._sampling(adm.request)
            except EngineError as e:
                self.fail(adm.rid, e)
                continue
            except Exception as e:  # noqa: BLE001 - one request's bug fails that request only
                log.exception("prompt failed")
                self.fail(adm.rid, EngineError("internal", f"could not prepare the request: {e}"))
                continue
            ready.append(adm.rid)
            resumes.append(resume)
            prompts.append(prompt)
            tset.append(ts)
            pset.append(ps)
        if not ready:
            return
        slots = self.scheduler.admitted(ready)
        lane, fresh = self.lane, []
        for rid, slot, resume in zip(ready, slots, resumes):
            st = self.requests[rid]
            if st.saved_row is not None:  # preempted, a turn's next segment, or a clone's primed row
                lane.restore_row(slot, st.saved_row)
                st.saved_row = None
            elif resume is None:
                fresh.append(slot)
        lane.reset_rows(fresh)
        self.batch.admit(slots, prompts, tset, pset, resumes)
        self.apply(self.scheduler.after_prefill(ready))
        diag = self.diag
        if self.batch.device.type == "cuda" and diag.trace is not None:
            torch.cuda.synchronize()
        if diag.step_times is not None:
            diag.prefill_times.append(
                (len(ready), sum(p.prefill.shape[0] for p in prompts), time.perf_counter() - t0, time.perf_counter())
            )
        diag.span("prefill", t0, {"rows": len(ready)})
        diag.timings["prefill"] += time.perf_counter() - t0

    def step(self, n_rows: int) -> None:
        """One batched frame for rows 0..n_rows-1, its codes read in one wait, handed to the scheduler."""
        t0 = time.perf_counter()
        diag, batch = self.diag, self.batch
        if batch.stage_marks is not None:
            self._stage_reset()
        bucket = batch.launch(n_rows)
        t_launch = time.perf_counter()
        out = batch.read(n_rows)  # the step's one wait: codes and next tokens of the whole batch
        if diag.trace is not None:
            diag.trace.append(
                (
                    "decode_step" if batch.use_cuda_graphs else "decode_step (eager)",
                    t0,
                    t_launch - t0,
                    {"rows": n_rows, "bucket": bucket, "kv_len": batch.last_kv_len},
                )
            )
            diag.trace.append(("host_sync", t_launch, time.perf_counter() - t_launch, {"rows": n_rows}))
        tally = self.tally
        self.apply(self.scheduler.update(StepResult(out, batch.groups, tally.count if tally is not None else None)))
        dt = time.perf_counter() - t0
        diag.timings["step"] += dt
        diag.recent_step_s.append(dt)
        if diag.step_times is not None:
            diag.step_times.append((bucket, batch.last_kv_len, dt, time.perf_counter()))

    def enable_trace(self, stages: bool = True) -> None:
        """Record spans; with `stages` (eager only) also code_predictor / talker_step / sampling inside each
        step, synchronising the device between them (slower: for traces, not numbers)."""
        diag = self.diag
        diag.trace = []
        if stages and self.batch is not None and not self.batch.use_cuda_graphs:
            import torch

            cuda = self.batch.device.type == "cuda"
            last = [time.perf_counter()]

            def mark(name: str) -> None:
                if cuda:
                    torch.cuda.synchronize()
                now = time.perf_counter()
                diag.trace.append((name, last[0], now - last[0], {}))
                last[0] = now

            def reset() -> None:
                last[0] = time.perf_counter()

            self.batch.stage_marks = mark
            self._stage_reset = reset
