"""The Qwen3 engine's scheduler on its own: no torch, no device, no checkpoint.

It is driven through its contract with the step loop (schedule -> StepPlan, admitted, after_prefill,
rows, update(StepResult), vocoder_work) and checked by the plans and device ops it hands back.
This module imports no torch (the first test checks that in a fresh interpreter).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3.jobs import EngineSettings, frame_cap, tokens_within
from tts.qwen3.scheduler import Drop, EosAt, Move, Release, SaveRow, Scheduler, SetActive, StepResult, WriteText
from tts.qwen3.turn_feed import TurnFeed

G = 4  # code groups
EOS, TTS_EOS = 99, -2


def test_the_scheduler_and_these_tests_import_no_torch():
    code = (
        "import sys, importlib.util as u; "
        "s = u.spec_from_file_location('t', sys.argv[1]); m = sys.modules['t'] = u.module_from_spec(s); "
        "s.loader.exec_module(m); "
        "import tts.qwen3.scheduler; assert 'torch' not in sys.modules, 'torch was imported'"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(
        [sys.executable, "-c", code, os.path.abspath(__file__)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]


class CharTokenizer:
    """One id per character; pieces are words with their leading space (ids never change as text grows)."""

    def pre_tokenizer(self):
        return lambda text: [m.end() for m in re.finditer(r"\s*\S+", text)]

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


class Stream:
    pass


def _sched(**kw) -> Scheduler:
    s = EngineSettings(
        device="cpu",
        max_batch=kw.pop("max_batch", 2),
        max_seq_len=kw.pop("max_seq_len", 256),
        frames_base=4,
        frames_per_token=1.0,
        **kw,
    )
    sched = Scheduler(s)
    sched.bind(CharTokenizer(), EOS, TTS_EOS, cuda=False)
    return sched


def _request(text="Hello there.", deadline=None) -> SynthesisRequest:
    return SynthesisRequest(
        text=text, sampling=SamplingSettings(greedy=True), deadline=time.monotonic() if deadline is None else deadline
    )


def _enqueue(sched: Scheduler, request: SynthesisRequest, turn=None):
    """Queue a request; its scheduler-side Job, for these tests to look into (the step loop sees only the rid)."""
    return sched.by_rid[sched.enqueue(Stream(), request, turn)]


def _rids(plan) -> list[int]:
    return [a.rid for a in plan.admit]


def _admit(sched: Scheduler, plan, prompt_len: int = 20, tokens: int = 5) -> list:
    """What the step loop does with a plan's admissions: prompts built and reported, slots taken."""
    for adm in plan.admit:
        if adm.resume is None:
            sched.prompt_built(adm.rid, prompt_len, tokens)
    sched.admitted(_rids(plan))
    return sched.after_prefill(_rids(plan))


def _step(sched: Scheduler, eos_rows=()) -> list:
    n = sched.rows()
    out = np.zeros((n, G + 1), dtype=np.int64)
    out[:, :G] = 7
    for r in eos_rows:
        out[r, G] = EOS
    return sched.update(StepResult(out, G))


def test_admission_is_earliest_deadline_first_within_the_prefill_budget_and_the_head_always_fits():
    sched = _sched(max_batch=4, prefill_budget_tokens=40)
    now = time.monotonic()
    late = _enqueue(sched, _request("x" * 30, deadline=now + 5))
    early = _enqueue(sched, _request("y" * 30, deadline=now + 1))
    plan = sched.schedule()
    # estimates are 16 + tokens: both do not fit in 40 positions; the head (earliest deadline) always does
    assert _rids(plan) == [early.rid] and plan.ops == ()
    assert sched.counters["prefill_deferred"] == 1
    _admit(sched, plan)
    assert early.slot == 0 and _rids(sched.schedule()) == [late.rid]


def test_a_stream_seconds_from_running_dry_yields_its_slot_to_an_urgent_one():
    sched = _sched(max_batch=1, preempt_slack_s=0.5)
    far = _enqueue(sched, _request(deadline=time.monotonic() + 30))
    _admit(sched, sched.schedule())
    _step(sched)  # it has a frame (a stream with none is never preempted)
    urgent = _enqueue(sched, _request(deadline=time.monotonic()))
    plan = sched.schedule()
    assert plan.ops == (SaveRow(far.rid, 0), Release(0))  # its vocoder row kept, its talker row freed, in order
    assert _rids(plan) == [urgent.rid] and far in sched.queue and far.slot is None
    assert sched.counters["preempted"] == 1
    _admit(sched, plan)
    # the preempted one resumes with its prompt and frames: the budget counts both
    assert sched._prompt_len_estimate(far) == far.prompt_len + len(far.codes)


def test_slots_compact_so_the_batch_follows_the_live_streams():
    sched = _sched(max_batch=3)
    jobs = [_enqueue(sched, _request()) for _ in range(3)]
    _admit(sched, sched.schedule())
    assert [j.slot for j in jobs] == [0, 1, 2] and sched.rows() == 3
    assert _step(sched, eos_rows=(0, 1)) == [Release(0), Release(1)]  # slots 0 and 1 end
    work = sched.vocoder_work()  # their last frames go to the vocoder; their slots are free
    assert {t.rid for t in work.tasks} >= {jobs[0].rid, jobs[1].rid}
    plan = sched.schedule()
    assert Move(2, 0) in plan.ops and jobs[2].slot == 0 and sched.rows() == 1
    assert sched.counters["compacted"] == 1


