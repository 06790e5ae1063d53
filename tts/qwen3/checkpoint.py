"""A loaded checkpoint directory: config, talker model, text tokenizer, sampling defaults, codec decoder."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from tts.qwen3.config import GenerationDefaults, ModelConfig, load_config, load_generation_defaults
from tts.qwen3.model import Qwen3TTSModel
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.weights import load_model, parse_dtype, random_model


@dataclass
class Checkpoint:
    config: ModelConfig
    model: Qwen3TTSModel
    tokenizer: TextTokenizer | None
    generation: GenerationDefaults
    codec: torch.nn.Module | None  # tts.qwen3.codec.CodecDecoder
    model_dir: str | None = None
    codec_encoder: torch.nn.Module | None = None  # tts.qwen3.codec.encoder.CodecEncoder, when not read from model_dir

    @classmethod
    def load(
        cls,
        model_dir: str,
        device: str = "cpu",
        dtype: str | torch.dtype = "float32",
        codec_dtype: str | torch.dtype = "float32",
        with_codec: bool = True,
    ) -> "Checkpoint":
        config = load_config(model_dir)
        model = load_model(model_dir, device, dtype, config)
        codec = None
        if with_codec:
            from tts.qwen3.codec import load_codec_decoder

            codec = load_codec_decoder(
                os.path.join(model_dir, "speech_tokenizer"), device=device, dtype=parse_dtype(codec_dtype)
            )
        return cls(
            config, model, TextTokenizer.from_dir(model_dir), load_generation_defaults(model_dir), codec, model_dir
        )

    @classmethod
    def random(
        cls,
        size: str,
        device: str = "cpu",
        dtype: str | torch.dtype = "bfloat16",
        seed: int = 0,
        with_codec: bool = True,
    ) -> "Checkpoint":
        """The released shape with random weights (benches; no download). No text tokenizer: callers use ids."""
        from tts.qwen3.config import released_config

        config = released_config(size)
        model = random_model(config, device, dtype, seed)
        codec = None
        if with_codec:
            from tts.qwen3.codec import CodecConfig, random_codec_decoder

            codec = random_codec_decoder(CodecConfig(), seed=seed, device=device)
        return cls(config, model, None, GenerationDefaults(), codec, None)
