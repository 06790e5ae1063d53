"""`make-tiny-model --type base` writes both encoders; `voxgate bench --ref-audio` reports a cloned
voice's cost before first audio (first use against cached) on it."""

from __future__ import annotations

import json

from gateway.cli import main
from tests.qwen3.clone_audio import speech_like, write_wav


def test_tiny_base_model_and_clone_bench(tmp_path, capsys):
    d = str(tmp_path / "tiny")
    assert main(["make-tiny-model", d, "--variant", "0b6", "--type", "base"]) == 0
    from tts.qwen3.codec.encoder import load_codec_encoder
    from tts.qwen3.tools import load_speaker_encoder

    assert load_codec_encoder(f"{d}/speech_tokenizer").config.valid_quantizers == 16
    assert load_speaker_encoder(d).fc.out_channels == 32  # enc_dim = the tiny 0.6B talker width

    ref = write_wav(tmp_path / "ref.wav", speech_like(2.0, 16000), 16000)
    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "--model-dir",
                d,
                "--ref-audio",
                ref,
                "--ref-text",
                "Hello there.",
                "--device",
                "cpu",
                "--json-output",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["mode"] == "icl" and r["ref_frames"] == 25
    assert set(r["prepare"]) == {"computed_ms", "memory_ms", "disk_ms"}
    assert set(r["ttfa_ms"]) == {"first_use", "cached_p50", "after_restart_first", "x_vector_only_p50"}
    assert (
        r["prompt"]["prefill_positions"]
        > r["prompt"]["x_vector_only_positions"]
        > r["prompt"]["shared_prefix_positions"]
    )
    assert "first use" in capsys.readouterr().out
