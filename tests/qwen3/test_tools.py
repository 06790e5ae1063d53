"""`voxgate make-tiny-model` and `voxgate synth` on CPU."""

from __future__ import annotations

import os
import wave

import numpy as np
import pytest

from gateway.cli import main
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.generate import GenerationSettings, generate_codes
from tts.qwen3.prompt import PromptError, build_prompt


def _synth(model_dir, tmp_path, *extra):
    out, codes = str(tmp_path / "o.wav"), str(tmp_path / "o.npy")
    rc = main(["synth", "--model-dir", model_dir, "--text", "Hello world.", "--out", out, "--codes-out", codes, *extra])
    return rc, out, codes


def test_synth_writes_wav_and_codes_of_matching_length(tiny_dir, tmp_path):
    rc, out, codes = _synth(tiny_dir, tmp_path, "--speaker", "ryan", "--greedy", "--max-frames", "6")
    assert rc == 0
    c = np.load(codes)
    assert c.ndim == 2 and c.shape[1] == 16 and 1 <= len(c) <= 6 and c.dtype == np.int64
    with wave.open(out) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert len(pcm) == len(c) * 1920 and np.abs(pcm).max() > 0


def test_seeded_sampling_repeats_and_seeds_differ(tiny_dir, tmp_path):
    runs = []
    for seed in ("1", "1", "2"):
        rc, _, codes = _synth(tiny_dir, tmp_path, "--speaker", "vivian", "--seed", seed, "--max-frames", "5")
        assert rc == 0
        runs.append(np.load(codes))
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], runs[2])


def test_synth_refuses_unknown_speaker_and_language(tiny_dir, tmp_path, capsys):
    assert _synth(tiny_dir, tmp_path, "--speaker", "nobody")[0] == 2
    assert "unknown_voice" in capsys.readouterr().err
    assert _synth(tiny_dir, tmp_path, "--speaker", "ryan", "--language", "xx")[0] == 2
    assert "unsupported_language" in capsys.readouterr().err


def test_synth_refuses_a_directory_that_is_not_a_checkpoint(tmp_path, capsys):
    assert _synth(str(tmp_path), tmp_path)[0] == 2
    assert "config.json is missing" in capsys.readouterr().err


@pytest.mark.parametrize("variant,kind", [("0b6", "custom_voice"), ("1b7", "voice_design"), ("0b6", "base")])
def test_make_tiny_model_writes_every_file_and_loads(tmp_path, variant, kind):
    d = str(tmp_path / f"{variant}_{kind}")
    assert main(["make-tiny-model", d, "--variant", variant, "--type", kind]) == 0
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "speech_tokenizer/config.json",
        "speech_tokenizer/model.safetensors",
    ):
        assert os.path.isfile(os.path.join(d, name)), name
    ckpt = Checkpoint.load(d)
    assert ckpt.config.tts_model_type == kind and ckpt.config.tts_model_size == variant
    assert (ckpt.model.speaker_encoder is not None) == (kind == "base")


def test_voice_design_speaks_from_an_instruction_and_base_needs_an_xvector(tmp_path):
    import torch

    vd, base = str(tmp_path / "vd"), str(tmp_path / "base")
    main(["make-tiny-model", vd, "--type", "voice_design"])
    main(["make-tiny-model", base, "--type", "base"])
    ck = Checkpoint.load(vd, with_codec=False)
    with_instr = build_prompt(ck.model.talker, ck.config, ck.tokenizer, "Hi there.", instruct="A warm voice.")
    plain = build_prompt(ck.model.talker, ck.config, ck.tokenizer, "Hi there.")
    assert with_instr.prefill.shape[0] > plain.prefill.shape[0]
    codes = generate_codes(
        ck.model, with_instr, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=3)
    ).codes
    assert codes.shape[1] == 16
    cb = Checkpoint.load(base, with_codec=False)
    with pytest.raises(PromptError, match="x-vector"):
        build_prompt(cb.model.talker, cb.config, cb.tokenizer, "Hi.")
    xvec = torch.randn(cb.config.talker.hidden_size)
    assert build_prompt(cb.model.talker, cb.config, cb.tokenizer, "Hi.", xvector=xvec).prefill.shape[0] > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_talker_with_float32_codec_is_finite_and_not_silent(tiny_dir, tmp_path, dtype):
    rc, out, codes = _synth(tiny_dir, tmp_path, "--speaker", "ryan", "--greedy", "--max-frames", "4", "--dtype", dtype)
    assert rc == 0
    ck = Checkpoint.load(tiny_dir, dtype=dtype)
    prompt = build_prompt(ck.model.talker, ck.config, ck.tokenizer, "Hello world.", speaker="ryan", language="en")
    c = generate_codes(ck.model, prompt, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=4)).codes
    assert c.shape == (4, 16) and int(c.min()) >= 0 and int(c.max()) < 2048
    pcm = ck.codec.decode(c.unsqueeze(0))[0].numpy()
    assert np.isfinite(pcm).all() and np.abs(pcm).max() > 1e-4
