"""Speech engine layer. Public face: `Engine`, its request/stream types, `build_engine` and `tts.frontend`.

Importing this package must stay light (no torch): the gateway imports it.
"""

from tts.engine import (
    CODEC_FRAME_SAMPLES,
    SAMPLE_RATE,
    Engine,
    EngineError,
    PcmChunk,
    SamplingSettings,
    SynthesisRequest,
    SynthesisStream,
    TurnStream,
    VoiceClone,
    WordTiming,
    WordTimings,
)
from tts.factory import EngineChoice, build_engine, resolve_engine_kind
from tts.turn_words import TurnWords

__all__ = [
    "EngineChoice",
    "build_engine",
    "resolve_engine_kind",
    "CODEC_FRAME_SAMPLES",
    "SAMPLE_RATE",
    "Engine",
    "EngineError",
    "PcmChunk",
    "SamplingSettings",
    "SynthesisRequest",
    "SynthesisStream",
    "TurnStream",
    "TurnWords",
    "VoiceClone",
    "WordTiming",
    "WordTimings",
]
