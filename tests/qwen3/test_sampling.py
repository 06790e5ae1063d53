"""Sampling on the device: the official processors and warpers, per row."""

from __future__ import annotations

import torch

from tts.qwen3.sampling import SamplingRows, sample, talker_logits, warp


def test_greedy_rows_take_the_argmax_and_sampled_rows_stay_in_top_k():
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
    rows = SamplingRows.filled(4, "cpu", top_k=3)
    rows.set_row(0, temperature=1.0, top_k=3, top_p=1.0, greedy=True)
    gen = torch.Generator().manual_seed(1)
    top3 = logits.topk(3).indices
    for _ in range(50):
        tok = sample(logits, rows, gen)
        assert tok[0] == logits[0].argmax()
        assert all(tok[i] in top3[i] for i in range(1, 4))


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    rows = SamplingRows.filled(1, "cpu", temperature=1.0, top_k=0, top_p=0.75)
    kept = torch.isfinite(warp(logits, rows))
    assert kept.tolist() == [[True, True, False, False]]


def test_sampling_follows_the_distribution():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(20000, 3)
    rows = SamplingRows.filled(20000, "cpu", temperature=1.0, top_k=0)
    counts = torch.bincount(sample(logits, rows, torch.Generator().manual_seed(2)), minlength=3).float() / 20000
    assert torch.allclose(counts, torch.tensor([0.7, 0.2, 0.1]), atol=0.02)


def test_talker_processors_penalise_seen_block_eos_early_and_suppress_controls():
    logits = torch.tensor([[2.0, -2.0, 1.0, 5.0, 4.0]])
    seen = torch.tensor([[True, True, False, False, False]])
    suppress = torch.tensor([False, False, False, True, False])
    out = talker_logits(logits, seen, torch.tensor([2.0]), suppress, eos_id=4, eos_allowed=torch.tensor([False]))
    assert out[0, :3].tolist() == [1.0, -4.0, 1.0]
    assert out[0, 3] == float("-inf") and out[0, 4] == float("-inf")
    out = talker_logits(logits, seen, torch.tensor([2.0]), suppress, eos_id=4, eos_allowed=torch.tensor([True]))
    assert out[0, 4] == 4.0


def test_top_k_path_follows_the_renormalised_distribution():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.06, 0.04])
    logits = probs.log().expand(20000, 5)
    rows = SamplingRows.filled(20000, "cpu", temperature=1.0, top_k=3)
    counts = torch.bincount(sample(logits, rows, torch.Generator().manual_seed(5)), minlength=5).float() / 20000
    assert torch.allclose(counts, torch.tensor([4 / 9, 3 / 9, 2 / 9, 0, 0]), atol=0.02)


def test_top_k_with_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(2000, 4)
    rows = SamplingRows.filled(2000, "cpu", temperature=1.0, top_k=3, top_p=0.75)
    toks = sample(logits, rows, torch.Generator().manual_seed(6))
    assert set(toks.tolist()) == {0, 1}
