"""The frame loop (issue 11): honest sync counts, the pipelined vocoder, attention over live lengths,
slot compaction and the prefill budget — on CPU with a tiny checkpoint. CUDA-only paths skip."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3.batch import TalkerBatch
from tts.qwen3.engine import EngineSettings, Qwen3Engine
from tts.qwen3.generate import GenerationSettings, generate_codes
from tts.qwen3.prompt import build_prompt
from tts.qwen3.vocoder_lane import VocoderLane

GREEDY = SamplingSettings(greedy=True)


def _engine(ckpt, **kw) -> Qwen3Engine:
    s = EngineSettings(
        device="cpu",
        dtype="float32",
        max_batch=kw.pop("max_batch", 4),
        max_seq_len=kw.pop("seq", 200),
        frames_base=kw.pop("frames_base", 6),
        frames_per_token=kw.pop("frames_per_token", 0.5),
        **kw,
    )
    return Qwen3Engine(s, checkpoint=ckpt)


def _req(text, **kw):
    return SynthesisRequest(text=text, voice="ryan", language="en", sampling=kw.pop("sampling", GREEDY), **kw)


async def _collect(stream):
    return [c async for c in stream]


def _alone(ckpt, eng, text):
    p = build_prompt(ckpt.model.talker, ckpt.config, ckpt.tokenizer, text, speaker="ryan", language="en")
    cap = int(eng.settings.frames_base + eng.settings.frames_per_token * p.text_tokens)
    return generate_codes(ckpt.model, p, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=cap)).codes


# ------------------------------------------------------------------ honest counters
async def _watched_run(ckpt, inject_item: bool, monkeypatch) -> dict:
    if inject_item:
        real = TalkerBatch._step_rows

        def with_an_item(self, n, kv_len=None, wide=False):
            real(self, n, kv_len, wide)
            self.pos[0].item()  # one extra device->host read per step: must show in the count

        monkeypatch.setattr(TalkerBatch, "_step_rows", with_an_item)
    eng = _engine(ckpt, watch_syncs=True, frames_base=8, frames_per_token=0, ignore_eos=True)
    await eng.start()
    try:
        await asyncio.gather(*[_collect(eng.synthesize(_req(t))) for t in ("Hello world.", "Short", "Another.")])
    finally:
        await eng.close()
    monkeypatch.undo()
    return dict(eng.counters)


async def test_host_syncs_count_what_waits_and_an_added_item_shows(ckpt, monkeypatch):
    clean = await _watched_run(ckpt, False, monkeypatch)
    # one wait per step (the batch's codes) and one per vocoder call (its PCM), nothing else
    assert clean["host_syncs"] == clean["steps"] + clean["vocoder_calls"]
    dirty = await _watched_run(ckpt, True, monkeypatch)
    assert dirty["host_syncs"] == dirty["steps"] * 2 + dirty["vocoder_calls"]
    assert dirty["host_syncs"] != dirty["steps"] + dirty["vocoder_calls"]  # the check above fails for it


def test_the_watch_counts_waits_on_every_thread_it_is_entered_on():
    import threading

    from tts.qwen3.syncs import SyncTally, wait_for, watching

    tally = SyncTally()

    def work():
        with watching(tally):
            t = torch.arange(4)
            int(t[1]), t[t > 1], t.nonzero()
            wait_for(None)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert tally.count == 2 * 4, tally.hits
    with watching(None):  # off: nothing counted
        int(torch.arange(3)[2])
    assert tally.count == 8


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="CUDA only: set_sync_debug_mode needs a GPU (scripts/gpu_check.sh phase d runs it)",
)
def test_cuda_sync_warnings_see_an_item():
    from tts.qwen3.syncs import cuda_sync_warnings

    with cuda_sync_warnings() as seen:
        torch.ones(2, device="cuda").sum().item()
    assert seen


# ------------------------------------------------------------------ pipelined step
async def _mixed_run(ckpt, pipeline: bool):
    """Late admissions, a cancel mid-stream, and a preemption, on 2 slots."""
    eng = _engine(
        ckpt, pipeline=pipeline, max_batch=2, frames_base=10, frames_per_token=0.5, ignore_eos=True, preempt_slack_s=0.5
    )
    await eng.start()
    out = {}
    try:
        now = time.monotonic()
        a = eng.synthesize(_req("A long answer whose audio is not needed for a while.", deadline=now + 10))
        b = eng.synthesize(_req("Hello world.", deadline=now + 10))
        ita, itb = a.__aiter__(), b.__aiter__()
        got_a, got_b = [await ita.__anext__()], [await itb.__anext__()]
        urgent = eng.synthesize(_req("Urgent.", deadline=time.monotonic()))  # late, preempts one of them
        cancelled = eng.synthesize(_req("This one is cancelled.", deadline=time.monotonic() + 0.1))
        itc = cancelled.__aiter__()
        got_c = [await itc.__anext__()]
        cancelled.cancel()
        late = eng.synthesize(_req("Late arrival.", deadline=time.monotonic() + 1))
        out["urgent"] = await _collect(urgent)
        out["late"] = await _collect(late)
        out["a"] = got_a + [c async for c in ita]
        out["b"] = got_b + [c async for c in itb]
        out["cancelled"] = got_c
    finally:
        await eng.close()
    return eng, {k: np.concatenate([c.pcm for c in v]) for k, v in out.items()}, out


async def test_pipelined_vocoder_gives_the_serial_engines_samples(ckpt):
    """Cancels, preemption and late admissions land at wall-clock-dependent steps, so packets may group
    differently between the two runs: the samples agree to the codec's chunking bound (streaming ==
    offline, 1e-5), a race on a state row would be off by the signal itself."""
    eng_s, serial, _ = await _mixed_run(ckpt, pipeline=False)
    eng_p, piped, chunks = await _mixed_run(ckpt, pipeline=True)
    assert eng_p.counters["preempted"] >= 1 and eng_p.counters["cancelled"] == 1
    for name in ("urgent", "late", "a", "b"):
        assert chunks[name][-1].is_last
        assert serial[name].shape == piped[name].shape, name
        assert np.abs(serial[name] - piped[name]).max() <= 1e-5, name
    n = min(len(serial["cancelled"]), len(piped["cancelled"]))
    assert n and np.abs(serial["cancelled"][:n] - piped["cancelled"][:n]).max() <= 1e-5


async def test_with_the_same_schedule_the_pipeline_is_bit_identical(ckpt):
    """Everything queued before the worker starts: both engines make the same steps and the same vocoder
    calls, so the pipelined samples are exactly the serial ones."""

    async def run(pipeline):
        eng = _engine(ckpt, pipeline=pipeline, max_batch=3, frames_base=9, frames_per_token=0.3, cpu_threads=1)
        eng._loop = asyncio.get_running_loop()
        await asyncio.get_running_loop().run_in_executor(None, eng.load)
        streams = [eng.synthesize(_req(t)) for t in ("Hello world.", "Short", "Another one here.", "Fourth.")]
        await eng.start()
        try:
            res = await asyncio.gather(*[_collect(s) for s in streams])
        finally:
            await eng.close()
        return [np.concatenate([c.pcm for c in r]) for r in res], eng.counters["vocoder_calls"]

    (serial, calls_s), (piped, calls_p) = await run(False), await run(True)
    assert calls_s == calls_p
    for a, b in zip(serial, piped):
        assert np.array_equal(a, b)


async def test_the_vocoder_really_runs_beside_the_talker(ckpt, monkeypatch):
    """With the pipeline, a vocoder call is in flight while a talker step runs (their spans overlap);
    the serial engine never overlaps them."""

    async def spans(pipeline):
        eng = _engine(ckpt, pipeline=pipeline, frames_base=12, frames_per_token=0, ignore_eos=True)
        dec, steps = [], []
        real_decode, real_launch = VocoderLane._decode, TalkerBatch.launch

        def slow_decode(self, entries, owners):
            t0 = time.perf_counter()
            time.sleep(0.005)
            try:
                return real_decode(self, entries, owners)
            finally:
                dec.append((t0, time.perf_counter()))

        def launch(self, n_rows):
            t0 = time.perf_counter()
            try:
                return real_launch(self, n_rows)
            finally:
                steps.append((t0, time.perf_counter()))

        monkeypatch.setattr(VocoderLane, "_decode", slow_decode)
        monkeypatch.setattr(TalkerBatch, "launch", launch)
        await eng.start()
        try:
            await asyncio.gather(*[_collect(eng.synthesize(_req(t))) for t in ("Hello world.", "Short")])
        finally:
            await eng.close()
        monkeypatch.undo()
        return sum(1 for a0, a1 in dec for b0, b1 in steps if a0 < b1 and b0 < a1)

    assert await spans(True) > 0
    assert await spans(False) == 0


# ------------------------------------------------------------------ attention over live lengths
def test_decode_reads_only_the_live_length_bucket(ckpt):
    """Cache columns past the step's length bucket are poisoned with NaN: reading any of them would
    make the codes garbage; the greedy codes equal the full-cache reference."""
    prompts = [
        build_prompt(ckpt.model.talker, ckpt.config, ckpt.tokenizer, t, speaker="ryan", language="en")
        for t in ("Hello world.", "A longer sentence for the batch.")
    ]
    greedy = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True, repetition_penalty=1.0)
    pred = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True)

    def run(live: bool, poison: bool):
        batch = TalkerBatch(ckpt.model, 4, 512, use_cuda_graphs=False, kv_step=32, live_lengths=live)
        batch.admit([0, 1], prompts, [greedy, greedy], [pred, pred])
        codes, lens = [], []
        for _ in range(12):
            if poison:
                kv = batch.kv_len_for(batch.bucket_for(2))
                for layer in ckpt.model.talker.model.layers:
                    layer.self_attn.kv_cache.k_cache[:, :, kv:] = float("nan")
                    layer.self_attn.kv_cache.v_cache[:, :, kv:] = float("nan")
            codes.append(batch.step(2)[:, : batch.groups].clone())
            lens.append(batch.last_kv_len)
        return torch.stack(codes), lens

    full, full_lens = run(live=False, poison=False)
    live, live_lens = run(live=True, poison=True)
    assert set(full_lens) == {512} and max(live_lens) <= 64  # prompts of ~30 positions + 12 frames
    assert torch.equal(full, live)


async def test_greedy_codes_equal_the_reference_with_live_lengths_and_compaction(ckpt):
    texts = ["Hi.", "Short", "A much longer sentence that keeps going for a while."]
    eng = _engine(ckpt, max_batch=3, kv_bucket=16)
    await eng.start()
    rows = []
    real = TalkerBatch.launch

    def launch(self, n_rows):
        rows.append(n_rows)
        return real(self, n_rows)

    TalkerBatch.launch = launch
    try:
        streams = [eng.synthesize(_req(t)) for t in texts[::-1]]  # the long one takes slot 0
        jobs = [eng._jobs[id(s)] for s in streams]
        await asyncio.gather(*[_collect(s) for s in streams])
        # the long one alone in slot 2 while slots 0/1 free: compaction moves it down
        eng2 = _engine(ckpt, max_batch=3, kv_bucket=16)
        await eng2.start()
        s2 = [eng2.synthesize(_req(t)) for t in texts]  # long one in slot 2
        jobs2 = [eng2._jobs[id(s)] for s in s2]
        rows.clear()
        await asyncio.gather(*[_collect(s) for s in s2])
        await eng2.close()
    finally:
        TalkerBatch.launch = real
        await eng.close()
    for text, job in zip(texts[::-1], jobs):
        assert torch.equal(torch.from_numpy(np.stack(job.codes)), _alone(ckpt, eng, text)), text
    for text, job in zip(texts, jobs2):
        assert torch.equal(torch.from_numpy(np.stack(job.codes)), _alone(ckpt, eng2, text)), text
    assert eng2.counters["compacted"] >= 1 and rows[-1] == 1  # the bucket followed the one live stream


# ------------------------------------------------------------------ prefill budget
async def test_a_burst_is_admitted_over_several_steps_within_the_prefill_budget(ckpt):
    eng = _engine(ckpt, max_batch=8, prefill_budget_tokens=40, frames_base=6, frames_per_token=0, ignore_eos=True)
    await eng.start()
    sizes = []
    real = eng.step_loop.admit

    def admit(admissions):
        sizes.append(len(admissions))
        return real(admissions)

    eng.step_loop.admit = admit
    try:
        running = eng.synthesize(_req("Already talking."))
        it = running.__aiter__()
        await it.__anext__()
        with eng._cond:  # the burst reaches the worker at once
            burst = [eng.synthesize(_req(f"Caller number {i}.")) for i in range(6)]
        chunks = await asyncio.gather(*[_collect(s) for s in burst])
        [c async for c in it]
    finally:
        await eng.close()
    assert all(c[-1].is_last for c in chunks)
    assert eng.counters["prefill_deferred"] > 0 and max(sizes) < 6 and sum(sizes) == 7
