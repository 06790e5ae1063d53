"""Qwen3Engine serving a Base checkpoint: cloned voices registered at run time, both modes,
streamed output equal to the offline official-style output, prompt parts cached."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from audio.reference import load_reference
from tests.qwen3.clone_audio import speech_like, write_wav
from tts.engine import EngineError, SamplingSettings, SynthesisRequest, VoiceClone
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.engine import EngineSettings, Qwen3Engine
from tts.qwen3.generate import GenerationSettings, generate_codes
from tts.qwen3.prompt import build_prompt, icl_trim
from tts.qwen3.voice_clone import VoiceCloner

GREEDY = SamplingSettings(greedy=True)
REF_TEXT = "Hello, this is my voice."


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("engine_base"))
    make_tiny_model(d, variant="0b6", kind="base", seed=5)
    return d


@pytest.fixture(scope="module")
def ckpt(base_dir):
    return Checkpoint.load(base_dir)


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory):
    d = tmp_path_factory.mktemp("engine_refs")
    return write_wav(d / "ref.wav", speech_like(1.6, 16000, seed=3), 16000)


def _engine(ckpt, **kw) -> Qwen3Engine:
    s = EngineSettings(
        device="cpu", dtype="float32", max_batch=2, max_seq_len=192, frames_base=6, frames_per_token=0.3, **kw
    )
    return Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)


async def _speak(eng, text, voice):
    stream = eng.synthesize(SynthesisRequest(text=text, voice=voice, language="en", sampling=GREEDY))
    job = eng._jobs[id(stream)]
    chunks = [c async for c in stream]
    return np.stack(job.codes), np.concatenate([c.pcm for c in chunks]), job


@pytest.mark.parametrize("x_vector_only", [False, True])
async def test_cloned_voice_streams_the_official_output(ckpt, ref_wav, x_vector_only):
    eng = _engine(ckpt)
    await eng.start()
    try:
        with open(ref_wav, "rb") as f:
            info = await eng.add_voice(VoiceClone("anna", f.read(), REF_TEXT, x_vector_only))
        assert info["kind"] == ("clone_xvector" if x_vector_only else "clone_icl")
        assert eng.voices() == ["anna"] and eng.cloned_voices()[0]["name"] == "anna"
        text = "Hello world, a cloned voice."
        codes, pcm, job = await _speak(eng, text, "anna")
        _, pcm_default, _ = await _speak(eng, text, "default")  # the only voice is the default one
    finally:
        await eng.close()
    cloner = VoiceCloner(ckpt.model, ckpt.tokenizer, ckpt.model_dir)
    clone = cloner.prompt(load_reference(ref_wav), REF_TEXT, x_vector_only)
    prompt = build_prompt(
        ckpt.model.talker, ckpt.config, ckpt.tokenizer, text, language="en", clone=clone, streaming_text=True
    )
    ref = generate_codes(
        ckpt.model, prompt, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=job.cap)
    ).codes
    assert np.array_equal(codes, ref.numpy())
    assert np.array_equal(pcm, pcm_default)
    if x_vector_only:
        offline = ckpt.codec.decode(ref.unsqueeze(0))[0].numpy()
    else:  # official: decode reference + generated together, cut the reference's share
        ref_codes = clone.ref_codes
        joint = ckpt.codec.decode(torch.cat([ref_codes, ref]).unsqueeze(0))[0].numpy()
        cut = icl_trim(len(ref_codes), len(ref_codes) + len(ref), len(joint))
        assert cut in (len(ref_codes) * 1920, len(ref_codes) * 1920 - 1)
        offline = joint[len(ref_codes) * 1920 :]  # the stream carries the generated frames' samples
        plain = ckpt.codec.decode(ref.unsqueeze(0))[0].numpy()
        assert np.abs(plain - offline).max() > 1e-3  # the reference context really shapes the audio
    assert pcm.shape == offline.shape and np.abs(pcm - offline).max() <= 1e-5


async def test_voice_errors_are_clear_and_the_engine_keeps_serving(ckpt, ref_wav, tmp_path):
    eng = _engine(ckpt)
    await eng.start()
    try:
        stream = eng.synthesize(SynthesisRequest(text="Hi there.", voice="nobody", sampling=GREEDY))
        with pytest.raises(EngineError) as e:
            [c async for c in stream]
        assert e.value.code == "unknown_voice"
        with pytest.raises(EngineError) as e:
            await eng.add_voice(VoiceClone("bad", b"RIFF0000WAVEjunk", REF_TEXT))
        assert e.value.code == "bad_audio" and "'bad'" in e.value.message
        with open(ref_wav, "rb") as f:
            data = f.read()
        with pytest.raises(EngineError) as e:
            await eng.add_voice(VoiceClone("notext", data, None))
        assert e.value.code == "bad_voice"
        await eng.add_voice(VoiceClone("ok", data, REF_TEXT))
        assert eng.remove_voice("ok") and not eng.remove_voice("ok")
        await eng.add_voice(VoiceClone("ok", data, None, x_vector_only=True))
        _, pcm, _ = await _speak(eng, "Still serving.", "ok")
        assert len(pcm) > 0
    finally:
        await eng.close()


def test_voice_parts_cached_in_memory_and_on_disk(ckpt, base_dir, ref_wav, tmp_path):
    ref = load_reference(ref_wav)
    first = VoiceCloner(ckpt.model, ckpt.tokenizer, base_dir, cache_dir=str(tmp_path))
    parts, source = first.parts(ref, icl=True)
    assert source == "computed" and parts.ref_codes.shape == (-(-int(1.6 * 24000) // 1920), 16)
    assert first.parts(ref, icl=True)[1] == "memory"
    again = VoiceCloner(ckpt.model, ckpt.tokenizer, base_dir, cache_dir=str(tmp_path))  # a restart
    cached, source = again.parts(ref, icl=True)
    assert source == "disk"
    assert np.array_equal(cached.ref_codes, parts.ref_codes) and np.array_equal(cached.xvector, parts.xvector)
    other = VoiceCloner(ckpt.model, ckpt.tokenizer, base_dir, cache_dir=str(tmp_path), fingerprint="another")
    assert other.parts(ref, icl=True)[1] == "computed"  # another checkpoint: its own entry


async def test_custom_voice_engine_refuses_cloning(tmp_path):
    from tts.qwen3.tiny import make_tiny_model

    make_tiny_model(str(tmp_path), kind="custom_voice", seed=1)
    eng = _engine(Checkpoint.load(str(tmp_path)))
    await eng.start()
    try:
        with pytest.raises(EngineError) as e:
            await eng.add_voice(VoiceClone("x", b"", None, True))
        assert e.value.code == "unsupported_voice"
    finally:
        await eng.close()
