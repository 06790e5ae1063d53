"""Qwen3-TTS 12 Hz in plain torch (no transformers at run time).

config      config.json / generation_config.json, released shapes
weights     safetensors by official key names onto a meta-built model
tokenizer   Qwen2 byte-level BPE via `tokenizers`
model       talker + code predictor (batched, per-row positions, static KV cache)
sampling    on-device sampling, no host sync
prompt      CustomVoice / VoiceDesign / Base prefill layouts
generate    step functions and the one-utterance reference loop
codec/      the codec decoder (vocoder)
tools       `voxgate synth`, `voxgate make-tiny-model`

Importing this package imports nothing heavy; import the modules you need.
"""
