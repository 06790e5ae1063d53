"""Which engine `engine.kind: auto` serves, and the device a Qwen3 checkpoint runs on."""

import pytest

from gateway.config import load_config
from gateway.engines import build_engine, resolve_kind


def test_auto_without_a_model_dir_is_not_qwen3(monkeypatch):
    monkeypatch.delenv("VOXGATE_MODEL_DIR", raising=False)
    assert resolve_kind(load_config(None)) in ("espeak", "simulated")


def test_auto_device_falls_back_to_the_cpu_without_cuda(monkeypatch):
    torch = pytest.importorskip("torch")
    from tts.qwen3.tools import ensure_tiny_model

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = load_config(None, {"engine": {"kind": "auto", "model_dir": ensure_tiny_model(), "dtype": "float32"}})
    assert resolve_kind(cfg) == "qwen3"
    engine = build_engine(cfg)
    assert engine.settings.device == "cpu" and cfg.engine.device == "cpu"
