"""`engine.kind: openai-speech`: any server speaking OpenAI's streaming `POST /v1/audio/speech` as voxgate's engine."""

from tts.openai_speech.engine import TURN_MODE_REASON, OpenAISpeechEngine, SpeechServerSettings

__all__ = ["OpenAISpeechEngine", "SpeechServerSettings", "TURN_MODE_REASON"]
