"""Both voice-clone modes against the official qwen-tts 0.1.1 `generate_voice_clone` path:
greedy codes identical, on tiny Base checkpoints it initialised itself (1.7B and 0.6B
structures), English and Russian, reference WAVs at 16 kHz, 24 kHz and 44.1 kHz stereo."""

from __future__ import annotations

import functools

import pytest
import torch

from audio.reference import load_reference
from tests.qwen3.clone_audio import REFERENCES, speech_like, write_wav
from tts.qwen3.generate import GenerationSettings, generate_codes
from tts.qwen3.prompt import build_prompt
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.voice_clone import VoiceCloner
from tts.qwen3.weights import load_model

pytestmark = pytest.mark.parity

FRAMES = 12
TEXTS = {
    "en": ("Hello world, this is a cloned voice speaking.", "Hello, this is my voice."),
    "ru": ("Привет, мир! Это клонированный голос.", "Здравствуйте, это мой голос."),
}
LANG = {"en": "english", "ru": "russian"}


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("clone_refs")
    out = {
        name: write_wav(d / f"{name}.wav", speech_like(2.3, rate, seed=i, channels=ch), rate)
        for i, (name, rate, ch) in enumerate(REFERENCES)
    }
    out["long24k"] = write_wav(d / "long24k.wav", speech_like(6.0, 24000, seed=9), 24000)
    return out


@functools.lru_cache(maxsize=2)
def _loaded(model_dir):
    model, tok = load_model(model_dir), TextTokenizer.from_dir(model_dir)
    return model, tok, VoiceCloner(model, tok, model_dir)


def _ours(model_dir, ref_path, ref_text, text, language, x_vector_only, streaming_text=True):
    model, tok, cloner = _loaded(model_dir)
    clone = cloner.prompt(load_reference(ref_path), ref_text, x_vector_only)
    prompt = build_prompt(
        model.talker, model.config, tok, text, language=language, clone=clone, streaming_text=streaming_text
    )
    return generate_codes(
        model, prompt, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=FRAMES)
    ).codes, prompt


def _assert_same_prompt(prompt, fed):
    """The talker's prefill and per-frame text track equal the official ones position by position
    (random tiny weights can keep greedy codes equal even for a wrong prompt)."""
    assert prompt.prefill.shape == fed["prefill"].shape
    assert (prompt.prefill - fed["prefill"]).abs().max().item() <= 1e-6
    n = prompt.trailing_text.shape[0]
    theirs = fed["trailing"]  # the official pads the empty text track with one tts_pad row
    expected = torch.cat([prompt.trailing_text, prompt.pad.view(1, -1)]) if n == 0 else prompt.trailing_text
    assert expected.shape == theirs.shape and (expected - theirs).abs().max().item() <= 1e-6


CASES = [  # variant, mode, language, reference: every mode, structure and rate at least once (English
    # in-context: the layout tests below and test_clone_cli's end-to-end synth)
    ("1b7", "icl", "ru", "44k1_stereo"),
    ("1b7", "xvec", "ru", "16k"),
    ("0b6", "icl", "ru", "24k"),
    ("0b6", "xvec", "en", "44k1_stereo"),
]


@pytest.mark.parametrize("variant,mode,lang,ref", CASES)
def test_clone_greedy_codes_equal_official(official, official_dirs, wavs, variant, mode, lang, ref):
    d = official_dirs(variant, "base")
    text, ref_text = TEXTS[lang]
    xvo = mode == "xvec"
    theirs, item, fed = official.official_clone_codes(
        d, wavs[ref], ref_text, text, language=LANG[lang], x_vector_only=xvo, max_frames=FRAMES
    )
    ours, prompt = _ours(d, wavs[ref], ref_text, text, LANG[lang], xvo)
    assert ours.shape == theirs.shape == (FRAMES, 16)
    assert torch.equal(ours, theirs)
    _assert_same_prompt(prompt, fed)
    if not xvo:  # the reference codes are in the prompt: it is longer than the x-vector one
        assert prompt.prefill.shape[0] > item.ref_code.shape[0]


@pytest.mark.parametrize("streaming_text", [True, False])
def test_icl_layouts_equal_official(official, official_dirs, wavs, streaming_text):
    """Streaming text with more codec positions than text (the text track padded), and the
    non-streaming layout (the whole text first, then the reference frames)."""
    d = official_dirs("1b7", "base")
    text, ref_text = "Hi there.", "Hello."
    theirs, item, fed = official.official_clone_codes(
        d,
        wavs["long24k"],
        ref_text,
        text,
        language="auto",
        x_vector_only=False,
        max_frames=FRAMES,
        streaming_text=streaming_text,
    )
    ours, prompt = _ours(d, wavs["long24k"], ref_text, text, "auto", False, streaming_text)
    assert torch.equal(ours, theirs)
    _assert_same_prompt(prompt, fed)
    assert prompt.trailing_text.shape[0] == 0  # all text fits beside the 76 reference frames
