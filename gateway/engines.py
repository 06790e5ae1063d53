"""Engine factory: builds the configured `tts.Engine` (imports engine modules lazily by kind)."""

from __future__ import annotations

import importlib.util
import logging

from gateway.config import Config
from tts import Engine

log = logging.getLogger("voxgate.engines")


def resolve_kind(config: Config) -> str:
    """`auto`: Qwen3 when a checkpoint is configured, else the eSpeak demo voice if installed, else simulated."""
    kind = config.engine.kind
    if kind != "auto":
        return kind
    if config.engine.model_dir:
        return "qwen3"
    if importlib.util.find_spec("espeakng_loader") is not None and importlib.util.find_spec("tts.espeak_engine") is not None:
        return "espeak"
    return "simulated"


def build_engine(config: Config) -> Engine:
    kind = resolve_kind(config)
    if kind == "simulated":
        from tts.simulated import SimulatedEngine

        return SimulatedEngine.from_config(config.simulated)
    if kind == "espeak":
        from tts.espeak_engine import EspeakEngine

        return EspeakEngine.from_config(config)
    if kind == "qwen3":
        if not config.engine.model_dir:
            raise ValueError(f"{config.source}: engine.model_dir (or VOXGATE_MODEL_DIR) is required for engine.kind: qwen3")
        from tts.qwen3.engine import Qwen3Engine

        if config.engine.device == "auto":
            import torch

            config.engine.device = "cuda" if torch.cuda.is_available() else "cpu"
            if config.engine.device == "cpu":
                log.warning("engine.device auto: no CUDA device, running Qwen3-TTS on the CPU (far slower than real time at real sizes)")
        return Qwen3Engine.from_config(config.engine)
    raise ValueError(f"unknown engine kind {kind!r}")
