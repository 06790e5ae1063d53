"""The aligner's run-time API on a tiny checkpoint: what it times, in which units, and its clear errors."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from tts.aligner import ForcedAligner
from tts.aligner.words import split_words
from tts.qwen3.config import ConfigError


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tts.aligner.tiny import make_tiny_aligner

    d = tmp_path_factory.mktemp("tiny_aligner")
    make_tiny_aligner(str(d), seed=1)
    return str(d)


def test_words_are_the_texts_whitespace_tokens_with_letters_or_digits():
    text = "Итак — 15% «готово», don't\tstop 北京 !"
    got = [(w.text, text[w.char_start : w.char_end]) for w in split_words(text)]
    assert got == [
        ("Итак", "Итак"),
        ("15", "15%"),
        ("готово", "«готово»,"),
        ("don't", "don't"),
        ("stop", "stop"),
        ("北", "北京"),
        ("京", "北京"),
    ]


def test_align_times_each_token_once_in_order_in_the_clips_samples(tiny_dir):
    aligner = ForcedAligner.from_dir(tiny_dir)
    rng = np.random.default_rng(0)
    texts = ["Hello — world, again.", "Привет 北京!"]
    clips = [
        (0.2 * rng.standard_normal(int(24000 * s)).astype(np.float32), 24000, t) for s, t in zip((2.0, 1.3), texts)
    ]
    out = aligner.align(clips)
    assert [[texts[i][w.char_start : w.char_end] for w in words] for i, words in enumerate(out)] == [
        ["Hello", "world,", "again."],
        ["Привет", "北京!"],
    ]
    for (pcm, _, _), words in zip(clips, out):
        ends = [w.end for w in words]
        assert all(0 <= w.start <= w.end for w in words)
        assert ends == sorted(ends)
        assert all(w.start % 1920 == 0 for w in words)  # 80 ms classes, at 24 kHz
    assert aligner.align([]) == []


def test_a_clip_too_short_to_align_is_a_clear_error(tiny_dir):
    aligner = ForcedAligner.from_dir(tiny_dir)
    with pytest.raises(ValueError, match="shorter than 20 ms"):
        aligner.align([(np.zeros(100, np.float32), 24000, "Hi")])


def test_bad_directories_are_config_errors(tiny_dir, tmp_path):
    with pytest.raises(ConfigError) as e:
        ForcedAligner.from_dir(str(tmp_path / "nowhere"))
    assert e.value.code == "missing_dir"
    asr = tmp_path / "asr"
    shutil.copytree(tiny_dir, asr)
    raw = json.loads((asr / "config.json").read_text())
    raw["thinker_config"]["model_type"] = "qwen3_asr_thinker"  # an ASR checkpoint, not the aligner
    (asr / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as e:
        ForcedAligner.from_dir(str(asr))
    assert e.value.code == "bad_config"
    (asr / "config.json").write_text(
        json.dumps({**raw, "thinker_config": {**raw["thinker_config"], "model_type": "qwen3_forced_aligner"}})
    )
    os.remove(asr / "model.safetensors")
    with pytest.raises(ConfigError) as e:
        ForcedAligner.from_dir(str(asr))
    assert e.value.code == "missing_file"
