"""Sampling on the device: the official processors and warpers, per row."""

from __future__ import annotations

import torch

from tts.qwen3.sampling import TWO_STAGE_MIN, SamplingRows, sample, talker_logits, top_k, warp


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


def test_two_stage_top_k_is_torch_topk_on_engine_shapes():
    """The CPU two-stage top-k (batches of 16+ rows) gives topk's values, sorted, and its indices."""
    gen = torch.Generator().manual_seed(7)
    for rows, vocab, k in ((16, 2048, 50), (16, 3072, 50), (64, 2048, 50), (12, 2048, 256), (32, 3072, 1)):
        assert rows * vocab >= TWO_STAGE_MIN
        x = torch.randn(rows, vocab, generator=gen)
        w = vocab // 8
        x[0, torch.arange(8) * w + 3] += 100.0  # one chunk holds 8 of the top values
        x[1] = torch.arange(vocab, dtype=torch.float32)  # the top k are the last tokens, a few per chunk
        x[2, vocab // 2 :] = float("-inf")  # suppressed ids, as the talker's logits have
        x[3, : vocab - 5] = float("-inf")  # fewer finite values than k (k > 5): -inf ties fill the rest
        want_v, want_i = x.topk(k, dim=-1)
        got_v, got_i = top_k(x, k)
        assert torch.equal(got_v, want_v)
        finite = torch.isfinite(want_v)
        assert torch.equal(got_i[finite], want_i[finite])
        assert all(len(set(r)) == k for r in got_i.tolist())  # k distinct tokens per row
