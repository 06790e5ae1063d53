"""The aligner port against the official Qwen3ForcedAligner (qwen-asr 0.0.6) on a tiny random checkpoint
in the released layout: the same word times, and logits within float32 tolerance, for English and
Russian texts of several lengths, one clip at a time and several in one batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.aligner.official import official_unavailable_reason

TEXTS = {
    "en_word": ("Yes.", 0.6),  # under a second: one convolution chunk, padded to its own width
    "en_short": ("Hello world.", 1.2),
    "en_mid": ("The meeting moved to Tuesday, at 3 pm; please confirm by e-mail.", 3.7),
    "en_long": (
        "Thanks for calling. Your order 4512 ships tomorrow morning, and the courier will phone you "
        "about thirty minutes before arriving, so keep your line free.",
        8.3,
    ),
    "ru_word": ("Да!", 0.45),
    "ru_short": ("Привет, мир!", 1.1),
    "ru_mid": ("Встреча перенесена на вторник, в 15:00; подтвердите, пожалуйста, письмом.", 4.4),
    "ru_long": (
        "Спасибо за звонок. Ваш заказ номер 4512 отправят завтра утром, а курьер позвонит "
        "примерно за полчаса до приезда, так что держите телефон свободным.",
        9.6,
    ),
}


@pytest.fixture(scope="module")
def official():
    reason = official_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from tests.aligner import official as helpers

    return helpers


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tts.aligner.tiny import make_tiny_aligner

    d = tmp_path_factory.mktemp("tiny_aligner")
    make_tiny_aligner(str(d), seed=1)
    return str(d)


def _audio(seconds: float, seed: int) -> np.ndarray:
    """Speech-like 24 kHz audio: voiced bursts (a few harmonics, a little noise) between digital silences,
    at a level that differs per seed (the log-mel floor is relative to each clip's own peak)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 24000)
    t = np.arange(n) / 24000
    f0 = 110 + 40 * np.sin(2 * np.pi * 0.7 * t)
    voiced = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 24000) / k for k in range(1, 6))
    envelope = (np.sin(2 * np.pi * 3.1 * t + seed) > -0.3).astype(np.float64)
    gain = (0.02, 0.3, 0.9)[seed % 3]
    return (gain * envelope * (voiced + 0.05 * rng.standard_normal(n))).astype(np.float32)


def _clips(names):
    return [(_audio(TEXTS[k][1], i), 24000, TEXTS[k][0]) for i, k in enumerate(names)]


def _check(official, tiny_dir, names):
    from tts.aligner import ForcedAligner

    ours = ForcedAligner.from_dir(tiny_dir)
    ref = official.load(tiny_dir)
    clips = _clips(names)
    results, ref_logits, ref_ids, ref_mask = official.align_with_logits(
        ref, [(pcm, rate) for pcm, rate, _ in clips], [text for _, _, text in clips]
    )
    batch = ours.prepare(clips)
    assert torch.equal(batch.input_ids, ref_ids), "prompt token ids differ"
    assert torch.equal(batch.attention_mask, ref_mask)
    logits = ours.logits(batch)
    real = ref_mask.bool()
    torch.testing.assert_close(logits[real], ref_logits[real], rtol=1e-4, atol=1e-4)
    seen = set()
    for k, ms, words, result in zip(names, ours.boundaries_ms(batch, logits), batch.words, results):
        assert [w.text for w in words] == [item.text for item in result], k
        ref_ms = [round(v * 1000) for item in result for v in (item.start_time, item.end_time)]
        assert ms == ref_ms, k
        seen.update(ms)
    if sum(len(words) for words in batch.words) > 1:
        assert len(seen) >= 2, "a degenerate tiny model (all times alike) proves little"


@pytest.mark.parametrize("name", list(TEXTS))
def test_one_clip_matches_official(official, tiny_dir, name):
    _check(official, tiny_dir, [name])


def test_a_batch_of_clips_matches_official(official, tiny_dir):
    _check(official, tiny_dir, ["en_long", "ru_word", "en_mid", "ru_long", "en_word"])


def test_the_monotonic_fix_up_matches_official(official):
    """Random raw slot times, runs of every length out of order among them, through both fix-ups."""
    from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForceAlignProcessor

    from tts.aligner.words import fix_timestamps

    ref = Qwen3ForceAlignProcessor()
    rng = np.random.default_rng(0)
    for n in range(1, 40):
        for _ in range(20):
            raw = np.sort(rng.integers(0, 60, n)) * 80.0
            wild = rng.random(n) < 0.3  # stray values, alone or in runs
            raw[wild] = rng.integers(0, 60, int(wild.sum())) * 80.0
            assert fix_timestamps(raw.tolist()) == ref.fix_timestamp(raw), raw.tolist()
