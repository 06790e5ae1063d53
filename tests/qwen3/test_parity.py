"""Our talker side against the official qwen-tts 0.1.1 on tiny checkpoints it initialised itself.

Live comparison: CI installs the official package (scripts/install_test_deps.sh ->
scripts/install_reference.sh); without it these tests skip and say why.
"""

from __future__ import annotations

import pytest
import torch

from tts.qwen3.generate import GenerationSettings, generate_codes
from tts.qwen3.prompt import build_prompt
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.weights import load_model

pytestmark = pytest.mark.parity

TEXT = "Hello world, this is a parity test."
FRAMES = 24


def _ours(model_dir, text, **voice):
    model = load_model(model_dir)
    prompt = build_prompt(
        model.talker,
        model.config,
        TextTokenizer.from_dir(model_dir),
        text,
        streaming_text=voice.pop("streaming_text", False),
        **voice,
    )
    settings = GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=FRAMES, record_logits=True)
    return generate_codes(model, prompt, settings)


@pytest.mark.parametrize(
    "speaker,language", [("ryan", "english"), ("ryan", "auto"), ("vivian", "english"), ("vivian", "auto")]
)
def test_custom_voice_greedy_codes_and_logits_equal_official(official, official_dirs, speaker, language):
    d = official_dirs("1b7", "custom_voice")
    ref_codes, ref_logits = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXT,
        speaker=speaker,
        language=language,
        max_frames=FRAMES,
        record_logits=True,
    )
    ours = _ours(d, TEXT, speaker=speaker, language=language)
    assert ours.codes.shape == (FRAMES, 16)
    assert torch.equal(ours.codes, ref_codes)
    # prefill logits and every step's logits (the official computes one extra, unused step)
    assert len(ours.logits) == FRAMES
    for step, (a, b) in enumerate(zip(ours.logits, ref_logits)):
        assert (a - b).abs().max().item() <= 1e-4, f"talker logits differ at step {step}"


def test_dialect_speaker_with_auto_language_equals_official(official, official_dirs):
    d = official_dirs("1b7", "custom_voice")
    ref, _ = official.official_generate(
        official.official_model(d), official.hf_tokenizer(d), TEXT, speaker="eric", language="auto", max_frames=FRAMES
    )
    assert torch.equal(_ours(d, TEXT, speaker="eric", language="auto").codes, ref)


def test_streaming_text_layout_equals_official(official, official_dirs):
    d = official_dirs("1b7", "custom_voice")
    ref, _ = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXT,
        speaker="ryan",
        language="english",
        max_frames=FRAMES,
        streaming_text=True,
    )
    assert torch.equal(_ours(d, TEXT, speaker="ryan", language="english", streaming_text=True).codes, ref)


@pytest.mark.parametrize("language", ["english", "auto"])
def test_voice_design_greedy_codes_equal_official(official, official_dirs, language):
    d = official_dirs("1b7", "voice_design")
    instruct = "A calm, low voice speaking slowly."
    ref, ref_logits = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXT,
        speaker=None,
        language=language,
        instruct=instruct,
        max_frames=FRAMES,
        record_logits=True,
    )
    ours = _ours(d, TEXT, language=language, instruct=instruct)
    assert torch.equal(ours.codes, ref)
    assert max((a - b).abs().max().item() for a, b in zip(ours.logits, ref_logits)) <= 1e-4


def test_0b6_structure_without_projection_equals_official(official, official_dirs):
    d = official_dirs("0b6", "custom_voice")
    ref, _ = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXT,
        speaker="vivian",
        language="english",
        max_frames=FRAMES,
    )
    assert torch.equal(_ours(d, TEXT, speaker="vivian", language="english").codes, ref)


def test_base_with_xvector_equals_official(official, official_dirs):
    d = official_dirs("1b7", "base")
    om = official.official_model(d)
    xvec = torch.randn(om.config.talker_config.hidden_size, generator=torch.Generator().manual_seed(3)) * 0.5
    tok = official.hf_tokenizer(d)
    ids = tok(f"<|im_start|>assistant\n{TEXT}<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    prompt = {"ref_spk_embedding": [xvec], "x_vector_only_mode": [True], "icl_mode": [False], "ref_code": None}
    with torch.no_grad():
        ref, _ = om.generate(
            input_ids=[ids],
            languages=["english"],
            voice_clone_prompt=prompt,
            non_streaming_mode=True,
            max_new_tokens=FRAMES + 1,
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.0,
        )
    ours = _ours(d, TEXT, language="english", xvector=xvec)
    assert torch.equal(ours.codes, ref[0])


def test_tokenizer_equals_transformers_qwen2(official, official_dirs):
    d = official_dirs("1b7", "custom_voice")
    ours, theirs = TextTokenizer.from_dir(d), official.hf_tokenizer(d)
    for text in [
        TEXT,
        "Привет, мир! Как дела?",
        "a <b> 123 4567 it's we'll\n\n  tabs\tand  spaces ",
        "<|im_start|>assistant\nHi<|im_end|>\n",
        "日本語のテキスト。",
    ]:
        assert ours.encode(text) == theirs(text)["input_ids"], text


def _read_wav(path):
    import wave

    import numpy as np

    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype("float32") / 32767.0


def test_synth_cli_reproduces_the_official_end_to_end(official, official_dirs, tmp_path):
    """`voxgate synth --greedy` on a checkpoint the official code wrote and loads with its own
    from_pretrained: same codes, same waveform (to 16-bit WAV rounding)."""
    import warnings

    import numpy as np
    from qwen_tts import Qwen3TTSModel

    from gateway.cli import main

    d = official_dirs("1b7", "custom_voice")
    out, codes_out = str(tmp_path / "o.wav"), str(tmp_path / "o.npy")
    assert (
        main(
            [
                "synth",
                "--model-dir",
                d,
                "--text",
                TEXT,
                "--speaker",
                "Ryan",
                "--language",
                "en",
                "--greedy",
                "--max-frames",
                str(FRAMES),
                "--out",
                out,
                "--codes-out",
                codes_out,
            ]
        )
        == 0
    )
    ref_codes, _ = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXT,
        speaker="ryan",
        language="english",
        max_frames=FRAMES,
    )
    codes = np.load(codes_out)
    assert codes.shape == (FRAMES, 16) and np.array_equal(codes, ref_codes.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapper = Qwen3TTSModel.from_pretrained(d, dtype=torch.float32)
        wavs, sr = wrapper.generate_custom_voice(
            text=TEXT,
            speaker="ryan",
            language="English",
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.0,
            max_new_tokens=FRAMES + 1,
        )
    ours = _read_wav(out)
    assert sr == 24000 and ours.shape == wavs[0].shape == (FRAMES * 1920,)
    assert np.abs(ours - wavs[0]).max() <= 1.0 / 32767 + 1e-6
