"""voxgate-pipecat: a Pipecat TTS service speaking voxgate's native protocol."""

from voxgate_pipecat.tts import VoxgateTTSService, VoxgateTTSSettings, word_times

__version__ = "0.1.0"
__all__ = ["VoxgateTTSService", "VoxgateTTSSettings", "word_times"]
