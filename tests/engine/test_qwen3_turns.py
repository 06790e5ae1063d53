"""Turn mode in the batched Qwen3Engine (CPU, tiny checkpoint): turns fed at different rates beside a
sentence request in one batch give the single-stream TurnGenerator's codes (itself equal to the
official streaming layout: tests/qwen3/test_turn_parity.py); a paused row takes no step and keeps its
state; end-of-speech is held until the text is final; chunks say which text they spoke."""

from __future__ import annotations

import asyncio

import numpy as np
import torch

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3.engine import EngineSettings, Qwen3Engine
from tts.qwen3.generate import GenerationSettings
from tts.qwen3.prompt import voice_head
from tts.qwen3.turn import TurnGenerator, words

GREEDY = SamplingSettings(greedy=True)


def _engine(ckpt) -> Qwen3Engine:
    s = EngineSettings(device="cpu", dtype="float32", max_batch=4, max_seq_len=256, frames_base=4, frames_per_token=1.0)
    return Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)


def _alone(ckpt, text, speaker, max_positions: int = 256) -> TurnGenerator:
    """The single-stream turn generator run to its end on the whole text, with the engine's frame cap and slot
    (`max_positions`: the engine's max_seq_len): the reference the engine's codes must equal."""
    m, tok = ckpt.model, ckpt.tokenizer
    gen = TurnGenerator(
        m,
        tok,
        voice_head(m.talker, m.config, tok, speaker=speaker, language="en"),
        GenerationSettings(greedy=True, subtalker_greedy=True),
        max_positions=max_positions,
        base_frames=4,
        frames_per_token=1,
    )
    gen.append(text)
    gen.finish()
    while gen.step() is not None:
        pass
    return gen


async def _feed(stream, pieces, gap):
    for p in pieces:
        stream.append(p)
        await asyncio.sleep(gap)
    stream.finish()


async def test_turns_at_any_rate_beside_a_sentence_request_equal_the_turn_generator(ckpt):
    eng = _engine(ckpt)
    await eng.start()
    slow_text, fast_text = "Slow words come late.", "Hi there, my friend."
    try:
        # the slow turn takes slot 0 first, so the rows above it step while it waits (its row must keep its state)
        slow = eng.open_turn(SynthesisRequest(text="Slow words", voice="vivian", language="en", sampling=GREEDY))
        slow_job = eng._jobs[id(slow)]
        for _ in range(100):
            await asyncio.sleep(0.02)
            if slow_job.slot is not None:
                break
        assert slow_job.slot == 0
        fast = eng.open_turn(SynthesisRequest(text="", voice="ryan", language="en", sampling=GREEDY))
        fast_job = eng._jobs[id(fast)]
        sentence = eng.synthesize(
            SynthesisRequest(text="A plain sentence.", voice="ryan", language="en", sampling=GREEDY)
        )
        feeders = [
            asyncio.ensure_future(_feed(slow, words(slow_text)[2:], 0.4)),
            asyncio.ensure_future(_feed(fast, words(fast_text), 0.0)),
        ]
        results = await asyncio.gather(*[_collect(s) for s in (slow, fast, sentence)])
        await asyncio.gather(*feeders)
    finally:
        await eng.close()
    assert eng.counters.get("turn_pauses", 0) >= 2  # the slow turn waited for its words, others stepping above it
    for job, text, voice, chunks in (
        (slow_job, slow_text, "vivian", results[0]),
        (fast_job, fast_text, "ryan", results[1]),
    ):
        ours = torch.from_numpy(np.stack(job.codes))
        assert torch.equal(ours, _alone(ckpt, text, voice).codes()), text
        ends = [c.text_end for c in chunks]
        assert ends == sorted(ends) and ends[-1] == len(text) and chunks[-1].is_last
        assert sum(len(c.pcm) for c in chunks) == len(ours) * 1920


async def test_a_paused_turn_takes_no_step_and_cancel_frees_its_slot(ckpt):
    eng = _engine(ckpt)
    await eng.start()
    try:
        s = eng.open_turn(SynthesisRequest(text="Hello there ", voice="ryan", language="en", sampling=GREEDY))
        first = await asyncio.wait_for(s.__aiter__().__anext__(), 30)
        assert len(first.pcm) and not first.is_last
        job = eng._jobs[id(s)]
        for _ in range(300):  # the row reads its text one token a step; on a loaded machine that takes a while
            if job.paused:
                break
            await asyncio.sleep(0.02)
        assert job.paused  # its text ran out: the row left the stepping set
        steps = eng.counters["steps"]
        await asyncio.sleep(0.5)
        assert eng.counters["steps"] == steps  # waiting for text: no step
        assert not s.done  # end-of-speech held: the text is not final
        s.cancel()
        await asyncio.sleep(0.3)
        assert not eng._held and not eng._jobs
    finally:
        await eng.close()


async def _collect(stream):
    return [c async for c in stream]


async def test_a_turn_longer_than_its_slot_is_cut_at_punctuation_and_goes_on_in_a_fresh_prompt(ckpt):
    """max_seq_len 80: a segment holds ~50 tokens; the turn (~120) is cut after a clause, twice or
    more, each rest in a fresh prompt on the same stream: the codes equal the single-stream generator's
    (which cuts by the same rule), the audio runs on without a restart, text_end reaches the end."""
    s = EngineSettings(device="cpu", dtype="float32", max_batch=2, max_seq_len=80, frames_base=4, frames_per_token=1.0)
    eng = Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)
    text = "One two three, four five. Six seven eight nine, ten eleven. Twelve thirteen, fourteen. Fifteen!"
    await eng.start()
    try:
        turn = eng.open_turn(SynthesisRequest(text="", voice="ryan", language="en", sampling=GREEDY))
        job = eng._jobs[id(turn)]
        feeder = asyncio.ensure_future(_feed(turn, words(text), 0.02))
        chunks = await _collect(turn)
        await feeder
    finally:
        await eng.close()
    gen = _alone(ckpt, text, "ryan", max_positions=80)
    assert gen.stats.segments >= 2 and job.turn.segments == gen.stats.segments
    assert torch.equal(torch.from_numpy(np.stack(job.codes)), gen.codes())
    assert [c.frame_index for c in chunks] == list(np.cumsum([0] + [len(c.pcm) // 1920 for c in chunks[:-1]]))
    assert chunks[-1].is_last and chunks[-1].text_end == len(text)
    assert eng.counters["turn_segments"] == gen.stats.segments - 1
