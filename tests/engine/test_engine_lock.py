"""No torch call runs while the engine's lock is held (CPU, tiny checkpoint).

The event loop takes that lock for every request, turn append, cancel and stats call: a torch op under
it (a device copy, a kernel) would make the event loop wait on the device. A `TorchFunctionMode` on the
worker, the vocoder lane and the event loop records every torch function called while the calling thread
holds the lock; turn mode (voice heads, text rows), sentence requests, compaction, a cancel and
preemption run under it, and nothing may be recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import traceback

from torch.overrides import TorchFunctionMode

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3 import syncs
from tts.qwen3.engine import EngineSettings, Qwen3Engine

GREEDY = SamplingSettings(greedy=True)


class TorchUnderLock(TorchFunctionMode):
    """Records each torch function a thread calls while it holds `lock` (an RLock-based Condition)."""

    def __init__(self, lock):
        super().__init__()
        self.lock = lock
        self.hits: list[str] = []
        self.calls: dict[str, int] = {}  # thread name -> torch calls seen (the mode really is on that thread)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = threading.current_thread().name
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.lock._is_owned():
            where = "".join(traceback.format_stack(limit=6)[:-1])
            self.hits.append(f"{name}: {getattr(func, '__name__', func)}\n{where}")
        return func(*args, **(kwargs or {}))


async def _collect(stream) -> list:
    return [c async for c in stream]


async def test_no_torch_call_runs_while_the_engine_lock_is_held(ckpt, monkeypatch):
    # every stream runs 40+ frames (no end-of-speech): the two slots are still taken when the urgent call comes
    s = EngineSettings(
        device="cpu",
        dtype="float32",
        max_batch=2,
        max_seq_len=256,
        frames_base=40,
        frames_per_token=1.0,
        preempt_slack_s=0.5,
        ignore_eos=True,
    )
    eng = Qwen3Engine(s, checkpoint=ckpt)
    mode = TorchUnderLock(eng._cond)
    real_watching = syncs.watching

    @contextlib.contextmanager
    def watching(tally):  # the worker and the lane enter the sync watch on their threads: the mode with it
        with real_watching(tally) as w, mode:
            yield w

    monkeypatch.setattr(syncs, "watching", watching)
    await eng.start()
    try:
        with mode:  # the event loop's own calls
            turn = eng.open_turn(SynthesisRequest(text="Hello", voice="vivian", language="en", sampling=GREEDY))
            first = asyncio.ensure_future(_collect(turn))
            for piece in (" there,", " my", " friend."):
                await asyncio.sleep(0.05)
                turn.append(piece)
                eng.stats()
            turn.finish()
            far = [
                eng.synthesize(
                    SynthesisRequest(
                        text="A longer answer that runs a while.", sampling=GREEDY, deadline=time.monotonic() + 30
                    )
                )
                for _ in range(2)
            ]
            it = far[0].__aiter__()
            await it.__anext__()
            gone = eng.synthesize(SynthesisRequest(text="Cancelled soon.", sampling=GREEDY))
            gone.cancel()
            urgent = eng.synthesize(SynthesisRequest(text="Now.", sampling=GREEDY, deadline=time.monotonic()))
            await asyncio.wait_for(asyncio.gather(first, _collect(urgent)), 60)
            for stream in far:
                stream.cancel()
            eng.stats()
    finally:
        await eng.close()
    assert mode.calls.get("qwen3-worker", 0) > 0  # the check was on where the torch work runs
    assert not mode.hits, f"{len(mode.hits)} torch calls under the engine's lock; the first:\n" + "\n".join(
        mode.hits[:3]
    )
    assert eng.counters["preempted"] >= 1 and eng.counters["cancelled"] >= 1  # the scenario ran its course


def test_the_check_sees_a_torch_call_under_the_lock():
    """The check itself: a torch call with the lock held is recorded, one without it is not."""
    import torch

    lock = threading.Condition(threading.RLock())
    mode = TorchUnderLock(lock)
    with mode:
        torch.zeros(2).add_(1)
        with lock:
            torch.zeros(2)
    assert len(mode.hits) == 1 and "zeros" in mode.hits[0]
