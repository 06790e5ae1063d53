"""Qwen3Engine on CPU with a tiny checkpoint: batching, cancel, deadlines, streaming, guards."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from tts.engine import EngineError, SamplingSettings, SynthesisRequest
from tts.qwen3.engine import EngineSettings, Qwen3Engine
from tts.qwen3.generate import GenerationSettings, generate_codes
from tts.qwen3.prompt import build_prompt

GREEDY = SamplingSettings(greedy=True)
TEXTS = ["Hello world.", "A longer sentence for the batch.", "Short", "Привет, мир!"]


def _engine(ckpt, **kw) -> Qwen3Engine:
    s = EngineSettings(
        device="cpu",
        dtype="float32",
        max_batch=kw.pop("max_batch", 4),
        max_seq_len=160,
        frames_base=kw.pop("frames_base", 6),
        frames_per_token=kw.pop("frames_per_token", 0.5),
        **kw,
    )
    return Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)


def _req(text, **kw):
    return SynthesisRequest(text=text, voice=kw.pop("voice", "ryan"), language="en", sampling=GREEDY, **kw)


async def _collect(stream):
    return [c async for c in stream]


def _alone(ckpt, eng, text):
    p = build_prompt(ckpt.model.talker, ckpt.config, ckpt.tokenizer, text, speaker="ryan", language="en")
    cap = int(eng.settings.frames_base + eng.settings.frames_per_token * p.text_tokens)
    return generate_codes(ckpt.model, p, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=cap)).codes


async def test_batched_greedy_requests_equal_each_alone_and_stream_equals_offline(ckpt):
    eng = _engine(ckpt, watch_syncs=True)
    await eng.start()
    try:
        streams = [eng.synthesize(_req(t)) for t in TEXTS]
        jobs = [eng._jobs[id(s)] for s in streams]
        results = await asyncio.gather(*[_collect(s) for s in streams])
    finally:
        await eng.close()
    assert eng.counters["steps"] < sum(len(j.codes) for j in jobs)  # they really shared steps
    for text, job, chunks in zip(TEXTS, jobs, results):
        ref = _alone(ckpt, eng, text)
        assert torch.equal(torch.from_numpy(np.stack(job.codes)), ref), text
        assert chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
        assert [c.frame_index for c in chunks] == list(np.cumsum([0] + [len(c.pcm) // 1920 for c in chunks[:-1]]))
        assert len(chunks[0].pcm) == 1920  # first packet: one frame
        pcm = np.concatenate([c.pcm for c in chunks])
        offline = ckpt.codec.decode(ref.unsqueeze(0))[0].numpy()
        assert pcm.shape == offline.shape and np.abs(pcm - offline).max() <= 1e-5
    # what waited, watched: one per step (codes + next tokens) and one per vocoder call (its PCM)
    assert eng.counters["host_syncs"] == eng.counters["steps"] + eng.counters["vocoder_calls"]


async def test_cancel_mid_stream_frees_the_slot(ckpt):
    eng = _engine(ckpt, max_batch=1, frames_base=60, frames_per_token=0)
    await eng.start()
    try:
        long = eng.synthesize(_req("A long request that will be cancelled."))
        first = await long.__aiter__().__anext__()
        assert len(first.pcm) == 1920
        long.cancel()
        after = await asyncio.wait_for(_collect(eng.synthesize(_req("Next."))), 30)
    finally:
        await eng.close()
    assert after[-1].is_last
    assert eng.counters["cancelled"] == 1 and eng.counters["completed"] == 1
    assert eng.counters["frames"] < 60 + 6  # the cancelled one stopped early


async def test_admission_follows_earliest_deadline(ckpt):
    eng = _engine(ckpt, max_batch=1, frames_base=2, frames_per_token=0)
    eng._loop = asyncio.get_running_loop()
    await asyncio.get_running_loop().run_in_executor(None, eng.load)
    now = time.monotonic()
    order = {"late": now + 30, "soon": now + 1, "middle": now + 10}
    streams = {name: eng.synthesize(_req("Hi there.", deadline=dl)) for name, dl in order.items()}
    await eng.start()
    try:
        await asyncio.gather(*[_collect(s) for s in streams.values()])
    finally:
        await eng.close()
    firsts = sorted(streams, key=lambda n: streams[n].first_audio_at)
    assert firsts == ["soon", "middle", "late"]


async def test_deadline_update_moves_a_queued_request_forward(ckpt):
    eng = _engine(ckpt, max_batch=1, frames_base=2, frames_per_token=0)
    eng._loop = asyncio.get_running_loop()
    await asyncio.get_running_loop().run_in_executor(None, eng.load)
    now = time.monotonic()
    a = eng.synthesize(_req("First.", deadline=now + 5))
    b = eng.synthesize(_req("Second.", deadline=now + 50))
    b.set_deadline(now + 1)
    await eng.start()
    try:
        await asyncio.gather(_collect(a), _collect(b))
    finally:
        await eng.close()
    assert b.first_audio_at < a.first_audio_at


async def test_full_queue_answers_overloaded(ckpt):
    eng = _engine(ckpt, max_queued=2)
    eng._loop = asyncio.get_running_loop()
    eng.synthesize(_req("one"))
    eng.synthesize(_req("two"))
    with pytest.raises(EngineError) as e:
        eng.synthesize(_req("three"))
    assert e.value.code == "overloaded"


async def test_a_bad_request_fails_alone(ckpt):
    eng = _engine(ckpt)
    await eng.start()
    try:
        bad = eng.synthesize(_req("Hello.", voice="nobody"))
        good = eng.synthesize(_req("Hello."))
        with pytest.raises(EngineError) as e:
            await _collect(bad)
        chunks = await _collect(good)
    finally:
        await eng.close()
    assert e.value.code == "unknown_voice"
    assert chunks[-1].is_last and sum(len(c.pcm) for c in chunks) > 0


async def test_frames_are_capped_from_text_length_and_end_cleanly(ckpt):
    eng = _engine(ckpt, frames_base=3, frames_per_token=0, ignore_eos=True)
    await eng.start()
    try:
        chunks = await _collect(eng.synthesize(_req("Some text that would go on.")))
    finally:
        await eng.close()
    assert sum(len(c.pcm) for c in chunks) == 3 * 1920 and chunks[-1].is_last


def test_from_config_reads_engine_config_attributes(ckpt):
    class Cfg:
        model_dir, dtype, device, max_batch, max_queued = "/x", "float32", "cpu", 7, 9

    eng = Qwen3Engine.from_config(Cfg())
    s = eng.settings
    assert (s.model_dir, s.dtype, s.device, s.max_batch, s.max_queued) == ("/x", "float32", "cpu", 7, 9)


async def _preempted_run(ckpt, slack):
    eng = _engine(ckpt, max_batch=1, frames_base=6, frames_per_token=1.0, ignore_eos=True, preempt_slack_s=slack)
    await eng.start()
    try:
        now = time.monotonic()
        a = eng.synthesize(_req("A long answer whose audio is not needed for a while.", deadline=now + 10))
        job_a = eng._jobs[id(a)]
        it = a.__aiter__()
        got = [await it.__anext__()]  # A is generating
        b = eng.synthesize(_req("Urgent.", deadline=time.monotonic()))
        b_chunks = await _collect(b)
        a_unfinished_when_b_done = not a.done
        a_chunks = got + [c async for c in it]
    finally:
        await eng.close()
    return eng, job_a, a_chunks, b_chunks, a_unfinished_when_b_done


async def test_a_stream_far_from_running_dry_yields_its_slot_and_resumes_seamlessly(ckpt):
    eng, job_a, a_chunks, b_chunks, a_waited = await _preempted_run(ckpt, slack=0.5)
    assert eng.counters["preempted"] >= 1 and job_a.preempted >= 1
    assert b_chunks[-1].is_last and a_waited  # the urgent one finished while the other one waited
    assert sum(len(c.pcm) for c in a_chunks) == job_a.cap * 1920 and a_chunks[-1].is_last
    assert [c.frame_index for c in a_chunks] == list(np.cumsum([0] + [len(c.pcm) // 1920 for c in a_chunks[:-1]]))
    # resuming by re-prefilling its frames continues the same greedy sequence and the same audio
    _, plain, plain_chunks, _, _ = await _preempted_run(ckpt, slack=0.0)
    assert plain.preempted == 0
    assert np.array_equal(np.stack(job_a.codes), np.stack(plain.codes))
    pa, pb = np.concatenate([c.pcm for c in a_chunks]), np.concatenate([c.pcm for c in plain_chunks])
    assert np.abs(pa - pb).max() <= 1e-5


@pytest.mark.parametrize(
    "bad",
    [
        dict(sampling=SamplingSettings(top_k=60.0)),  # a float k once reached topk() on every later step
        dict(sampling=SamplingSettings(temperature="0.9")),
        dict(deadline=None),  # once killed the worker thread: every later request hung
        dict(deadline=float("nan")),
    ],
    ids=["float_top_k", "str_temperature", "no_deadline", "nan_deadline"],
)
async def test_a_request_with_bad_settings_fails_alone_and_the_engine_keeps_serving(ckpt, bad):
    eng = _engine(ckpt, frames_base=12, frames_per_token=0)
    await eng.start()
    try:
        good = eng.synthesize(_req("Hello there."))
        it = good.__aiter__()
        got = [await it.__anext__()]  # generating when the bad one arrives
        sampling = bad.pop("sampling", GREEDY)
        with pytest.raises(EngineError) as e:
            await asyncio.wait_for(
                _collect(eng.synthesize(SynthesisRequest("Hi.", voice="ryan", sampling=sampling, **bad))), 30
            )
        got += [c async for c in it]
        later = await asyncio.wait_for(_collect(eng.synthesize(_req("Later."))), 30)
    finally:
        await eng.close()
    assert e.value.code == "bad_message"
    assert got[-1].is_last and later[-1].is_last and sum(len(c.pcm) for c in later) > 0


async def test_streams_with_seconds_of_audio_do_not_take_turns_in_one_slot(ckpt):
    """Two streams both far from running dry: the later deadline waits; re-prefilling to swap them every
    packet (a preemption each time their priorities cross) would only burn the device."""
    eng = _engine(ckpt, max_batch=1, frames_base=24, frames_per_token=0, ignore_eos=True, preempt_slack_s=3.0)
    eng._loop = asyncio.get_running_loop()
    await asyncio.get_running_loop().run_in_executor(None, eng.load)
    now = time.monotonic()
    a = eng.synthesize(_req("Hello there.", deadline=now + 10))
    b = eng.synthesize(_req("Hello there.", deadline=now + 10.5))
    await eng.start()
    try:
        await asyncio.gather(_collect(a), _collect(b))
    finally:
        await eng.close()
    assert eng.counters["preempted"] == 0 and eng.counters["completed"] == 2


async def test_urgent_requests_arriving_together_all_get_a_slot_in_one_step(ckpt):
    eng = _engine(ckpt, max_batch=2, frames_base=40, frames_per_token=0, ignore_eos=True, preempt_slack_s=0.5)
    await eng.start()
    admitted: list[list[int]] = []
    admit = eng.step_loop.admit

    def recording_admit(admissions):
        admitted.append([a.request.request_id for a in admissions])
        return admit(admissions)

    eng.step_loop.admit = recording_admit
    try:
        far = [eng.synthesize(_req("A long answer.", deadline=time.monotonic() + 10)) for _ in range(2)]
        its = [s.__aiter__() for s in far]
        for it in its:
            await it.__anext__()  # both slots generating, seconds from running dry
        with eng._cond:  # both urgent requests reach the worker in the same iteration
            urgent = [eng.synthesize(_req("Now.", deadline=time.monotonic())) for _ in range(2)]
        await asyncio.gather(*[_collect(s) for s in urgent])
        for s in far:
            s.cancel()
    finally:
        await eng.close()
    ids = {s.request.request_id for s in urgent}
    assert eng.counters["preempted"] == 2
    assert any(ids <= set(batch) for batch in admitted), admitted  # one admission, not one per step
