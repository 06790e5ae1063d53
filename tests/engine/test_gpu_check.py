"""scripts/gpu_check.sh's driver end to end on CPU (--smoke: tiny shapes of the released structure).
It measures nothing here; it proves the phases run, agree with each other, and write their JSON."""

from __future__ import annotations

import json

from bench import gpu_check


def test_the_smoke_run_writes_every_phase_and_a_table(tmp_path, monkeypatch):
    import tts.qwen3.codec as codec
    import tts.qwen3.config as config

    # the driver swaps the released shapes for tiny ones in --smoke: undo that after the test
    monkeypatch.setattr(config, "released_config", config.released_config)
    monkeypatch.setattr(codec, "CodecConfig", codec.CodecConfig)
    result = gpu_check.run(str(tmp_path), budget_s=600, smoke=True, sizes=("1.7b",))
    on_disk = json.loads((tmp_path / "gpu_check.json").read_text())
    r = on_disk["models"]["1.7b"]
    for key in ("a_env", "b_graphs", "c_timings", "d_syncs", "e_poisson"):
        assert key in r and "error" not in r[key], (key, r.get(key))
    assert r["a_env"]["sdpa_note"].startswith("CPU")
    rows = r["b_graphs"]["rows"]
    assert rows and all(x["codes_equal"] and x["max_hidden_diff"] == 0.0 for x in rows)  # live vs full columns
    assert any(x.get("cache") == "long" and x["kv_len"] == 128 for x in r["c_timings"]["step_ms"])
    assert r["c_timings"]["vocoder"] and r["c_timings"]["prefill_ms"]
    d = r["d_syncs"]
    assert d["watched_syncs"] == d["steps"] + d["vocoder_calls"] and d["loop_syncs_per_step"] == 1.0
    assert r["e_poisson"]["levels"] and "first_audio_p95_ms" in r["e_poisson"]["levels"][0]
    text = gpu_check.table(result)
    assert "1.7b" in text and "graphs=eager" in text
