"""The talker's decode attention (tts/qwen3/attention.py): grouped-query attention folded into query rows,
so the call reaching SDPA is one a fused CUDA kernel takes (no `enable_gqa`, equal head counts, a boolean
mask), with the same values as the GQA call; and the profiler reading of which SDPA kernel ran.

On CUDA, flash attention refuses an explicit mask and the memory-efficient kernel refuses GQA: a call
with both falls to cuDNN or MATH. No GPU here, so the eligibility is checked on the call itself (what a
CUDA run would dispatch on); bench/gpu_check.py reads the kernel names on a GPU."""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from tts.qwen3.attention import decode_attention, kernels_that_ran, pinned_sdpa, talker_pinned
from tts.qwen3.batch import TalkerBatch
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.prompt import build_prompt

SAMPLED = dict(temperature=0.9, top_k=50, top_p=0.8, greedy=False, repetition_penalty=1.05)
PREDICTOR = dict(temperature=0.9, top_k=50, top_p=1.0, greedy=False)


def _inputs(b, hq, hk, t, length, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, t, d, generator=g)
    k, v = (torch.randn(b, hk, length, d, generator=g) for _ in range(2))
    live = torch.randint(t, length + 1, (b,), generator=g)  # each row's own live length
    pos = live.view(-1, 1) - t + torch.arange(t).view(1, -1)  # [B, T]: the last T live positions
    mask = torch.arange(length).view(1, 1, 1, -1) <= pos.view(b, 1, t, 1)
    return q, k, v, mask


@pytest.mark.parametrize("t", [1, 5])
@pytest.mark.parametrize("hq,hk", [(16, 8), (4, 2), (8, 1), (4, 4)])
def test_folded_query_rows_give_the_gqa_result(t, hq, hk):
    q, k, v, mask = _inputs(3, hq, hk, t, 40)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hq != hk)
    got = decode_attention(q, k, v, mask)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


class _SdpaCalls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k = args[0], args[1]
            self.calls.append(
                {
                    "q_heads": q.shape[1],
                    "kv_heads": k.shape[1],
                    "gqa": kwargs.get("enable_gqa", False),
                    "mask": kwargs.get("attn_mask"),
                    "causal": kwargs.get("is_causal", False),
                    "head_dim": q.shape[-1],
                }
            )
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("tiny")
    make_tiny_model(str(d), seed=4)
    return Checkpoint.load(str(d))


def _admitted(ckpt, n=2):
    batch = TalkerBatch(ckpt.model, 4, 128, use_cuda_graphs=False, kv_step=64)
    prompts = [
        build_prompt(ckpt.model.talker, ckpt.config, ckpt.tokenizer, t, speaker="ryan", language="en")
        for t in ("Hello world.", "Short")[:n]
    ]
    batch.admit(list(range(n)), prompts, [SAMPLED] * n, [PREDICTOR] * n)
    return batch


def test_the_talkers_attention_is_a_call_a_fused_cuda_kernel_takes(ckpt):
    """Every masked SDPA call of a step (the talker's decode) has as many query heads as KV heads (no
    enable_gqa: the memory-efficient kernel refuses GQA) and a boolean mask; the tiny model has GQA. The
    prefill's calls are causal without a mask (flash takes them, GQA included; a mask rules flash out)."""
    cfg = ckpt.config.talker
    assert cfg.num_attention_heads > cfg.num_key_value_heads
    assert cfg.head_dim != cfg.code_predictor.head_dim  # tells the talker's calls from the predictor's
    with _SdpaCalls() as admission:
        batch = _admitted(ckpt)
    with _SdpaCalls() as step, torch.inference_mode():
        batch._step_rows(2, 64)
    prefill = [c for c in admission.calls if c["head_dim"] == cfg.head_dim]
    assert len(prefill) == cfg.num_hidden_layers
    assert all(c["causal"] and c["mask"] is None and c["q_heads"] == cfg.num_attention_heads for c in prefill)
    talker = [c for c in step.calls if c["mask"] is not None]
    assert len(talker) == cfg.num_hidden_layers  # the step, every layer
    for c in talker:
        assert not c["gqa"] and c["q_heads"] == c["kv_heads"] == cfg.num_key_value_heads, c
        assert c["mask"].dtype == torch.bool


def test_the_profiler_names_the_kernel_that_ran(ckpt):
    batch = _admitted(ckpt, 1)
    talker = ckpt.model.talker
    with torch.inference_mode():
        seen = kernels_that_ran(lambda: batch._step_rows(1, 64))
        with talker_pinned(talker, "MATH"):
            math = kernels_that_ran(lambda: batch._step_rows(1, 64))
    assert "FLASH_ATTENTION (CPU)" in seen["backends"] and not seen["math"], seen
    assert "MATH" in math["backends"] and math["math"], math
    assert seen["kernels"] == [] and seen["kernel_backends"] == []  # no CUDA kernels on a CPU


def test_a_pinned_backend_runs_the_folded_call():
    q, k, v, mask = _inputs(2, 16, 8, 1, 64)
    with pinned_sdpa("MATH"):
        got = kernels_that_ran(lambda: decode_attention(q, k, v, mask))
    assert got["backends"] == ["MATH"]


def test_model_and_lean_predictor_do_not_import_each_other():
    root = pathlib.Path(__file__).resolve().parents[2] / "tts" / "qwen3"

    def imported(name):
        tree = ast.parse((root / f"{name}.py").read_text())
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }

    assert "tts.qwen3.lean_predictor" not in imported("model")
    assert "tts.qwen3.model" not in imported("lean_predictor")


def test_the_model_runs_one_layout_fused_by_setup_caches():
    """Attention and MLP have one path (fused projections); setup_caches fuses a model loaded without it."""
    from tts.qwen3.tiny import tiny_config
    from tts.qwen3.weights import build_model

    model = build_model(tiny_config("1b7"), "cpu")
    assert model.talker.model.layers[0].self_attn.qkv_weight is None
    model.setup_caches(1, 16)
    for dec in (model.talker.model, model.talker.code_predictor.model):
        assert all(
            layer.self_attn.qkv_weight is not None and layer.mlp.gate_up_weight is not None for layer in dec.layers
        )
    with torch.inference_mode():
        x = torch.randn(1, 3, model.config.talker.hidden_size)
        _, logits = model.talker(x, torch.arange(3).view(1, 3))
    assert torch.isfinite(logits).all()
