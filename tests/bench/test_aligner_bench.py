"""`voxgate bench --aligner-dir`: one short run on the tiny checkpoints reports the engine with the aligner off
and on, and the aligner alone, per level."""

from __future__ import annotations

import argparse
import json

from bench.aligner_bench import aligner_bench_main


def test_a_short_aligner_run_reports_off_on_and_alone(tmp_path):
    from tts.aligner.tiny import make_tiny_aligner
    from tts.qwen3.tiny import make_tiny_model

    model, aligner, out = tmp_path / "tiny", tmp_path / "aligner", tmp_path / "a.json"
    make_tiny_model(str(model), seed=0)
    make_tiny_aligner(str(aligner), seed=1)
    args = argparse.Namespace(
        model_dir=str(model),
        random_weights=None,
        aligner_dir=str(aligner),
        device="cpu",
        dtype="float32",
        concurrency="1,3",
        frames=12,
        max_batch=None,
        vocoder="torch",
        json_output=str(out),
    )
    assert aligner_bench_main(args) == 0
    levels = json.loads(out.read_text())["levels"]
    assert [row["concurrency"] for row in levels] == [1, 3]
    for row in levels:
        c = row["concurrency"]
        assert row["off"]["words"] == 0 and row["on"]["words"] == c  # words only with the aligner on
        assert row["on"]["words_after_audio_p50_ms"] > 0
        assert row["aligner"]["clips"] == c and row["aligner"]["ms_per_audio_s"] > 0
        assert abs(row["off"]["audio_s"] - c * 12 * 0.08) < 1e-6  # 12 frames each, EOS ignored
