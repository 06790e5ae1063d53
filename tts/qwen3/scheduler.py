"""The Qwen3 engine's scheduler: who holds which slot, and what each step does. Host state only.

It owns the queue, the slots, earliest-deadline-first admission under a prefill budget (the head always
fits), preemption of a stream seconds from running dry for one needed sooner (it resumes later by
re-prefilling its frames), turn-mode pauses, and compaction of the slots so the batch bucket follows the
live streams. It does no device work and imports no torch: what the device must do follows from its
decisions as `Op`s, which the step loop (tts.qwen3.step_loop) carries out after the lock is released.

The contract with the step loop (the executor), once per iteration on the worker thread. What crosses it
is plain frozen data keyed by request id (`rid`): the scheduler's `Job`s never leave it, and the step loop
and the vocoder lane keep their own per-request state (prompts, voice heads, saved vocoder rows):

    plan = scheduler.schedule()            # StepPlan: ops to run in order, then the Admissions
    ... the step loop runs plan.ops, builds each admission's prompt and reports it:
    scheduler.prompt_built(rid, positions, text_tokens)   # its frame cap (or `text_too_long`)
    slots = scheduler.admitted(rids)       # they hold these slots
    ops = scheduler.after_prefill(rids)    # turn rows for them
    rows = scheduler.rows()                # the step's batch rows (0: no step)
    ops = scheduler.update(StepResult)     # the step's codes: frames, ends, turn segments
    work = scheduler.vocoder_work()        # VocoderTasks for the vocoder lane

The event loop calls `enqueue`, `turn_text`, `turn_finish`, `cancel`, `update_deadline`, `stats`; the
vocoder lane `delivered`, `fail`, `count`. Every method that reads or changes the shared state takes
`lock` itself; torch never runs while it is held (tests/engine/test_engine_lock.py), nor the tokenizer
on a new request's text (its prompt-length estimate is made before the lock), so the event loop never
waits on a device or on another request's text.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

import numpy as np

from tts.engine import EngineError, SynthesisRequest
from tts.qwen3.jobs import FRAME_S, EngineSettings, Job, frame_cap, tokens_within


# -- device work the scheduler's decisions need, run by the step loop in this order ----------------
@dataclass(frozen=True)
class Release:
    """The talker row of `slot` stops generating (its cache row may be reused)."""

    slot: int


@dataclass(frozen=True)
class SaveRow:
    """Request `rid` leaves `slot` for a while (preempted, or a turn's next segment): keep its vocoder row."""

    rid: int
    slot: int


@dataclass(frozen=True)
class Move:
    """Compaction: the stream in `src` moves down into `dst` (KV rows, sampler state, vocoder row)."""

    src: int
    dst: int


@dataclass(frozen=True)
class WriteText:
    """Turn mode: text-track rows `start`.. of `slot` from these text ids."""

    slot: int
    start: int
    ids: tuple


@dataclass(frozen=True)
class EosAt:
    """Turn mode: end-of-speech allowed in `slot` from this trailing row on."""

    slot: int
    row: int


@dataclass(frozen=True)
class SetActive:
    """Turn mode: the row of `slot` pauses (waits for its text) or resumes."""

    slot: int
    on: bool


@dataclass(frozen=True)
class Drop:
    """Request `rid` is over (done, failed or cancelled): the step loop forgets its state for it."""

    rid: int


Op = Release | SaveRow | Move | WriteText | EosAt | SetActive | Drop


@dataclass(frozen=True)
class Resume:
    """A preempted stream coming back: every frame so far and its next codebook-0 token."""

    codes: np.ndarray  # [frames, groups], a copy made for this admission
    next_code0: int


@dataclass(frozen=True)
class Admission:
    """A request to prefill this step. A new one's prompt is built from `request`; a resumed one re-prefills
    its kept prompt and `resume`'s frames; a turn's segment from its voice head and this text `track` (the
    rows so far: `text_tokens` text tokens, the first `n_codec` in the prefill)."""

    rid: int
    request: SynthesisRequest
    resume: Resume | None = None
    turn: bool = False
    track: tuple = ()
    text_tokens: int = 0


@dataclass(frozen=True)
class StepPlan:
    ops: tuple = ()  # to run in order, before the admission
    admit: tuple = ()  # Admissions to prefill this step (EDF order)


@dataclass(frozen=True)
class VocoderTask:
    """Frames of request `rid` (in `slot`'s vocoder row) to decode and hand to its caller as one chunk."""

    rid: int
    slot: int
    frames: tuple  # the codes, one array per frame (empty: only the stream's end)
    last: bool
    frame_index: int  # the chunk's first frame within the request
    text_end: int | None = None  # turn mode: the text spoken once this chunk has played
    turn: bool = False  # a turn-mode request's


@dataclass
class StepResult:
    out: np.ndarray  # [rows, groups + 1]: each row's codes and its next codebook-0 token
    groups: int
    host_syncs: int | None = None  # the sync watch's count so far (None: not watching)


@dataclass(frozen=True)
class VocoderWork:
    tasks: tuple  # VocoderTasks in EDF order
    owners: frozenset  # every held slot (a request owns it)
    held: int  # slots held this step (before the releases of the streams that ended)


class Scheduler:
    def __init__(
        self, settings: EngineSettings, *, cuda: bool = False, tokenizer=None, eos_id: int = -1, tts_eos_id: int = -1
    ):
        self.settings = settings
        # an RLock underneath: who holds it is known (`held_by_me`), which the lock test checks
        self.lock = threading.Condition(threading.RLock())
        self.queue: list[Job] = []
        self.jobs: dict[int, Job] = {}  # by stream id (the event loop's calls come with the stream)
        self.by_rid: dict[int, Job] = {}
        self.slots: dict[int, Job] = {}  # slot -> job whose talker row is generating
        self.held: dict[int, Job] = {}  # slot -> job owning it (generating, paused, or vocoding its last frames)
        self.turns_open = 0  # turn-mode requests ever opened (turn bookkeeping runs only once there is one)
        self.closed = False
        self.counters = {
            "steps": 0,
            "host_syncs": None,
            "frames": 0,
            "admitted": 0,
            "completed": 0,
            "failed": 0,
            "cancelled": 0,
            "preempted": 0,
            "vocoder_calls": 0,
            "audio_s": 0.0,
            "compacted": 0,
            "prefill_deferred": 0,
            "vocoder_waited": 0,
            "vocoder_overlapped": 0,
            "vocoder_mode_switches": 0,
        }
        self.tokenizer = tokenizer  # for prompt-length estimates only
        self.eos_id, self.tts_eos_id = eos_id, tts_eos_id  # codec end-of-speech; the text track's end
        self.prefill_budget = settings.prefill_budget_tokens or (1024 if cuda else 256)
        self._seq = itertools.count()
        self._ops: list = []  # device work decided under the lock, handed to the step loop at its next call

    def bind(self, tokenizer, eos_id: int, tts_eos_id: int, *, cuda: bool) -> None:
        """The loaded checkpoint's ids (and its device's default prefill budget)."""
        self.tokenizer, self.eos_id, self.tts_eos_id = tokenizer, eos_id, tts_eos_id
        self.prefill_budget = self.settings.prefill_budget_tokens or (1024 if cuda else 256)

    def held_by_me(self) -> bool:
        return self.lock._is_owned()

    # ------------------------------------------------------------ event loop side
    def enqueue(self, stream, request, turn=None) -> int:
        """Queue a new stream's request (a turn-mode stream with its TurnFeed) and return its id, or refuse it
        with "overloaded" when max_queued requests are already waiting."""
        est = None if turn is not None else self._estimate(request)  # the tokenizer runs before the lock
        with self.lock:
            if len(self.queue) >= self.settings.max_queued:
                raise EngineError("overloaded", f"engine queue is full ({self.settings.max_queued} requests waiting)")
            job = Job(stream, request, next(self._seq), request.deadline, est_len=est)
            if turn is not None:
                job.turn = turn
                self.turns_open += 1
            self.queue.append(job)
            self.jobs[id(stream)] = self.by_rid[job.rid] = job
            self.lock.notify()
            return job.rid

    def _estimate(self, request) -> int:
        """Prompt positions of a new request, estimated for the prefill budget: role/control tokens + the
        text's tokens (instruction included)."""
        text = request.text + (request.instruct or "")
        try:
            return 16 + (len(self.tokenizer.encode(text)) if self.tokenizer is not None else len(text) // 4)
        except Exception:  # noqa: BLE001 - an estimate only; the prompt build reports real errors
            return 16 + len(text)

    def turn_text(self, stream, text: str) -> None:
        self._turn_tokens(stream, text)

    def turn_finish(self, stream) -> None:
        self._turn_tokens(stream, None)

    def _turn_tokens(self, stream, text: str | None) -> None:
        """The event loop's text for a turn (None: its end), tokenised before the lock is taken (the loop thread
        alone feeds a turn's tokenizer), then handed to the worker under it."""
        with self.lock:
            job = self.jobs.get(id(stream))
        feed = job.turn if job is not None else None
        if feed is None:
            return
        tokens = feed.tokenize(text) if text is not None else feed.tokenize_end()
        with self.lock:
            feed.inbox += tokens
            feed.finish_asked = feed.finish_asked or text is None
            self.lock.notify()

    def cancel(self, stream) -> None:
        with self.lock:
            job = self.jobs.get(id(stream))
            if job is not None:
                job.cancelled = True
                self.lock.notify()

    def update_deadline(self, stream, deadline: float) -> None:
        with self.lock:
            job = self.jobs.get(id(stream))
            if job is not None:
                job.deadline = deadline - job.vocoded * FRAME_S

    def stats(self) -> dict:
        with self.lock:
            return {"queued": len(self.queue), "active": len(self.slots), **self.counters}

    def open(self) -> None:
        with self.lock:
            self.closed = False

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()

    def notify(self) -> None:
        with self.lock:
            self.lock.notify_all()

    def count(self, name: str, n: float = 1, host_syncs: int | None = None) -> None:
        with self.lock:
            self.counters[name] += n
            if host_syncs is not None:
                self.counters["host_syncs"] = host_syncs

    def set_counter(self, name: str, value) -> None:
        with self.lock:
            self.counters[name] = value

    # ------------------------------------------------------------ worker side
    def wait_for_work(self) -> bool:
        """Block until there is a queued or held job; False once closed."""
        with self.lock:
            while not self.closed and not self.queue and not self.held:
                self.lock.wait()
            return not self.closed

    def wait_for_text(self, timeout: float = 0.05) -> None:
        """Only turns waiting for text hold the worker: sleep until text (or anything) arrives."""
        with self.lock:
            if not any(j.pending for j in self.held.values()):
                self.lock.wait(timeout)

    def turns_needing_heads(self) -> list[tuple[int, SynthesisRequest]]:
        """(rid, request) of the queued turns whose first text arrived but whose voice head (a device build)
        is not made yet."""
        with self.lock:
            need = []
            for job in self.queue:
                feed = job.turn
                if feed is not None and not job.cancelled and not feed.has_head and not job.prompted:
                    feed.drain()
                    if feed.has_text():
                        need.append((job.rid, job.request))
            return need

    def head_built(self, rid: int, head_len: int, n_codec: int, prefix: list[int], room: int) -> None:
        """The turn's voice head is made (`head_len` positions, then `n_codec` codec-track positions under the
        text `prefix`): `room` positions of its slot are left for a segment's text and frames, which sets how
        many text tokens a segment may take (its prompt and frame cap fit the slot)."""
        s = self.settings
        with self.lock:
            job = self.by_rid.get(rid)
            if job is None:
                return
            feed = job.turn
            feed.head_len, feed.n_codec, feed.prefix = head_len, n_codec, list(prefix)
            feed.limit = max(1, tokens_within(room, s.frames_base, s.frames_per_token))
            feed.fill()

    def schedule(self) -> StepPlan:
        """This step's plan: cancelled jobs leave, turns take their new text, the queue is sorted by when each
        stream's audio runs out, urgent ones preempt, slots compact, and the admissions are taken."""
        with self.lock:
            self._drop_cancelled()
            if self.turns_open:
                self._turns_update()
            self.queue.sort(key=lambda j: (j.priority, j.seq))
            self._preempt_for_deadlines()
            if self.settings.compact:
                self._compact()
            free = sum(1 for s in range(self.settings.max_batch) if s not in self.held)
            admit = [self._admission(job) for job in self._take_admissions(free)]
            return StepPlan(tuple(self._take_ops()), tuple(admit))

    def _admission(self, job: Job) -> Admission:
        if job.turn is not None:  # a segment's prompt: the text track so far (those rows are then written)
            feed = job.turn
            track = feed.track(self.tts_eos_id)
            feed.rows_written = max(0, len(track) - feed.n_codec)
            feed.eos_written = feed.finished
            return Admission(job.rid, job.request, turn=True, track=tuple(track), text_tokens=len(feed.body))
        if job.prompted:  # resuming after preemption: its prompt plus every frame so far
            return Admission(job.rid, job.request, Resume(np.stack(job.codes), job.next_code0))
        return Admission(job.rid, job.request)

    def prompt_built(self, rid: int, positions: int, text_tokens: int) -> None:
        """Request `rid`'s prompt is built: `positions` long, from `text_tokens` text tokens. Sets its frame cap;
        refuses (EngineError `text_too_long`) a text whose prompt leaves no room in a slot."""
        with self.lock:
            job = self.by_rid[rid]
            job.prompt_len, job.text_tokens = positions, text_tokens
            job.cap = self._cap(job)
            job.prompted = True

    def _cap(self, job: Job) -> int:
        """The frame count at which this job (its prompt built) ends at the latest."""
        s = self.settings
        room = min(s.max_frames, s.max_seq_len - job.prompt_len - 1)
        if job.turn is not None:  # a segment: its cap counts from the stream's frames before it
            feed = job.turn
            if feed.finished:
                room = max(1, min(room, frame_cap(len(feed.body), s.frames_base, s.frames_per_token)))
            cap = feed.frame0 + room
        else:
            cap = min(frame_cap(job.text_tokens, s.frames_base, s.frames_per_token), room)
        if cap < 1:
            raise EngineError(
                "text_too_long",
                f"text needs {job.prompt_len} prompt positions; the engine holds {s.max_seq_len} per request",
            )
        return cap

    def admitted(self, rids: list[int]) -> list[int]:
        """These requests (prompts built) take the lowest free slots from now, in order; their prefill follows."""
        with self.lock:
            free = (s for s in range(self.settings.max_batch) if s not in self.held)
            slots = []
            now = time.monotonic()
            for rid, slot in zip(rids, free):
                job = self.by_rid[rid]
                job.slot = slot
                job.admitted_at = job.admitted_at or now
                self.slots[slot] = self.held[slot] = job
                slots.append(slot)
            self.counters["admitted"] += len(slots)
            return slots

    def after_prefill(self, rids: list[int]) -> list:
        """Turns just prefilled: end-of-speech held until their `tts_eos`, paused at once if their text ran out."""
        with self.lock:
            jobs = [self.by_rid[r] for r in rids if r in self.by_rid]
            turns = [j for j in jobs if j.turn is not None and j.slot is not None]
            for job in turns:
                self._ops.append(EosAt(job.slot, job.turn.eos_row()))
            if turns:
                self._turns_update()
            return self._take_ops()

    def rows(self) -> int:
        """Batch rows this step runs (the highest generating slot + 1; 0: nothing generates)."""
        with self.lock:
            return max(self.slots) + 1 if self.slots else 0

    def update(self, result: StepResult) -> list:
        """The step's codes: each generating stream takes its frame; streams that ended give up their row,
        a cut turn goes on in a fresh prompt. Returns the device work this needs."""
        out, groups = result.out, result.groups
        with self.lock:
            self.counters["steps"] += 1
            if result.host_syncs is not None:
                self.counters["host_syncs"] = result.host_syncs
            for slot, job in list(self.slots.items()):
                if job.cancelled:
                    continue
                job.pending.append(out[slot, :groups].copy())
                job.codes.append(job.pending[-1])
                job.next_code0 = int(out[slot, groups])
                job.generated += 1
                self.counters["frames"] += 1
                if job.turn is not None:
                    job.turn.note_frame(job.generated)
                ended = (out[slot, groups] == self.eos_id and not self.settings.ignore_eos) or job.generated >= job.cap
                if ended and job.turn is not None and job.turn.has_next_segment():
                    self._next_segment(slot, job)
                elif ended:
                    job.generating = False
                    self._ops.append(Release(slot))
                    del self.slots[slot]  # the slot stays held until its last frames are vocoded
            return self._take_ops()

    def vocoder_work(self) -> VocoderWork:
        """The streams whose pending frames make their next packet (1, 2, 4 ... frames), or that ended, in EDF
        order (at most `vocoder_rows`), their frames taken; a stream whose last frames these are frees its
        slot now (its vocoder row's next user is reset on the lane after this work)."""
        s = self.settings
        ramp = s.packet_ramp
        with self.lock:
            live = [j for j in self.held.values() if not j.cancelled and not j.finished]
            owners = frozenset(slot for slot, job in self.held.items() if not job.cancelled)
            held = len(self.held)
            # a turn paused for its text hands over what it has: the caller would hear a gap otherwise
            todo = sorted(
                (
                    j
                    for j in live
                    if j.pending
                    and (len(j.pending) >= ramp[min(j.packets, len(ramp) - 1)] or not j.generating or j.paused)
                ),
                key=lambda j: (j.priority, j.seq),
            )
            if s.vocoder_rows:
                todo = todo[: s.vocoder_rows]
            ending = [j for j in live if not j.generating and not j.pending]  # everything vocoded: last chunk only
            tasks = []
            for job in todo + ending:
                frames, job.pending = job.pending, []
                first = job.vocoded
                job.vocoded += len(frames)
                job.packets += 1
                last = not job.generating
                job.finished = last
                text_end = job.turn.text_end(job.vocoded) if job.turn is not None else None
                tasks.append(VocoderTask(job.rid, job.slot, tuple(frames), last, first, text_end, job.turn is not None))
                if last:
                    self._release(job)
            return VocoderWork(tuple(tasks), owners, held)

    # ------------------------------------------------------------ any thread
    def delivered(self, rid: int, frames: int, last: bool):
        """The vocoder lane decoded `frames` frames of request `rid` (its last chunk when `last`). Returns the
        caller's stream to hand the chunk to (Qwen3Engine.deliver), or None for a request that has left."""
        with self.lock:
            job = self.by_rid.get(rid)
            if job is None or job.cancelled:
                return None
            self.counters["audio_s"] += frames * FRAME_S
            if last:
                self._release(job)
                self._forget(job, "completed")
            return job.stream

    def fail(self, rid: int):
        """Request `rid` failed: it leaves the queue and its slot. Returns its caller's stream, for the failure
        to be delivered (None when it had already left)."""
        with self.lock:
            job = self.by_rid.get(rid)
            if job is None:
                return None
            if job in self.queue:
                self.queue.remove(job)
            self._release(job)
            self._forget(job, "failed")
            return job.stream

    def held_rids(self) -> list[int]:
        with self.lock:
            return [job.rid for job in self.held.values()]

    def drain_all(self) -> list:
        """The worker is dying (or the engine closed): every request's stream, for it to be failed."""
        with self.lock:
            streams, self.queue = [job.stream for job in self.jobs.values()], []
            self.jobs.clear()
            self.by_rid.clear()
            return streams

    # ------------------------------------------------------------ under the lock
    def _take_ops(self) -> list:
        ops, self._ops = self._ops, []
        return ops

    def _take_admissions(self, n_free: int) -> list[Job]:
        """Queue sorted: the jobs admitted this step — as many as fit in the free slots and in the prefill
        budget (the head always fits). A turn waits until its prefill's text is known."""
        if not n_free or not self.queue:
            return []
        ready = [j for j in self.queue if j.turn is None or j.prompted or self._turn_ready(j)]
        taken, used = 0, 0
        for job in ready[:n_free]:
            need = self._prompt_len_estimate(job)
            if taken and used + need > self.prefill_budget:
                break
            taken, used = taken + 1, used + need
        if taken < min(n_free, len(ready)):
            self.counters["prefill_deferred"] += min(n_free, len(ready)) - taken
        admit = ready[:taken]
        self.queue = [j for j in self.queue if j not in admit]
        return admit

    def _turn_ready(self, job: Job) -> bool:
        feed = job.turn
        feed.drain()
        return feed.has_head and feed.can_prefill()

    def _prompt_len_estimate(self, job: Job) -> int:
        if job.prompted and job.turn is None:  # resuming: prompt + its frames
            return job.prompt_len + len(job.codes)
        if job.turn is not None:
            return 16 + len(job.turn.body) + (job.turn.n_codec or 1)
        return job.est_len

    def _drop_cancelled(self) -> None:
        for job in [j for j in self.queue if j.cancelled]:
            self.queue.remove(job)
            self._forget(job, "cancelled")
        for job in [j for j in self.held.values() if j.cancelled]:
            self._release(job)
            self._forget(job, "cancelled")

    def _preempt_for_deadlines(self) -> None:
        """Queue sorted: while the waiting requests outnumber the free slots and the next of them needs audio
        at least preempt_slack_s before a generating stream that is >= preempt_slack_s from running dry, that
        stream yields its slot. It keeps its frames, its next token and its vocoder row, and re-enters the
        queue at the time it runs dry."""
        slack = self.settings.preempt_slack_s
        if slack <= 0:
            return
        now = time.monotonic()
        waiting = [j for j in self.queue if not j.cancelled]
        for i, head in enumerate(waiting):
            if i < self.settings.max_batch - len(self.held):
                continue  # the heads before it and this one fit in the free slots
            victims = [j for j in self.slots.values() if not j.cancelled and j.codes and j.turn is None]
            if not victims:
                return
            victim = max(victims, key=lambda j: j.priority)
            # the head must need audio at least `slack` sooner than the victim: without that margin two
            # streams with seconds buffered swap the slot (a re-prefill each) every time their priorities cross
            if victim.priority - now < slack or victim.priority - head.priority < slack:
                return
            self._ops.append(SaveRow(victim.rid, victim.slot))  # after the lane's work in flight on that row
            self._release(victim)
            victim.slot = None
            victim.preempted += 1
            self.counters["preempted"] += 1
            self.queue.append(victim)
            self.queue.sort(key=lambda j: (j.priority, j.seq))

    def _compact(self) -> None:
        """A generating stream above a free lower slot moves down into it, so slots 0..n-1 stay dense and the
        batch bucket follows the number of live streams, not the highest slot ever used. Only streams with
        nothing left to vocode move: their vocoder row is then idle."""
        if not self.slots:
            return
        free = sorted(s for s in range(max(self.held) + 1) if s not in self.held)
        for src in sorted(self.slots, reverse=True):
            if not free or free[0] >= src:
                return
            job = self.slots[src]
            if job.cancelled or job.pending:
                continue
            dst = free.pop(0)
            self._ops.append(Move(src, dst))
            del self.slots[src], self.held[src]
            self.slots[dst] = self.held[dst] = job
            job.slot = dst
            free.append(src)
            free.sort()
            self.counters["compacted"] += 1

    def _turns_update(self) -> None:
        """New text into the turns' slots; pause the rows whose next text row is missing, resume the ones whose
        text came; hold end-of-speech until `tts_eos` is in the track."""
        for slot, job in list(self.held.items()):
            feed = job.turn
            if feed is None or job.cancelled or not job.generating:
                continue
            feed.drain()
            track = feed.track(self.tts_eos_id)
            n_c = feed.n_codec
            rows = len(track) - n_c
            if rows > feed.rows_written:
                self._ops.append(WriteText(slot, feed.rows_written, tuple(track[n_c + feed.rows_written :])))
                feed.rows_written = rows
            if feed.finished and not feed.eos_written:
                feed.eos_written = True
            if feed.finished and job.cap != self._cap(job):
                job.cap = self._cap(job)
                self._ops.append(EosAt(slot, feed.eos_row()))
            waiting = not feed.eos_written and job.generated - feed.frame0 >= feed.rows_written
            if waiting and not job.paused:
                job.paused = True
                self._ops.append(SetActive(slot, False))
                self.slots.pop(slot, None)
                self.counters["turn_pauses"] = self.counters.get("turn_pauses", 0) + 1
            elif not waiting and job.paused:
                job.paused = False
                self._ops.append(SetActive(slot, True))
                self.slots[slot] = job

    def _next_segment(self, slot: int, job: Job) -> None:
        """A cut turn's segment ended: the stream continues with a fresh prompt (re-queued, its vocoder row
        kept, as a preempted stream's is)."""
        job.turn.next_segment(job.generated)
        self._ops += [Release(slot), SaveRow(job.rid, slot)]
        del self.slots[slot]
        if self.held.get(slot) is job:
            del self.held[slot]
        job.slot, job.prompted, job.paused = None, False, False
        self.counters["turn_segments"] = self.counters.get("turn_segments", 0) + 1
        self.queue.append(job)

    def _release(self, job: Job) -> None:
        """The job gives up its slot (and its talker row, if it was generating)."""
        if self.slots.get(job.slot) is job:
            self._ops.append(Release(job.slot))
            del self.slots[job.slot]
        if self.held.get(job.slot) is job:
            del self.held[job.slot]

    def _forget(self, job: Job, outcome: str) -> None:
        if self.jobs.pop(id(job.stream), None) is not None:
            self.counters[outcome] += 1
        if self.by_rid.pop(job.rid, None) is not None:
            self._ops.append(Drop(job.rid))
