"""The Qwen3 engine's split (tts/qwen3/README.md): what crosses between its parts is plain data keyed by request id.

The scheduler's decisions reach the step loop and the vocoder lane as frozen dataclasses of plain values (no
`Job`, no `TurnFeed`, nothing the scheduler keeps and could change later); the parts call no private of
another object and set no field of another part. No torch here: the scheduler is driven on its own.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import time

import numpy as np

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3.jobs import EngineSettings
from tts.qwen3.scheduler import Scheduler, StepResult
from tts.qwen3.turn_feed import TurnFeed

from tests.engine.test_scheduler import CharTokenizer

QWEN3 = pathlib.Path(__file__).resolve().parents[2] / "tts" / "qwen3"
PARTS = ("engine", "scheduler", "step_loop", "vocoder_lane")
G, EOS = 4, 99
PLAIN = (int, float, bool, str, bytes, type(None), np.integer, np.floating, np.ndarray)


def _plain(value, path: str, shared: list[object]) -> list[str]:
    """Where `value` holds something that is not plain frozen data (or is one of the scheduler's own objects)."""
    if any(value is s for s in shared):
        return [f"{path}: the scheduler's own {type(value).__name__}"]
    if isinstance(value, PLAIN):
        return []
    if isinstance(value, (tuple, frozenset)):
        return [bad for i, v in enumerate(value) for bad in _plain(v, f"{path}[{i}]", shared)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not value.__dataclass_params__.frozen:
            return [f"{path}: a mutable {type(value).__name__}"]
        return [
            bad for f in dataclasses.fields(value) for bad in _plain(getattr(value, f.name), f"{path}.{f.name}", shared)
        ]
    return [f"{path}: a {type(value).__name__}"]


def _request(text: str, deadline: float) -> SynthesisRequest:
    return SynthesisRequest(text=text, sampling=SamplingSettings(greedy=True), deadline=deadline)


def test_the_scheduler_hands_out_plain_frozen_data_keyed_by_request_id():
    """A new request, a turn, a step, a preemption and its resume, the vocoder's work: every plan, admission,
    op and vocoder task is frozen plain data, and none holds a Job or a TurnFeed (which the scheduler keeps
    changing). On the code before the split the first plan's admissions were the Jobs themselves."""
    s = EngineSettings(device="cpu", max_batch=1, max_seq_len=256, frames_base=4, frames_per_token=1.0)
    s.preempt_slack_s = 0.5
    sched = Scheduler(s)
    sched.bind(CharTokenizer(), EOS, -2, cuda=False)
    feed = TurnFeed(CharTokenizer())
    now = time.monotonic()
    sched.enqueue(object(), _request("A long answer.", now + 30))
    seen = {"resume": 0, "SaveRow": 0, "tasks": 0, "heads": 0}

    def check(what: str, value) -> None:
        own = [*sched.jobs.values(), *sched.queue, feed]  # what the scheduler keeps changing
        bad = _plain(value, what, own)
        assert not bad, bad[:10]

    def step() -> None:
        plan = sched.schedule()
        check("plan", plan)
        seen["resume"] += sum(a.resume is not None for a in plan.admit)
        seen["SaveRow"] += sum(type(op).__name__ == "SaveRow" for op in plan.ops)
        for adm in plan.admit:
            if adm.resume is None:
                sched.prompt_built(adm.rid, 20, 5)
        rids = [a.rid for a in plan.admit]
        check("slots", tuple(sched.admitted(rids)))
        check("after_prefill", tuple(sched.after_prefill(rids)))
        n = sched.rows()
        if n:
            check("update", tuple(sched.update(StepResult(np.full((n, G + 1), 7, dtype=np.int64), G))))
        work = sched.vocoder_work()
        check("vocoder_work", work)
        seen["tasks"] += len(work.tasks)
        heads = tuple(sched.turns_needing_heads())
        check("turns_needing_heads", heads)
        for rid, _ in heads:
            seen["heads"] += 1
            sched.head_built(rid, 8, 1, [], 200)

    step()
    step()  # it has a frame: it may be preempted now
    sched.enqueue(object(), _request("Now!", time.monotonic()))  # needed 30 s sooner: takes the slot
    turn = object()
    sched.enqueue(turn, _request("", time.monotonic() + 60), feed)
    sched.turn_text(turn, "Hello there my friend.")
    for _ in range(16):  # "Now!" runs to its cap (9 frames), then the preempted stream resumes
        step()
    assert all(seen.values()), seen  # every kind of hand-over was seen


def _private_reads(tree: ast.AST) -> list[str]:
    """`x._name` where x is not self: another object's private (a lock's own `_is_owned` is the scheduler's)."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = ast.unparse(node.value)
            if base not in ("self", "cls", "self.lock"):
                bad.append(f"{node.lineno}: {ast.unparse(node)}")
    return bad


def _writes_into_parts(tree: ast.AST) -> list[str]:
    """`self.<part>.x = ...`: a field of another part (scheduler, step loop, lane, diagnostics aside) set."""
    bad = []
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Attribute):
                    owner = ast.unparse(el.value)
                    if owner in ("self.lane", "self.scheduler", "self.step_loop", "op.job"):
                        bad.append(f"{node.lineno}: {ast.unparse(el)}")
    return bad


def test_no_part_calls_another_objects_privates_or_sets_another_parts_fields():
    """On the code before the split: the worker and the lane called `stream._fail` / `stream._deliver`, and the
    engine set `lane.state`, `lane.stream`, `lane.vocoder`, `lane.batch`, `lane.serial_rows`."""
    found = {}
    for part in PARTS:
        tree = ast.parse((QWEN3 / f"{part}.py").read_text())
        bad = _private_reads(tree) + _writes_into_parts(tree)
        # the one exception: Qwen3Engine._lane's setter, the tests' hook to give the lane another executor
        bad = [b for b in bad if not b.endswith("self.lane.pool")]
        if bad:
            found[part] = bad
    assert not found, found


def test_no_tokenizer_work_runs_under_the_lock_the_event_loop_takes():
    """A request's prompt-length estimate and a turn's text (appended, finished, cut into segments at
    punctuation) are tokenised with the scheduler's lock released. Before, the estimate ran in `schedule()`
    and the turn's text in `TurnFeed.drain()`, both under the lock (encode('Hello'), encode(' there,'), ...)."""
    sched: Scheduler

    class Watched(CharTokenizer):
        under_lock: list[str] = []

        def encode(self, text):
            if sched.held_by_me():
                self.under_lock.append(f"encode({text!r})")
            return super().encode(text)

        def decode(self, ids):
            if sched.held_by_me():
                self.under_lock.append(f"decode({ids!r})")
            return super().decode(ids)

    tok = Watched()
    s = EngineSettings(device="cpu", max_batch=2, max_seq_len=256, frames_base=4, frames_per_token=1.0)
    sched = Scheduler(s)
    sched.bind(tok, EOS, -2, cuda=False)
    feed = TurnFeed(tok)
    sched.enqueue(object(), _request("A whole sentence at once.", time.monotonic()))
    turn = object()
    sched.enqueue(turn, _request("", time.monotonic()), feed)
    for piece in ("Hello", " there,", " my", " friend.", " How", " are", " you?"):
        sched.turn_text(turn, piece)
    sched.turn_finish(turn)
    for rid, _ in sched.turns_needing_heads():
        sched.head_built(rid, 8, 1, [], 30)  # room for a few tokens: the turn is cut at its punctuation
    for _ in range(40):
        plan = sched.schedule()
        for adm in plan.admit:
            if adm.resume is None:
                sched.prompt_built(adm.rid, 20 if not adm.turn else 9, adm.text_tokens or 5)
        sched.admitted([a.rid for a in plan.admit])
        sched.after_prefill([a.rid for a in plan.admit])
        if sched.rows():
            sched.update(StepResult(np.full((sched.rows(), G + 1), 7, dtype=np.int64), G))
        for t in sched.vocoder_work().tasks:
            sched.delivered(t.rid, len(t.frames), t.last)
    assert feed.segments > 1  # the turn was cut (its next segment's first word re-encoded)
    assert tok.under_lock == [], tok.under_lock
