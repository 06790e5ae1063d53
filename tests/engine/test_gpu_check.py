"""scripts/gpu_check.sh's driver end to end on CPU (--smoke: tiny shapes of the released structure).
It measures nothing here; it proves the phases run, time what their rows name, compare what serving runs
with eager, submit requests, stay within their budgets, and write their JSON and a row per phase."""

from __future__ import annotations

import json

import pytest
import torch

from bench import gpu_check

PHASES = ("a_env", "b_graphs", "c_timings", "d_syncs", "e_poisson")


@pytest.fixture
def tiny_shapes(monkeypatch):
    import tts.qwen3.codec as codec
    import tts.qwen3.config as config

    # the driver swaps the released shapes for tiny ones in --smoke: undo that after the test
    monkeypatch.setattr(config, "released_config", config.released_config)
    monkeypatch.setattr(codec, "CodecConfig", codec.CodecConfig)


def test_the_smoke_run_writes_every_phase_and_a_table(tmp_path, tiny_shapes, capsys):
    result = gpu_check.run(str(tmp_path), budget_s=600, smoke=True, sizes=("1.7b",))
    printed = capsys.readouterr().out
    on_disk = json.loads((tmp_path / "gpu_check.json").read_text())
    r = on_disk["models"]["1.7b"]
    for key in PHASES:
        assert key in r and "error" not in r[key] and "failed" not in r[key] and "skipped" not in r[key], (
            key,
            r.get(key),
        )
    assert r["a_env"]["sdpa_note"].startswith("CPU")
    # (b) graphs stand-in: live vs full columns; then every serving length bucket, served step vs eager
    rows = r["b_graphs"]["rows"]
    assert rows and all(x["codes_equal"] and x["max_hidden_diff"] == 0.0 for x in rows)
    buckets = r["b_graphs"]["buckets"]
    assert [(x["kv_len"], x["wide"]) for x in buckets] == [(32, False), (64, False), (96, False), (128, False)] + [
        (32, True),
        (128, True),
    ]  # the whole-vocabulary layout's graphs too
    assert all(x["ok"] for x in rows) and all(x["topk_equal"] for x in buckets)
    assert all(x["ok"] and x["max_rel_logit_diff"] <= x["tolerance"] for x in buckets)
    assert all(x["sdpa_ran"] == ["FLASH_ATTENTION (CPU)"] for x in buckets) and r["b_graphs"]["math_ran"] == []
    assert r["b_graphs"]["predictor_sdpa_ran"] == ["FLASH_ATTENTION (CPU)"]
    # (c) each row timed at the length its kv column names, every repetition, no capture inside
    steps = r["c_timings"]["step_ms"]
    for b in (1, 4):
        short, long = ([x for x in steps if x["batch"] == b and x["cache"] == c][0] for c in ("short", "long"))
        assert short["kv_len"] == 32 and short["kv_lens_timed"] == [32], short
        assert long["kv_len"] == 128 and long["kv_lens_timed"] == [128], long
        assert short["captures_in_timed_loop"] == long["captures_in_timed_loop"] == 0
    assert r["c_timings"]["vocoder"] and r["c_timings"]["prefill_ms"]
    assert set(r["c_timings"]["vocoder_not_exercised"]) == {"torch-graphs", "onnxruntime", "tensorrt"}
    d = r["d_syncs"]
    assert d["watched_syncs"] == d["steps"] + d["vocoder_calls"] and d["loop_syncs_per_step"] == 1.0
    # (e) the level submitted requests and they played
    level = r["e_poisson"]["levels"][0]
    assert level["requests"] >= 1 and level["audio_s"] > 0 and "first_audio_p95_ms" in level
    # budgets: what each phase had here and would have on a GPU, printed in a row as each phase ended
    gpu = on_disk["gpu_plan_s"]["1.7b"]
    assert set(gpu) == {"load", *PHASES} and all(v > 0 for v in gpu.values())
    assert set(r["phase_budget_s"]) == set(PHASES)
    for key in ("load", *PHASES):
        line = next(x for x in printed.splitlines() if x.startswith("1.7b") and f" {key} " in x)
        assert f"{gpu[key]:.1f}" in line, line
    assert gpu_check.failures(on_disk) == []
    text = gpu_check.table(result)
    assert "1.7b" in text and "graphs=eager" in text and "pinned=eager" in text and "not exercised" in text


def test_the_default_gpu_run_fits_its_minutes():
    """Two full runs and a machine start (1-2 min) in a 15-minute loan, with margin: the default budget (model
    construction and imports included) at most 240 s, the script's hard kill at least 45 s after it."""
    import re
    from pathlib import Path

    plan = gpu_check.budget_plan(gpu_check.DEFAULT_BUDGET_S)
    assert sum(sum(parts.values()) for parts in plan.values()) <= gpu_check.DEFAULT_BUDGET_S + 0.5  # rounding
    assert gpu_check.DEFAULT_BUDGET_S <= 240 and gpu_check.HARD_KILL_MARGIN_S >= 45
    script = (Path(__file__).parents[2] / "scripts" / "gpu_check.sh").read_text()
    assert f"BUDGET:-{gpu_check.DEFAULT_BUDGET_S:.0f}" in script
    assert re.search(r"timeout \$\(\(BUDGET \+ extra \+ (\d+)\)\)", script).group(1) == str(
        gpu_check.HARD_KILL_MARGIN_S
    )
    assert "f_tensorrt" not in str(plan) and "f_tensorrt" in str(gpu_check.budget_plan(240, tensorrt=True))
    assert "f_onnxruntime" not in str(plan) and "f_onnxruntime" in str(gpu_check.budget_plan(240, onnx=True))


def test_a_served_step_that_disagrees_with_eager_fails_the_phase(tiny_shapes, monkeypatch):
    """A pinned kernel that ignored the rows' live lengths (attending to every column) is caught per
    length bucket, and the phase fails."""
    import tts.qwen3.model as model

    gpu_check._smoke_shapes()
    ctx = gpu_check._context("1.7b", smoke=True)
    layers = ctx.model.talker.model.layers
    real = model.decode_attention

    def ignores_lengths_when_pinned(q, k, v, mask):
        return real(q, k, v, torch.ones_like(mask) if layers[0].self_attn.sdpa_backend else mask)

    monkeypatch.setattr(model, "decode_attention", ignores_lengths_when_pinned)
    ctx.graph_buckets = ()
    out = gpu_check.phase_graphs(ctx, gpu_check.Budget(120))
    assert out["buckets"] and not any(x["ok"] for x in out["buckets"])
    assert out["failed"].startswith("pinned/captured logits differ")
    assert gpu_check.failures({"models": {"1.7b": {"b_graphs": out}}})
