"""Qwen3-TTS 12 Hz checkpoint configuration: `config.json` and `generation_config.json`.

Field names follow the released checkpoints (Qwen/Qwen3-TTS-12Hz-*). Every size is
read from the file; `to_json()` writes the same layout back (the official
`save_pretrained` writes a config that qwen-tts itself cannot load).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

MODEL_TYPE = "qwen3_tts"
TOKENIZER_12HZ = "qwen3_tts_tokenizer_12hz"
MODEL_KINDS = ("custom_voice", "voice_design", "base")
MODEL_SIZES = ("0b6", "1b7")


class ConfigError(ValueError):
    """A directory or file that is not a usable Qwen3-TTS 12 Hz checkpoint."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class DecoderShape:
    """One Qwen3 decoder stack (the talker's or the code predictor's)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 32768


@dataclass(frozen=True)
class CodePredictorConfig(DecoderShape):
    vocab_size: int = 2048  # entries per acoustic codebook
    num_code_groups: int = 16


@dataclass(frozen=True)
class TalkerConfig(DecoderShape):
    vocab_size: int = 3072  # codebook 0 + control tokens
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    num_code_groups: int = 16
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    codec_language_id: dict[str, int] = field(default_factory=dict)
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, str] = field(default_factory=dict)  # speaker -> dialect language name
    mrope_section: tuple[int, ...] = (24, 20, 20)
    mrope_interleaved: bool = True
    position_id_per_seconds: int = 13
    code_predictor: CodePredictorConfig = None  # type: ignore[assignment]


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000


@dataclass(frozen=True)
class ModelConfig:
    """The whole `config.json`."""

    talker: TalkerConfig
    tts_model_type: str  # custom_voice | voice_design | base
    tts_model_size: str  # 0b6 | 1b7
    tokenizer_type: str = TOKENIZER_12HZ
    speaker_encoder: SpeakerEncoderConfig = SpeakerEncoderConfig()
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673
    assistant_token_id: int = 77091

    @property
    def code_predictor(self) -> CodePredictorConfig:
        return self.talker.code_predictor

    @property
    def has_speaker_encoder(self) -> bool:
        return self.tts_model_type == "base"

    @property
    def suppressed_codec_ids(self) -> list[int]:
        """Control tokens the talker may never emit (the official rule: the top 1024 ids, EOS excepted)."""
        v = self.talker.vocab_size
        return [i for i in range(v - 1024, v) if i != self.talker.codec_eos_token_id]

    # -- reading ------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config.json") -> "ModelConfig":
        if raw.get("model_type") != MODEL_TYPE:
            raise ConfigError(
                "not_qwen3_tts", f"{source}: model_type is {raw.get('model_type')!r}, expected {MODEL_TYPE!r}"
            )
        tok = raw.get("tokenizer_type", TOKENIZER_12HZ)
        if tok != TOKENIZER_12HZ:
            raise ConfigError(
                "unsupported_tokenizer",
                f"{source}: tokenizer_type {tok!r} is not supported (only the 12 Hz tokenizer {TOKENIZER_12HZ!r}; "
                "the 25 Hz family is not ported)",
            )
        kind = raw.get("tts_model_type")
        if kind not in MODEL_KINDS:
            raise ConfigError("bad_config", f"{source}: tts_model_type {kind!r} is not one of {MODEL_KINDS}")
        size = raw.get("tts_model_size")
        if size not in MODEL_SIZES:
            raise ConfigError("bad_config", f"{source}: tts_model_size {size!r} is not one of {MODEL_SIZES}")
        if not isinstance(raw.get("talker_config"), dict):
            raise ConfigError("bad_config", f"{source}: talker_config section is missing")
        talker = _talker_from_dict(raw["talker_config"], source)
        se_raw = raw.get("speaker_encoder_config") or {}
        se_fields = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in se_raw.items()
            if k in _field_names(SpeakerEncoderConfig)
        }
        tokens = {k: int(raw[k]) for k in _TOP_TOKEN_FIELDS if k in raw}
        return cls(
            talker=talker,
            tts_model_type=kind,
            tts_model_size=size,
            tokenizer_type=tok,
            speaker_encoder=SpeakerEncoderConfig(**se_fields),
            **tokens,
        )

    # -- writing ------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The released `config.json` layout (loadable by qwen-tts 0.1.1 and by us)."""
        t, p = self.talker, self.code_predictor
        predictor = {
            **_decoder_json(p),
            "vocab_size": p.vocab_size,
            "num_code_groups": p.num_code_groups,
            "rope_scaling": None,
            "layer_types": ["full_attention"] * p.num_hidden_layers,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": p.num_hidden_layers,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "hidden_act": "silu",
            "initializer_range": 0.02,
            "use_cache": True,
            "model_type": "qwen3_tts_talker_code_predictor",
        }
        talker = {
            **_decoder_json(t),
            "vocab_size": t.vocab_size,
            "text_vocab_size": t.text_vocab_size,
            "text_hidden_size": t.text_hidden_size,
            "num_code_groups": t.num_code_groups,
            "rope_scaling": {
                "interleaved": t.mrope_interleaved,
                "mrope_section": list(t.mrope_section),
                "rope_type": "default",
            },
            "position_id_per_seconds": t.position_id_per_seconds,
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "use_sliding_window": False,
            "sliding_window": None,
            "initializer_range": 0.02,
            "use_cache": True,
            "codec_pad_id": t.codec_pad_id,
            "codec_bos_id": t.codec_bos_id,
            "codec_eos_token_id": t.codec_eos_token_id,
            "codec_think_id": t.codec_think_id,
            "codec_nothink_id": t.codec_nothink_id,
            "codec_think_bos_id": t.codec_think_bos_id,
            "codec_think_eos_id": t.codec_think_eos_id,
            "codec_language_id": dict(t.codec_language_id),
            "spk_id": dict(t.spk_id),
            "spk_is_dialect": {name: t.spk_is_dialect.get(name, False) for name in t.spk_id},
            "code_predictor_config": predictor,
            "model_type": "qwen3_tts_talker",
        }
        out: dict[str, Any] = {
            "architectures": ["Qwen3TTSForConditionalGeneration"],
            "model_type": MODEL_TYPE,
            "tokenizer_type": self.tokenizer_type,
            "tts_model_size": self.tts_model_size,
            "tts_model_type": self.tts_model_type,
            **{k: getattr(self, k) for k in _TOP_TOKEN_FIELDS},
            "talker_config": talker,
            "torch_dtype": "bfloat16",
        }
        if self.has_speaker_encoder:
            se = asdict(self.speaker_encoder)
            out["speaker_encoder_config"] = {k: list(v) if isinstance(v, tuple) else v for k, v in se.items()}
        return out


