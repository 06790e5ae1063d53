"""A Qwen3-ForcedAligner checkpoint's config.json, read into what the port needs.

The released layout nests everything under `thinker_config` (`audio_config`, `text_config`,
`classify_num`), with `timestamp_token_id` and `timestamp_segment_time` (ms per class) at the top.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from tts.qwen3.config import ConfigError


@dataclass(frozen=True)
class AudioEncoderConfig:
    num_mel_bins: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    d_model: int
    output_dim: int
    max_source_positions: int
    n_window: int  # half a convolution chunk, in mel frames
    n_window_infer: int  # an attention window, in mel frames
    conv_chunksize: int
    downsample_hidden_size: int


@dataclass(frozen=True)
class TextConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float


@dataclass(frozen=True)
class AlignerConfig:
    audio: AudioEncoderConfig
    text: TextConfig
    classify_num: int
    audio_token_id: int
    timestamp_token_id: int
    timestamp_segment_time: float  # ms per timestamp class

    @classmethod
    def from_dir(cls, model_dir: str) -> "AlignerConfig":
        path = os.path.join(model_dir, "config.json")
        if not os.path.isfile(path):
            raise ConfigError("missing_file", f"{model_dir}: no config.json (not a Qwen3-ForcedAligner checkpoint)")
        with open(path, encoding="utf-8") as f:
            try:
                raw = json.load(f)
            except json.JSONDecodeError as e:
                raise ConfigError("bad_config", f"{path}: not JSON ({e})") from None
        return cls.from_json(raw, path)

    @classmethod
    def from_json(cls, raw: dict, where: str = "config.json") -> "AlignerConfig":
        thinker = raw.get("thinker_config")
        if not isinstance(thinker, dict) or "forced_aligner" not in str(thinker.get("model_type", "")):
            raise ConfigError(
                "bad_config", f"{where}: thinker_config.model_type is not a forced aligner (a Qwen3-ASR checkpoint?)"
            )
        try:
            a, t = thinker["audio_config"], thinker["text_config"]
            audio = AudioEncoderConfig(**{k: a[k] for k in AudioEncoderConfig.__dataclass_fields__})
            text = TextConfig(
                **{k: t[k] for k in TextConfig.__dataclass_fields__ if k != "head_dim"},
                head_dim=t.get("head_dim", t["hidden_size"] // t["num_attention_heads"]),
            )
            config = cls(
                audio=audio,
                text=text,
                classify_num=int(thinker["classify_num"]),
                audio_token_id=int(thinker["audio_token_id"]),
                timestamp_token_id=int(raw["timestamp_token_id"]),
                timestamp_segment_time=float(raw["timestamp_segment_time"]),
            )
        except (KeyError, TypeError) as e:
            raise ConfigError("bad_config", f"{where}: missing or malformed key {e}") from None
        if audio.n_window != 50:  # the official processor counts 13 audio tokens per 100 mel frames
            raise ConfigError("bad_config", f"{where}: audio_config.n_window is {audio.n_window}, the port needs 50")
        if audio.n_window_infer % (2 * audio.n_window):
            raise ConfigError("bad_config", f"{where}: n_window_infer is not a multiple of 2 * n_window")
        return config
