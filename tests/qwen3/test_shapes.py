"""The released 0.6B and 1.7B shapes, built on the meta device, against the official classes."""

from __future__ import annotations

import pytest
import torch

from tts.qwen3.config import released_config
from tts.qwen3.weights import build_model

# Parameter counts of our build (talker + code predictor [+ speaker encoder for Base]).
EXPECTED = {("0b6", "custom_voice"): 905_788_672, ("1b7", "custom_voice"): 1_916_676_352}


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "size,kind",
    [("0b6", "custom_voice"), ("1b7", "custom_voice"), ("0b6", "base"), ("1b7", "base"), ("1b7", "voice_design")],
)
def test_meta_build_matches_official_keys_shapes_and_counts(official, size, kind):
    cfg = released_config(size, kind)
    ours = build_model(cfg, "meta")
    with torch.device("meta"):
        theirs = official.official_from_config_json(cfg.to_json())
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in theirs.state_dict().items()
    }
    assert _count(ours) == _count(theirs)


@pytest.mark.parametrize("size", ["0b6", "1b7"])
def test_real_shapes_build_without_weights(size):
    model = build_model(released_config(size), "meta")
    assert _count(model) == EXPECTED[(size, "custom_voice")]
    proj = model.talker.code_predictor.small_to_mtp_projection
    assert isinstance(proj, torch.nn.Linear) == (size == "1b7")
