"""Word timings from the Qwen3-ForcedAligner port, end to end: a real gateway with the Qwen3 engine (tiny random
checkpoints) and `engine.aligner_dir` sends `audio.words` with source `aligner` for every word as written, and
`turn.done` says `timing_source: aligner`; the same gateway without the aligner sends the estimate."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config
from gateway.app import Gateway
from tests.conftest import Client
from tts.qwen3.engine import EngineSettings, Qwen3Engine

UNPACED = {"encoding": "pcm16", "sample_rate": 24000, "pacing": "none"}
TEXT = "Hello there — my friend. Привет, мир!"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    from tts.aligner.tiny import make_tiny_aligner
    from tts.qwen3.tiny import make_tiny_model

    model, aligner = str(tmp_path_factory.mktemp("tiny_cv")), str(tmp_path_factory.mktemp("tiny_aligner"))
    make_tiny_model(model, seed=4)
    make_tiny_aligner(aligner, seed=1)
    return model, aligner


async def _speak(model_dir: str, aligner_dir: str | None) -> tuple[list[dict], list[str], dict]:
    engine_cfg = {"kind": "qwen3", "model_dir": model_dir, "device": "cpu", "dtype": "float32"}
    if aligner_dir:
        engine_cfg["aligner_dir"] = aligner_dir
    cfg = load_config(None, {"server": {"host": "127.0.0.1", "port": 0}, "engine": engine_cfg})
    # short caps: random weights rarely say EOS
    settings = dict(device="cpu", dtype="float32", max_batch=2, max_seq_len=256, frames_base=6, frames_per_token=0.3)
    engine = Qwen3Engine(EngineSettings(model_dir=model_dir, aligner_dir=cfg.engine.aligner_dir, **settings))
    gw = Gateway(cfg, engine=engine)
    await gw.start(host="127.0.0.1", port=0)
    try:
        c = await Client.connect(gw)
        await c.start(output=UNPACED, word_timings=True)
        await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
        done = await c.until("turn.done", timeout=60, turn_id="t1")
        events = c.of_type("audio.words")
        return [w for e in events for w in e["words"]], [e["source"] for e in events], done
    finally:
        await gw.stop()


async def test_audio_words_come_from_the_aligner(dirs):
    words, sources, done = await _speak(*dirs)
    assert [w["text"] for w in words] == TEXT.split()  # every word once, in order, as written
    assert set(sources) == {"aligner"} and done["timing_source"] == "aligner"
    ends = [w["end_ms"] for w in words]
    assert ends == sorted(ends) and all(w["start_ms"] <= w["end_ms"] for w in words)


async def test_without_an_aligner_the_estimate_stands(dirs):
    words, sources, done = await _speak(dirs[0], None)
    assert [w["text"] for w in words] == TEXT.split()
    assert set(sources) == {"estimate"} and done["timing_source"] == "estimate"


def test_aligner_dir_is_for_the_qwen3_engine():
    with pytest.raises(ConfigError, match="aligner_dir"):
        load_config(None, {"engine": {"kind": "espeak", "aligner_dir": "/models/aligner"}})
