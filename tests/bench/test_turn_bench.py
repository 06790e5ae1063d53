"""`voxgate bench --turn-mode`: the playback gap count, and one short run on the tiny checkpoint."""

from __future__ import annotations

import argparse
import json

import pytest

from bench.turn_bench import _playback, turn_bench_main
from tests.bench.test_plots import assert_drawn


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("turn_bench_tiny")
    make_tiny_model(str(d), variant="1b7", kind="custom_voice", seed=0)
    return str(d)


def test_playback_counts_the_waits_a_caller_would_hear():
    assert _playback([]) == (0, 0.0)
    assert _playback([(0.0, 0.5), (0.4, 0.5)]) == (0, 0.0)  # arrived before the previous piece ended
    gaps, total = _playback([(0.0, 0.2), (0.5, 0.2), (0.71, 0.2)])
    assert gaps == 1 and abs(total - 0.3) < 1e-9  # 0.3 s of silence; 10 ms late is below an audible gap


def test_a_short_turn_mode_run_reports_both_modes(tiny_dir, tmp_path):
    out = tmp_path / "t.json"
    args = argparse.Namespace(
        model_dir=tiny_dir,
        llm_rate=50.0,
        device="cpu",
        dtype="float32",
        max_batch=4,
        vocoder="torch",
        turn_repeats=1,
        turn_frames_per_token=1.0,
        json_output=str(out),
        turn_texts=["Hello there. How are you today?"],
        plot=str(tmp_path / "modes.png"),
    )
    assert turn_bench_main(args) == 0
    report = json.loads(out.read_text())
    drawn = assert_drawn(tmp_path / "modes.png", "turn_mode")["runs"][0]  # --plot: both modes' summaries, drawn
    assert drawn["label"] == "50 words/s" and drawn["result"]["turn"] == report["turn"]
    assert report["turn"]["requests_per_turn"] == 1 and report["sentence"]["requests_per_turn"] >= 2
    assert report["turn"]["first_audio_ms_p50"] > 0 and report["turn"]["audio_s_per_turn"] > 0
