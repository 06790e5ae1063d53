"""Engine construction, behind `tts`'s public face: `build_engine(EngineChoice(...))`.

Callers (the gateway, benches) describe the engine with plain settings; only
this module knows which engine module implements which kind, and it imports
that module lazily, so `import tts` stays light (no torch).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field

from tts.engine import Engine

log = logging.getLogger("voxgate.tts")

KINDS = ("auto", "qwen3", "simulated", "espeak", "remote", "openai-speech")


@dataclass
class EngineChoice:
    """Which engine to build and its settings (plain values; no gateway types)."""

    kind: str = "auto"  # auto: qwen3 with a model_dir, else the eSpeak demo voice if installed, else simulated
    model_dir: str | None = None
    device: str = "auto"  # auto: cuda when available, else cpu (with a warning)
    dtype: str = "bfloat16"
    max_batch: int = 64
    max_queued: int = 1024
    vocoder: str = "auto"  # qwen3: auto | torch | onnxruntime | tensorrt (tts.qwen3.codec.vocoder)
    vocoder_cache: str | None = None  # qwen3: ONNX exports and TensorRT engines (default ~/.cache/voxgate/vocoder)
    aligner_dir: str | None = None  # qwen3: a Qwen3-ForcedAligner checkpoint (word timings per request)
    voice_cache_dir: str | None = None  # qwen3 Base: cloned voices' parts on disk (x-vector, reference codes)
    simulated: dict = field(default_factory=dict)  # tts.simulated.SimulatedSettings fields
    endpoints: list[str] = field(default_factory=list)  # remote: engine processes (tcp://HOST:PORT | ipc://PATH)
    discover: bool = False  # remote without endpoints: the caller names them later (RemoteEngine.set_endpoints)
    connect_timeout_s: float = 5.0  # remote: start() waits this long for a first engine (then serves without one)
    # openai-speech: `endpoints` are base URLs (http://HOST:PORT/v1) of OpenAI-compatible speech servers
    model: str | None = None  # sent as "model"
    api_key_env: str | None = None  # environment variable with the servers' bearer token
    sample_rate: int = 24_000  # what the servers stream
    task_type: str | None = None  # vLLM-Omni's Qwen3-TTS task_type (CustomVoice | VoiceDesign | Base)
    voices_required: list[str] = field(default_factory=list)  # voice names to find in the servers' voice lists
    tcp_connect_timeout_s: float = 1.0  # a request's TCP connect
    first_byte_timeout_s: float = 2.0  # request sent to its first audio byte
    stream_stall_timeout_s: float = 5.0  # after the first byte, no byte for this long
    speech_transport: str = "http"  # http | websocket (vLLM-Omni's speech WebSocket, with word timings)


def resolve_engine_kind(kind: str, model_dir: str | None) -> str:
    """The kind `auto` stands for, given whether a checkpoint is configured."""
    if kind != "auto":
        return kind
    if model_dir:
        return "qwen3"
    if (
        importlib.util.find_spec("espeakng_loader") is not None
        and importlib.util.find_spec("tts.espeak_engine") is not None
    ):
        return "espeak"
    return "simulated"


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    log.warning(
        "engine.device auto: no CUDA device, running Qwen3-TTS on the CPU (far slower than real time at real sizes)"
    )
    return "cpu"


def build_engine(choice: EngineChoice) -> Engine:
    """A new, not yet started engine. ValueError for an impossible choice (the message names the setting)."""
    kind = resolve_engine_kind(choice.kind, choice.model_dir)
    if kind == "simulated":
        from tts.simulated import SimulatedEngine, SimulatedSettings

        names = SimulatedSettings.__dataclass_fields__
        return SimulatedEngine(SimulatedSettings(**{k: v for k, v in choice.simulated.items() if k in names}))
    if kind == "espeak":
        from tts.espeak_engine import EspeakEngine

        return EspeakEngine(max_queued=choice.max_queued)
    if kind == "qwen3":
        if not choice.model_dir:
            raise ValueError("engine.model_dir (or VOXGATE_MODEL_DIR) is required for engine.kind: qwen3")
        from tts.qwen3.engine import EngineSettings, Qwen3Engine

        return Qwen3Engine(
            EngineSettings(
                model_dir=choice.model_dir,
                device=resolve_device(choice.device),
                dtype=choice.dtype,
                max_batch=choice.max_batch,
                max_queued=choice.max_queued,
                vocoder=choice.vocoder,
                vocoder_cache=choice.vocoder_cache,
                aligner_dir=choice.aligner_dir,
                voice_cache_dir=choice.voice_cache_dir,
            )
        )
    if kind == "remote":
        try:
            from tts.service.remote import RemoteEngine
            from tts.service.transport import secret_from_env
        except ImportError as exc:
            raise ValueError(
                f"engine.kind remote needs the service extra (pip install 'voxgate[service]'): {exc}"
            ) from None
        if not choice.endpoints and not choice.discover:
            raise ValueError("engine.endpoints must list at least one engine for engine.kind: remote")
        return RemoteEngine(
            choice.endpoints,
            secret=secret_from_env(choice.endpoints),
            connect_timeout_s=choice.connect_timeout_s,
            discovered=choice.discover,
        )
    if kind == "openai-speech":
        from tts.openai_speech import OpenAISpeechEngine, SpeechServerSettings

        return OpenAISpeechEngine(
            SpeechServerSettings(
                endpoints=list(choice.endpoints),
                model=choice.model,
                api_key_env=choice.api_key_env,
                sample_rate=choice.sample_rate,
                task_type=choice.task_type,
                voices_required=list(choice.voices_required),
                connect_timeout_s=choice.connect_timeout_s,
                tcp_connect_timeout_s=choice.tcp_connect_timeout_s,
                first_byte_timeout_s=choice.first_byte_timeout_s,
                stream_stall_timeout_s=choice.stream_stall_timeout_s,
                transport=choice.speech_transport,
            )
        )
    raise ValueError(f"unknown engine kind {kind!r} (one of {', '.join(KINDS)})")