def test_step_results_make_frames_and_an_ended_stream_frees_its_row_then_its_slot():
    sched = _sched(max_batch=2)
    a, b = _enqueue(sched, _request()), _enqueue(sched, _request())
    _admit(sched, sched.schedule(), tokens=1)
    assert a.cap == b.cap == frame_cap(1, 4, 1.0) == 5
    ops = _step(sched, eos_rows=(1,))
    assert ops == [Release(1)] and len(a.codes) == len(b.codes) == 1 and not b.generating
    assert sched.rows() == 1 and 1 in sched.held  # held until its last frames are vocoded
    for _ in range(4):  # a runs to its cap
        _step(sched)
    assert not a.generating and a.generated == a.cap and sched.rows() == 0
    work = sched.vocoder_work()
    assert all(t.last for t in work.tasks) and not sched.held
    for t in work.tasks:
        assert sched.delivered(t.rid, len(t.frames), t.last) in (a.stream, b.stream)
    assert sched.counters["completed"] == 2 and not sched.jobs


def test_cancelled_jobs_leave_the_queue_and_their_slots():
    sched = _sched(max_batch=1)
    running, waiting = _enqueue(sched, _request()), _enqueue(sched, _request())
    _admit(sched, sched.schedule())
    sched.cancel(running.stream)
    sched.cancel(waiting.stream)
    plan = sched.schedule()
    assert (
        plan.ops == (Drop(waiting.rid), Release(0), Drop(running.rid))
        and not sched.queue
        and not sched.held
        and not sched.jobs
    )
    assert sched.counters["cancelled"] == 2


def test_a_failure_on_another_thread_frees_the_row_at_the_next_plan():
    sched = _sched(max_batch=1)
    job = _enqueue(sched, _request())
    _admit(sched, sched.schedule())
    assert sched.fail(job.rid) is job.stream  # e.g. the vocoder lane
    assert not sched.held and sched.counters["failed"] == 1
    assert sched.schedule().ops == (Release(0), Drop(job.rid))


def test_queue_limit_refuses_with_overloaded():
    sched = _sched(max_queued=1)
    _enqueue(sched, _request())
    try:
        _enqueue(sched, _request())
    except Exception as e:  # noqa: BLE001
        assert getattr(e, "code", None) == "overloaded"
    else:
        raise AssertionError("the second request was queued")


def _turn(sched: Scheduler, text: str = "") -> tuple:
    feed = TurnFeed(CharTokenizer())
    if text:
        feed.inbox += feed.tokenize(text)
    job = _enqueue(sched, _request(text), feed)
    return job, feed


def _head(sched: Scheduler, job, n_codec: int = 1, head_len: int = 8) -> None:
    """What the step loop does once a turn's text arrived: its voice head (device work), then its room."""
    sched.head_built(job.rid, head_len, n_codec, [], sched.settings.max_seq_len - head_len - n_codec - 1)


def test_a_turn_waits_for_text_pauses_without_it_and_resumes_when_it_comes():
    sched = _sched(max_batch=2)
    job, feed = _turn(sched)
    assert sched.turns_needing_heads() == [] and sched.schedule().admit == ()  # no text: no head, no admission
    sched.turn_text(job.stream, "Hi")
    assert sched.turns_needing_heads() == []  # "Hi" may still grow: no stable token yet
    sched.turn_text(job.stream, " there")
    sched.turn_text(job.stream, " my")
    assert sched.turns_needing_heads() == [(job.rid, job.request)]
    _head(sched, job)
    plan = sched.schedule()
    assert _rids(plan) == [job.rid] and plan.admit[0].turn
    # the step loop builds the prompt from the text track so far (T[:n_codec] in the prefill, the rest as rows)
    track = feed.track(TTS_EOS)
    assert list(plan.admit[0].track) == track and feed.rows_written == len(track) - feed.n_codec
    sched.prompt_built(job.rid, feed.head_len + feed.n_codec, plan.admit[0].text_tokens)
    assert sched.admitted([job.rid]) == [0]
    ops = sched.after_prefill([job.rid])
    assert ops[0] == EosAt(0, 1 << 30)  # end-of-speech held while the text is still coming
    for _ in range(feed.rows_written):
        assert sched.rows() == 1
        _step(sched)
    assert sched.schedule().ops == (SetActive(0, False),) and sched.rows() == 0 and job.paused  # out of text
    sched.turn_text(job.stream, " friend.")
    sched.turn_finish(job.stream)
    ops = sched.schedule().ops
    written = [op for op in ops if isinstance(op, WriteText)]
    assert len(written) == 1 and written[0].slot == 0 and written[0].start == len(track) - feed.n_codec
    assert CharTokenizer().decode(feed.body) == "Hi there my friend."  # the whole text, then tts_eos
    assert list(written[0].ids) == feed.track(TTS_EOS)[len(track) :] and written[0].ids[-1] == TTS_EOS
    assert EosAt(0, feed.eos_row()) in ops and SetActive(0, True) in ops and sched.rows() == 1
    assert job.cap == feed.frame0 + min(
        sched.settings.max_frames, 256 - job.prompt_len - 1, frame_cap(len(feed.body), 4, 1.0)
    )
    assert sched.counters["turn_pauses"] == 1


def test_one_frame_cap_rule():
    assert frame_cap(10) == 24 + 8 * 10 and frame_cap(0) == frame_cap(1)  # a text counts as one token at least
    assert frame_cap(3, base=4, per_token=0.5) == 5
    assert tokens_within(24 + 8 * 10) == 10 and tokens_within(10) == 0
    assert frame_cap(tokens_within(500)) <= 500 < frame_cap(tokens_within(500) + 1)
