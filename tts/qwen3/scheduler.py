"""The Qwen3 engine's scheduler: who gets a slot this step.

Earliest deadline first over the queue (a request's priority is when its audio runs out), a prefill
budget per step (the head always fits), preemption of a stream seconds from running dry for one needed
sooner (it resumes later by re-prefilling its frames), and compaction of the slots so the batch bucket
follows the live streams. Every method runs on the worker thread; those marked so run under `_cond`.
"""

from __future__ import annotations

import time

from tts.qwen3.jobs import Job


class Scheduler:
    """Mixin of `Qwen3Engine` (tts/qwen3/engine.py): the state it reads is set up there."""

    def _take_admissions(self, n_free: int) -> list[Job]:
        """Under the lock, queue sorted: the jobs admitted this step — as many as fit in the free slots
        and in the prefill budget (the head always fits)."""
        if not n_free or not self._queue:
            return []
        budget = self.settings.prefill_budget_tokens or (1024 if self._batch.device.type == "cuda" else 256)
        # a turn waits in the queue until its prefill's text is known (its first word, or more for a clone)
        ready = [j for j in self._queue if j.turn is None or j.prompt is not None or self._turn_ready(j)]
        taken, used = 0, 0
        for job in ready[:n_free]:
            need = self._prompt_len_estimate(job)
            if taken and used + need > budget:
                break
            taken, used = taken + 1, used + need
        if taken < min(n_free, len(ready)):
            self.counters["prefill_deferred"] += min(n_free, len(ready)) - taken
        admit = ready[:taken]
        self._queue = [j for j in self._queue if j not in admit]
        return admit

    def _prompt_len_estimate(self, job: Job) -> int:
        if job.prompt is not None:  # resuming: prompt + its frames
            return job.prompt.prefill.shape[0] + len(job.codes)
        if job.turn is not None:
            return 16 + len(job.turn.body) + (job.turn.n_codec if job.turn.codec is not None else 1)
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
            victims = [j for j in self._slots.values() if not j.cancelled and j.codes and j.turn is None]
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

    def _release(self, job: Job) -> None:
        """Under the lock: the job gives up its talker row and its slot."""
        if self._slots.get(job.slot) is job:
            self._batch.release(job.slot)
            del self._slots[job.slot]
        if self._held.get(job.slot) is job:
            del self._held[job.slot]

    def _forget(self, job: Job, outcome: str) -> None:
        if self._jobs.pop(id(job.stream), None) is not None:
            self.counters[outcome] += 1
