"""Speech engine layer. Public face: `Engine`, its request/stream types and `tts.frontend`.

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
)

__all__ = [
    "CODEC_FRAME_SAMPLES",
    "SAMPLE_RATE",
    "Engine",
    "EngineError",
    "PcmChunk",
    "SamplingSettings",
    "SynthesisRequest",
    "SynthesisStream",
]
