"""Qwen3Engine with `aligner_dir`: each request's words, timed by the aligner on the request's own audio,
arrive in a final chunk after that audio; the audio itself is unchanged; without it, no words."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tts.engine import EngineError, SamplingSettings, SynthesisRequest
from tts.qwen3.engine import EngineSettings, Qwen3Engine

TEXTS = ["Hello world, again.", "Привет — мир!", "One two three four five six."]


@pytest.fixture(scope="module")
def aligner_dir(tmp_path_factory):
    from tts.aligner.tiny import make_tiny_aligner

    d = str(tmp_path_factory.mktemp("tiny_aligner"))
    make_tiny_aligner(d, seed=1)
    return d


def _engine(ckpt, **kw) -> Qwen3Engine:
    s = EngineSettings(device="cpu", dtype="float32", max_batch=4, max_seq_len=160, frames_base=12, **kw)
    return Qwen3Engine(s, checkpoint=ckpt)


def _req(text):
    return SynthesisRequest(text=text, voice="ryan", language="en", sampling=SamplingSettings(greedy=True))


async def _run(eng, texts):
    await eng.start()
    try:

        async def collect(stream):
            return [c async for c in stream]

        # bounded: a stream that never ends (its words lost) fails the test instead of hanging it
        return await asyncio.wait_for(asyncio.gather(*[collect(eng.synthesize(_req(t))) for t in texts]), 60)
    finally:
        await eng.close()


async def test_words_follow_each_requests_audio_in_a_final_chunk(ckpt, aligner_dir):
    from tts.aligner import ForcedAligner

    with_words = await _run(_engine(ckpt, aligner_dir=aligner_dir), TEXTS)
    without = await _run(_engine(ckpt), TEXTS)
    for text, chunks, plain in zip(TEXTS, with_words, without):
        assert all(c.words is None for c in plain)
        pcm = np.concatenate([c.pcm for c in chunks])
        assert np.array_equal(pcm, np.concatenate([c.pcm for c in plain]))  # the aligner leaves the audio alone
        *audio, last = chunks
        assert last.is_last and len(last.pcm) == 0 and not any(c.is_last or c.words for c in audio)
        assert last.frame_index * 1920 == len(pcm)
        assert last.words.source == "aligner"
        spans = [text[w.char_start : w.char_end] for w in last.words.words]
        assert spans == [t for t in text.split() if any(ch.isalnum() for ch in t)]
        assert all(0 <= w.start <= w.end <= len(pcm) for w in last.words.words)
    # one request alone: its words are exactly the aligner's on that request's audio and text
    alone = (await _run(_engine(ckpt, aligner_dir=aligner_dir), TEXTS[:1]))[0]
    pcm = np.concatenate([c.pcm for c in alone])
    direct = ForcedAligner.from_dir(aligner_dir).align([(pcm, 24000, TEXTS[0])])[0]
    assert [(w.char_start, w.char_end, w.start, w.end) for w in alone[-1].words.words] == [
        (w.char_start, w.char_end, min(w.start, len(pcm)), min(w.end, len(pcm))) for w in direct
    ]


async def test_an_aligner_dir_that_is_no_aligner_is_a_clear_engine_error(ckpt, tmp_path):
    eng = _engine(ckpt, aligner_dir=str(tmp_path))
    with pytest.raises(EngineError) as e:
        await eng.start()
    assert e.value.code == "aligner_unavailable" and "config.json" in str(e.value)


async def test_a_failing_aligner_ends_the_streams_without_words(ckpt, aligner_dir, monkeypatch, caplog):
    """The aligner raising (a fault injected into its one entry point) costs the requests their words, not their
    audio or their end: the session's estimate stands."""
    from tts.aligner.aligner import ForcedAligner

    def broken(self, clips):
        raise RuntimeError("injected aligner fault")

    monkeypatch.setattr(ForcedAligner, "align", broken)
    results = await _run(_engine(ckpt, aligner_dir=aligner_dir), TEXTS[:2])
    for chunks in results:
        assert chunks[-1].is_last and chunks[-1].words is None
        assert sum(len(c.pcm) for c in chunks) > 0
    assert "aligner failed on" in caplog.text
