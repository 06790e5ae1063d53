"""Qwen3Engine's worker failing on purpose (inject_fault), on CPU with a tiny checkpoint.

A step that raises fails what was in flight and the worker serves on; a step
that hangs shows in `health()` until it returns; a worker that dies fails
every stream it held or queued (none waits forever) and refuses new ones.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tts.engine import EngineError, SamplingSettings, SynthesisRequest
from tts.qwen3.engine import EngineSettings, Qwen3Engine


def _engine(ckpt) -> Qwen3Engine:
    s = EngineSettings(
        device="cpu", dtype="float32", max_batch=2, max_seq_len=160, frames_base=24, frames_per_token=0.5
    )
    return Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)


def _req(text: str) -> SynthesisRequest:
    return SynthesisRequest(text=text, voice="ryan", language="en", sampling=SamplingSettings(greedy=True))


async def _first_then_rest(stream):
    it = aiter(stream)
    await asyncio.wait_for(anext(it), 30)
    return it


async def _drain(it):
    return [c async for c in it]


async def test_a_raising_step_fails_the_streams_in_flight_and_the_worker_serves_on(ckpt):
    eng = _engine(ckpt)
    await eng.start()
    try:
        it = await _first_then_rest(eng.synthesize(_req("A sentence long enough to be mid-flight.")))
        eng.inject_fault("raise")
        with pytest.raises(EngineError) as exc:
            await asyncio.wait_for(_drain(it), 30)
        assert "injected fault" in exc.value.message
        assert eng.health() is None
        chunks = await asyncio.wait_for(_drain(eng.synthesize(_req("Still here."))), 60)
        assert chunks[-1].is_last
    finally:
        await eng.close()


async def test_a_hanging_step_shows_in_health_until_it_returns(ckpt):
    eng = _engine(ckpt)
    eng.stall_after_s = 0.3
    await eng.start()
    try:
        it = await _first_then_rest(eng.synthesize(_req("Hang on a moment please.")))
        eng.inject_fault("hang", seconds=1.5)
        deadline = time.monotonic() + 5
        while eng.health() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert "hung" in (eng.health() or "")
        chunks = await asyncio.wait_for(_drain(it), 60)  # after the hang the stream completes
        assert chunks[-1].is_last and eng.health() is None
    finally:
        await eng.close()


async def test_a_dead_worker_fails_every_stream_and_refuses_new_ones(ckpt):
    eng = _engine(ckpt)
    await eng.start()
    try:
        it = await _first_then_rest(eng.synthesize(_req("The worker dies under this one.")))
        queued = [eng.synthesize(_req(f"Queued number {i}.")) for i in range(3)]  # max_batch 2: some wait in the queue
        eng.inject_fault("die")
        for stream_it in [it] + [aiter(s) for s in queued]:
            with pytest.raises(EngineError) as exc:
                await asyncio.wait_for(_drain(stream_it), 30)
            assert exc.value.code == "engine_error"
        assert "worker stopped" in eng.health()
        with pytest.raises(EngineError) as exc:
            eng.synthesize(_req("Anyone?"))
        assert exc.value.code == "engine_unavailable"
    finally:
        await eng.close()
