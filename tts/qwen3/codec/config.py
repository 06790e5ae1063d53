"""`speech_tokenizer/config.json` of a Qwen3-TTS 12 Hz checkpoint, decoder side.

Every size the decoder needs is read here, the attention window included.
Missing decoder fields fall back to the official class defaults
(`Qwen3TTSTokenizerV2DecoderConfig`), so a config the official code accepts
means the same thing to us.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

MODEL_TYPE_12HZ = "qwen3_tts_tokenizer_12hz"
MODEL_TYPE_25HZ = "qwen3_tts_tokenizer_25hz"

# Official decoder defaults (configuration_qwen3_tts_tokenizer_v2.py); the
# released config.json sets all of them explicitly.
_DECODER_DEFAULTS = {
    "codebook_size": 2048,
    "hidden_size": 1024,
    "latent_dim": 1024,
    "max_position_embeddings": 8000,
    "rope_theta": 10000.0,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "attention_bias": False,
    "sliding_window": 72,
    "intermediate_size": 3072,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "num_hidden_layers": 8,
    "num_quantizers": 16,
    "upsample_rates": (8, 5, 4, 3),
    "upsampling_ratios": (2, 2),
    "decoder_dim": 1536,
}


class CodecError(ValueError):
    """A speech tokenizer that cannot be used, or bad codes; `code` is stable."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class CodecConfig:
    """Sizes of the 12 Hz codec decoder (the vocoder)."""

    codebook_size: int = 2048
    codebook_dim: int = 512  # width after the RVQ output projection; codebooks hold half of it
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    latent_dim: int = 1024
    hidden_size: int = 512
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 64
    attention_bias: bool = False
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 72
    upsampling_ratios: tuple[int, ...] = (2, 2)
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    decoder_dim: int = 1536
    sample_rate: int = 24000
    samples_per_frame: int = 1920

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @property
    def output_dim(self) -> int:
        """Channels entering the last SnakeBeta and the 1-channel output conv."""
        return self.decoder_dim // 2 ** len(self.upsample_rates)

    @classmethod
    def from_dict(cls, raw: dict) -> "CodecConfig":
        model_type = raw.get("model_type")
        if model_type == MODEL_TYPE_25HZ:
            raise CodecError(
                "unsupported_tokenizer",
                "the 25 Hz speech tokenizer (qwen3_tts_tokenizer_25hz) is not supported; "
                "voxgate runs the 12 Hz models (Qwen3-TTS-12Hz-*)",
            )
        if model_type != MODEL_TYPE_12HZ:
            hint = " (this is a model root: pass its speech_tokenizer/ folder)" if model_type == "qwen3_tts" else ""
            raise CodecError(
                "wrong_model_type",
                f"speech tokenizer config has model_type {model_type!r}, expected {MODEL_TYPE_12HZ!r}{hint}",
            )
        dec = raw.get("decoder_config")
        if not isinstance(dec, dict):
            raise CodecError("bad_config", "speech tokenizer config.json has no decoder_config object")
        get = lambda key: dec.get(key, _DECODER_DEFAULTS.get(key))  # noqa: E731
        if "codebook_dim" not in dec:
            raise CodecError("bad_config", "decoder_config.codebook_dim is missing")
        try:
            heads = int(get("num_attention_heads"))
            hidden = int(get("hidden_size"))
            cfg = cls(
                codebook_size=int(get("codebook_size")),
                codebook_dim=int(dec["codebook_dim"]),
                num_quantizers=int(get("num_quantizers")),
                num_semantic_quantizers=int(dec.get("num_semantic_quantizers", 1)),
                latent_dim=int(get("latent_dim")),
                hidden_size=hidden,
                intermediate_size=int(get("intermediate_size")),
                num_hidden_layers=int(get("num_hidden_layers")),
                num_attention_heads=heads,
                num_key_value_heads=int(get("num_key_value_heads")),
                head_dim=int(dec.get("head_dim") or hidden // heads),
                attention_bias=bool(get("attention_bias")),
                hidden_act=str(get("hidden_act")),
                rms_norm_eps=float(get("rms_norm_eps")),
                rope_theta=float(get("rope_theta")),
                sliding_window=int(get("sliding_window")),
                upsampling_ratios=tuple(int(r) for r in get("upsampling_ratios")),
                upsample_rates=tuple(int(r) for r in get("upsample_rates")),
                decoder_dim=int(get("decoder_dim")),
                sample_rate=int(raw.get("output_sample_rate", 24000)),
                samples_per_frame=int(raw.get("decode_upsample_rate", 1920)),
            )
        except (TypeError, ValueError) as exc:
            raise CodecError("bad_config", f"speech tokenizer decoder_config is malformed: {exc}") from exc
        rope_scaling = dec.get("rope_scaling")
        if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) not in (None, "default"):
            raise CodecError(
                "bad_config", f"decoder rope_scaling {rope_scaling!r} is not supported (default RoPE only)"
            )
        cfg.validate()
        return cfg

    @classmethod
    def from_dir(cls, speech_tokenizer_dir: str | Path) -> "CodecConfig":
        path = Path(speech_tokenizer_dir) / "config.json"
        if not path.is_file():
            raise CodecError("missing_file", f"{path} not found (expected a Qwen3-TTS speech_tokenizer/ folder)")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CodecError("bad_config", f"cannot read {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise CodecError("bad_config", f"{path} is not a JSON object")
        return cls.from_dict(raw)

    def validate(self) -> None:
        def bad(why: str) -> CodecError:
            return CodecError("bad_config", f"speech tokenizer decoder_config: {why}")

        if self.num_semantic_quantizers != 1:
            raise bad(f"num_semantic_quantizers={self.num_semantic_quantizers}; the 12 Hz decoder has exactly 1")
        if self.num_quantizers <= self.num_semantic_quantizers:
            raise bad("num_quantizers must exceed the semantic quantizers")
        if self.codebook_dim % 2:
            raise bad("codebook_dim must be even (codebooks hold codebook_dim / 2)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise bad("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise bad("head_dim must be even for RoPE")
        if self.sliding_window < 1:
            raise bad("sliding_window must be at least 1")
        if self.hidden_act not in ("silu", "gelu"):
            raise bad(f"hidden_act {self.hidden_act!r} is not supported")
        if self.decoder_dim % 2 ** len(self.upsample_rates):
            raise bad("decoder_dim must halve cleanly at every upsampling block")
        total = math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)
        if total != self.samples_per_frame:
            raise bad(
                f"upsampling {self.upsample_rates} x {self.upsampling_ratios} = {total} samples per frame, "
                f"but decode_upsample_rate is {self.samples_per_frame}"
            )
