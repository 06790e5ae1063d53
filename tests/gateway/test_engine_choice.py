"""Which engine `engine.kind: auto` serves, and the device a Qwen3 checkpoint runs on."""

import pytest

from gateway.app import engine_choice
from gateway.config import load_config
from tts import build_engine, resolve_engine_kind


def test_auto_without_a_model_dir_is_not_qwen3(monkeypatch):
    monkeypatch.delenv("VOXGATE_MODEL_DIR", raising=False)
    cfg = load_config(None)
    assert resolve_engine_kind(cfg.engine.kind, cfg.engine.model_dir) in ("espeak", "simulated")


def test_auto_device_falls_back_to_the_cpu_without_cuda(monkeypatch):
    torch = pytest.importorskip("torch")
    from tts.qwen3.tools import ensure_tiny_model

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = load_config(None, {"engine": {"kind": "auto", "model_dir": ensure_tiny_model(), "dtype": "float32"}})
    assert resolve_engine_kind(cfg.engine.kind, cfg.engine.model_dir) == "qwen3"
    engine = build_engine(engine_choice(cfg))
    assert engine.settings.device == "cpu"


def test_qwen3_without_a_model_dir_names_the_setting(monkeypatch):
    monkeypatch.delenv("VOXGATE_MODEL_DIR", raising=False)
    from gateway.app import Gateway

    with pytest.raises(ValueError, match="engine.model_dir"):
        Gateway(load_config(None, {"engine": {"kind": "qwen3"}}))


def test_engine_aligner_dir_reaches_the_qwen3_engine():
    pytest.importorskip("torch")
    cfg = load_config(None, {"engine": {"kind": "qwen3", "model_dir": "/models/qwen3", "aligner_dir": "/models/fa"}})
    assert build_engine(engine_choice(cfg)).settings.aligner_dir == "/models/fa"