_TOP_TOKEN_FIELDS = (
    "im_start_token_id",
    "im_end_token_id",
    "tts_pad_token_id",
    "tts_bos_token_id",
    "tts_eos_token_id",
    "assistant_token_id",
)


def _field_names(cls) -> set[str]:
    return set(cls.__dataclass_fields__)


def _decoder_json(d: DecoderShape) -> dict[str, Any]:
    return {k: getattr(d, k) for k in _field_names(DecoderShape)}


def _require(raw: dict, key: str, source: str, section: str):
    if key not in raw:
        raise ConfigError("bad_config", f"{source}: {section}.{key} is missing")
    return raw[key]


def _decoder_fields(raw: dict, source: str, section: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
        out[key] = int(_require(raw, key, source, section))
    out["head_dim"] = int(raw.get("head_dim") or out["hidden_size"] // out["num_attention_heads"])
    for key, cast in (("rms_norm_eps", float), ("rope_theta", float), ("max_position_embeddings", int)):
        if raw.get(key) is not None:
            out[key] = cast(raw[key])
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError("bad_config", f"{source}: {section}.hidden_act {raw['hidden_act']!r} is not supported (silu)")
    if raw.get("attention_bias"):
        raise ConfigError("bad_config", f"{source}: {section}.attention_bias is not supported")
    if raw.get("use_sliding_window"):
        raise ConfigError("bad_config", f"{source}: {section}.use_sliding_window is not supported")
    if out["num_attention_heads"] % out["num_key_value_heads"]:
        raise ConfigError("bad_config", f"{source}: {section}: attention heads not a multiple of kv heads")
    return out


def _first_id(value: Any) -> int:
    # Released files write speaker ids as ints; some copies as one-element lists.
    if isinstance(value, list):
        if len(value) != 1:
            raise ConfigError("bad_config", f"speaker id {value!r} must be one codec id")
        value = value[0]
    return int(value)


def _talker_from_dict(raw: dict[str, Any], source: str) -> TalkerConfig:
    section = "talker_config"
    fields = _decoder_fields(raw, source, section)
    cp_raw = raw.get("code_predictor_config")
    if not isinstance(cp_raw, dict):
        raise ConfigError("bad_config", f"{source}: talker_config.code_predictor_config section is missing")
    cp_fields = _decoder_fields(cp_raw, source, "code_predictor_config")
    for key in ("vocab_size", "num_code_groups"):
        cp_fields[key] = int(_require(cp_raw, key, source, "code_predictor_config"))
    predictor = CodePredictorConfig(**cp_fields)
    for key in (
        "vocab_size",
        "text_vocab_size",
        "text_hidden_size",
        "num_code_groups",
        "codec_pad_id",
        "codec_bos_id",
        "codec_eos_token_id",
        "codec_think_id",
        "codec_nothink_id",
        "codec_think_bos_id",
        "codec_think_eos_id",
    ):
        fields[key] = int(_require(raw, key, source, section))
    if predictor.num_code_groups != fields["num_code_groups"]:
        raise ConfigError("bad_config", f"{source}: talker and code predictor disagree on num_code_groups")
    rope = raw.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ConfigError("bad_config", f"{source}: talker rope_type {rope.get('rope_type')!r} is not supported")
    if "mrope_section" in rope:
        fields["mrope_section"] = tuple(int(x) for x in rope["mrope_section"])
        fields["mrope_interleaved"] = bool(rope.get("interleaved", False))
    if "position_id_per_seconds" in raw:
        fields["position_id_per_seconds"] = int(raw["position_id_per_seconds"])
    fields["codec_language_id"] = {str(k).lower(): int(v) for k, v in (raw.get("codec_language_id") or {}).items()}
    fields["spk_id"] = {str(k).lower(): _first_id(v) for k, v in (raw.get("spk_id") or {}).items()}
    fields["spk_is_dialect"] = {str(k).lower(): str(v) for k, v in (raw.get("spk_is_dialect") or {}).items() if v}
    for spk, dialect in fields["spk_is_dialect"].items():
        if dialect not in fields["codec_language_id"]:
            raise ConfigError(
                "bad_config", f"{source}: speaker {spk!r} dialect {dialect!r} is not in codec_language_id"
            )
    return TalkerConfig(code_predictor=predictor, **fields)


# ---------------------------------------------------------------- generation_config.json
@dataclass(frozen=True)
class GenerationDefaults:
    """Sampling defaults from `generation_config.json` (the official hard defaults when absent)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048
    min_new_tokens: int = 2

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "generation_config.json") -> "GenerationDefaults":
        known = _field_names(cls)
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                continue
            kind = type(getattr(cls, key))
            try:
                values[key] = bool(value) if kind is bool else kind(value)
            except (TypeError, ValueError):
                raise ConfigError("bad_config", f"{source}: {key}={value!r} is not a {kind.__name__}") from None
        return replace(cls(), **values)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- directories
REQUIRED_FILES = ("config.json", "model.safetensors")


def load_config(model_dir: str) -> ModelConfig:
    """Read `config.json` of a checkpoint directory, refusing anything else with a clear message."""
    if not os.path.isdir(model_dir):
        raise ConfigError("no_model_dir", f"{model_dir}: not a directory")
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise ConfigError("missing_file", f"{model_dir}: config.json is missing (not a Qwen3-TTS checkpoint)")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError("bad_config", f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError("bad_config", f"{path}: expected a JSON object")
    return ModelConfig.from_dict(raw, source=path)


def load_generation_defaults(model_dir: str) -> GenerationDefaults:
    path = os.path.join(model_dir, "generation_config.json")
    if not os.path.isfile(path):
        return GenerationDefaults()
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError("bad_config", f"{path}: not valid JSON ({e})") from None
    return GenerationDefaults.from_dict(raw, source=path)


def check_checkpoint_files(model_dir: str) -> None:
    """Every file the talker side needs; the codec decoder checks speech_tokenizer/ itself."""
    missing = [name for name in REQUIRED_FILES if not os.path.isfile(os.path.join(model_dir, name))]
    has_bpe = all(os.path.isfile(os.path.join(model_dir, n)) for n in ("vocab.json", "merges.txt"))
    if not has_bpe and not os.path.isfile(os.path.join(model_dir, "tokenizer.json")):
        missing.append("vocab.json + merges.txt (or tokenizer.json)")
    if missing:
        raise ConfigError("missing_file", f"{model_dir}: missing {', '.join(missing)}")


# ---------------------------------------------------------------- released shapes
_LANGUAGES = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
}
_DIALECTS = {"beijing_dialect": 2074, "sichuan_dialect": 2062}
_SPEAKERS = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}
_SPEAKER_DIALECTS = {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}


def released_config(size: str, kind: str = "custom_voice") -> ModelConfig:
    """The released 0.6B / 1.7B shapes (for random-weight benches and parameter-count checks)."""
    size = {"0.6b": "0b6", "1.7b": "1b7"}.get(size, size)
    if size not in MODEL_SIZES or kind not in MODEL_KINDS:
        raise ConfigError("bad_config", f"unknown released shape {size!r}/{kind!r}")
    hidden, inter = (1024, 3072) if size == "0b6" else (2048, 6144)
    predictor = CodePredictorConfig(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=5,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=65536,
    )
    custom = kind == "custom_voice"
    talker = TalkerConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        code_predictor=predictor,
        codec_language_id={**_LANGUAGES, **(_DIALECTS if custom else {})},
        spk_id=dict(_SPEAKERS) if custom else {},
        spk_is_dialect=dict(_SPEAKER_DIALECTS) if custom else {},
    )
    return ModelConfig(
        talker=talker, tts_model_type=kind, tts_model_size=size, speaker_encoder=SpeakerEncoderConfig(enc_dim=hidden)
    )
