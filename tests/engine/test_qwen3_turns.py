"""Turn mode in the batched Qwen3Engine (CPU, tiny checkpoint): turns fed at different rates beside a
sentence request in one batch give the single-stream TurnGenerator's codes (itself equal to the
official streaming layout: tests/qwen3/test_turn_parity.py); a paused row takes no step and keeps its
state; end-of-speech is held until the text is final; chunks say which text they spoke."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.engine import EngineSettings, Qwen3Engine
from tts.qwen3.generate import GenerationSettings
from tts.qwen3.prompt import voice_head
from tts.qwen3.turn import TurnGenerator, words

GREEDY = SamplingSettings(greedy=True)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("engine_turn_tiny"))
    make_tiny_model(d, seed=4)
    return Checkpoint.load(d)


def _engine(ckpt) -> Qwen3Engine:
    s = EngineSettings(device="cpu", dtype="float32", max_batch=4, max_seq_len=256, frames_base=4, frames_per_token=1.0)
    return Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)


def _alone(ckpt, text, speaker):
    """The single-stream turn generator on the whole text, with the engine's frame cap."""
    m, tok = ckpt.model, ckpt.tokenizer
    gen = TurnGenerator(m, tok, voice_head(m.talker, m.config, tok, speaker=speaker, language="en"),
                        GenerationSettings(greedy=True, subtalker_greedy=True), max_positions=256, base_frames=4,
                        frames_per_token=1)
    gen.append(text)
    gen.finish()
    while gen.step() is not None:
        pass
    return gen.codes()


async def _feed(stream, pieces, gap):
    for p in pieces:
        stream.append(p)
        await asyncio.sleep(gap)
    stream.finish()


async def test_turns_at_any_rate_beside_a_sentence_request_equal_the_turn_generator(ckpt):
    eng = _engine(ckpt)
    await eng.start()
    texts = {"fast": ("Hi there, my friend.", "ryan", 0.0), "slow": ("Slow words come late.", "vivian", 0.25)}
    try:
        turns = {k: eng.open_turn(SynthesisRequest(text="", voice=v, language="en", sampling=GREEDY))
                 for k, (_, v, _) in texts.items()}
        jobs = {k: eng._jobs[id(s)] for k, s in turns.items()}
        sentence = eng.synthesize(SynthesisRequest(text="A plain sentence.", voice="ryan", language="en", sampling=GREEDY))
        feeders = [asyncio.ensure_future(_feed(turns[k], words(t), gap)) for k, (t, _, gap) in texts.items()]
        results = await asyncio.gather(*[_collect(s) for s in [*turns.values(), sentence]])
        await asyncio.gather(*feeders)
    finally:
        await eng.close()
    assert eng.counters.get("turn_pauses", 0) >= 1  # the turns waited for their words (how often: the box's speed)
    for (k, (text, voice, _)), chunks in zip(texts.items(), results):
        ours = torch.from_numpy(np.stack(jobs[k].codes))
        assert torch.equal(ours, _alone(ckpt, text, voice)), k
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
        await asyncio.sleep(0.3)
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
