"""`voxgate bench` end to end on CPU: the random-weights path (shapes shrunk for CPU) and the JSON/trace contract."""

from __future__ import annotations

import json

import pytest

from gateway.cli import main


@pytest.fixture
def tiny_random_shapes(monkeypatch, tmp_path):
    """--random-weights builds the released shapes; on CPU we swap in tiny ones of the same structure."""
    import tts.qwen3.codec as codec
    import tts.qwen3.config as config
    from tts.qwen3.tiny import tiny_config, write_codec, write_tokenizer

    st = write_codec(str(tmp_path), seed=0)
    ids = write_tokenizer(str(tmp_path))
    tiny_codec = codec.CodecConfig.from_dir(str(tmp_path / "speech_tokenizer"))
    monkeypatch.setattr(
        config, "released_config", lambda size, kind="custom_voice": tiny_config("1b7", kind, *st, text_ids=ids)
    )
    monkeypatch.setattr(codec, "CodecConfig", lambda: tiny_codec)


def test_random_weights_bench_writes_levels_and_trace(tiny_random_shapes, tmp_path, capsys):
    out, trace = tmp_path / "b.json", tmp_path / "t.json"
    rc = main(
        [
            "bench",
            "--random-weights",
            "1.7b",
            "--device",
            "cpu",
            "--frames",
            "3",
            "--streaming",
            "--concurrency",
            "1,3",
            "--json-output",
            str(out),
            "--trace",
            str(trace),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Label" in printed and "Prefill" in printed and "TTFA(ms)" in printed
    r = json.loads(out.read_text())
    assert [lv["concurrency"] for lv in r["levels"]] == [1, 3]
    for lv in r["levels"]:
        assert {"concurrency", "audio_x", "rtf", "ttfa_p50_ms", "ttfa_p95_ms"} <= set(lv)
        assert lv["audio_s"] == pytest.approx(lv["concurrency"] * 3 * 0.08)  # --frames fixes the length
        assert lv["host_syncs"] is None  # timed levels are not watched
    sy = r["syncs"]  # the watched level: one wait per step and one per vocoder call, nothing else
    assert sy["steps"] > 0 and sy["host_syncs"] == sy["steps"] + sy["vocoder_calls"]
    assert len(r["stages"]) == 3
    names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"prefill", "code_predictor", "talker_step", "sampling", "host_sync", "vocoder"} <= names


def test_arrival_benches_write_their_levels(tiny_random_shapes, tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = main(
        [
            "bench",
            "--random-weights",
            "1.7b",
            "--device",
            "cpu",
            "--frames",
            "3",
            "--arrivals",
            "poisson",
            "--rate",
            "20,40",
            "--duration",
            "0.3",
            "--slo-first-audio-ms",
            "1e9",
            "--json-output",
            str(out),
        ]
    )
    assert rc == 0
    levels = json.loads(out.read_text())["poisson"]
    assert [lv["rate"] for lv in levels][0] == 20
    for lv in levels:
        assert {
            "first_audio_p50_ms",
            "first_audio_p95_ms",
            "first_audio_p99_ms",
            "keeping_up_share",
            "vocoder_share",
            "prefill_share",
            "step_ms",
            "peak_mem_mb",
            "passed",
        } <= set(lv)
        assert lv["step_ms"] and all("p99_ms" in v for v in lv["step_ms"].values())
    out = tmp_path / "b.json"
    rc = main(
        [
            "bench",
            "--random-weights",
            "1.7b",
            "--device",
            "cpu",
            "--frames",
            "12",
            "--arrivals",
            "burst",
            "--burst",
            "6",
            "--background",
            "1",
            "--json-output",
            str(out),
        ]
    )
    assert rc == 0
    runs = json.loads(out.read_text())["burst"]
    assert [r["prefill_budget_tokens"] for r in runs][:2] == [10**9, 0]
    assert runs[0]["largest_admission"] == 6  # unbudgeted: the whole burst in one prefill
    assert all(r["longest_gap_ms"] is not None for r in runs)
