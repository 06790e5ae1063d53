"""A tiny random Qwen3-ForcedAligner checkpoint in the released layout, for tests and CPU runs.

Written files: config.json (model_type qwen3_asr, a `qwen3_forced_aligner` thinker), model.safetensors
(`thinker.` keys), preprocessor_config.json (the Whisper feature extractor's settings), vocab.json,
merges.txt and tokenizer_config.json (a small byte-level BPE with the aligner's special tokens).
Widths and depths are small; n_window is the released 50, and an attention window of 200 mel
frames makes clips of a few seconds span several windows.
"""

from __future__ import annotations

import json
import os

import torch

from tts.aligner.aligner import AUDIO_END, AUDIO_PAD, AUDIO_START
from tts.aligner.config import AlignerConfig
from tts.aligner.model import AlignerModel
from tts.aligner.words import TIMESTAMP
from tts.qwen3.tiny import write_tokenizer

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", AUDIO_START, AUDIO_END, AUDIO_PAD, TIMESTAMP)


def _write_tokenizer(model_dir: str) -> dict[str, int]:
    extra = {"audio_token": AUDIO_PAD, "audio_bos_token": AUDIO_START, "audio_eos_token": AUDIO_END}
    return write_tokenizer(model_dir, SPECIAL, model_max_length=65536, extra_special_tokens=extra)


def tiny_config_json(ids: dict[str, int], vocab_size: int, classify_num: int = 96) -> dict:
    audio = {
        "num_mel_bins": 128,
        "encoder_layers": 2,
        "encoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "d_model": 32,
        "output_dim": 48,
        "max_source_positions": 1500,
        "n_window": 50,
        "n_window_infer": 200,
        "conv_chunksize": 500,
        "downsample_hidden_size": 8,
        "activation_function": "gelu",
    }
    text = {
        "vocab_size": vocab_size,
        "hidden_size": 48,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
        "max_position_embeddings": 65536,
        "tie_word_embeddings": False,
    }
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "timestamp_token_id": ids[TIMESTAMP],
        "timestamp_segment_time": 80,
        "thinker_config": {
            "model_type": "qwen3_forced_aligner",
            "audio_config": audio,
            "text_config": text,
            "classify_num": classify_num,
            "audio_token_id": ids[AUDIO_PAD],
            "audio_start_token_id": ids[AUDIO_START],
        },
        "support_languages": ["English", "Russian"],
    }


PREPROCESSOR = {
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 128,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "chunk_length": 30,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "dither": 0.0,
}


EMBED_STD = 0.02


def make_tiny_aligner(model_dir: str, seed: int = 0, std: float = 0.2) -> AlignerConfig:
    """Write a whole tiny aligner checkpoint with random weights; returns its config.

    `std` is larger than an init's 0.02 so that the tiny head's classes are far apart and an argmax
    never rests on a float32 rounding difference."""
    from safetensors.torch import save_file

    os.makedirs(model_dir, exist_ok=True)
    ids = _write_tokenizer(model_dir)
    raw = tiny_config_json(ids, vocab_size=max(ids.values()) + 1)
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
    with open(os.path.join(model_dir, "preprocessor_config.json"), "w", encoding="utf-8") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    config = AlignerConfig.from_json(raw)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, p in AlignerModel(config).state_dict().items():
        if "norm" in name and name.endswith("weight"):
            state[name] = torch.ones(p.shape)
        elif name.endswith("embed_tokens.weight"):  # small, so that what attention gathers moves the slots
            state[name] = torch.empty(p.shape).normal_(0.0, EMBED_STD, generator=gen)
        else:
            state[name] = torch.empty(p.shape).normal_(0.0, std, generator=gen)
    save_file(state, os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})
    return config


def released_config_json(ids: dict[str, int]) -> dict:
    """The released Qwen3-ForcedAligner-0.6B's shapes (benches: its cost with random weights), with the tiny
    tokenizer's special-token ids (the vocabulary keeps its released size)."""
    raw = tiny_config_json(ids, vocab_size=151936, classify_num=5000)
    raw["thinker_config"]["audio_config"].update(
        encoder_layers=24,
        encoder_attention_heads=16,
        encoder_ffn_dim=4096,
        d_model=1024,
        output_dim=1024,
        downsample_hidden_size=480,
        n_window_infer=800,
    )
    raw["thinker_config"]["text_config"].update(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
    )
    return raw


def random_released_aligner(device: str = "cpu", dtype: str = "float32", seed: int = 0):
    """A ForcedAligner in the released shapes with random weights, made in memory (no checkpoint written)."""
    import tempfile

    from tts.aligner.aligner import ForcedAligner
    from tts.qwen3.tokenizer import TextTokenizer
    from tts.qwen3.weights import parse_dtype

    with tempfile.TemporaryDirectory() as d:
        ids = _write_tokenizer(d)
        tokenizer = TextTokenizer.from_dir(d)
    config = AlignerConfig.from_json(released_config_json(ids))
    torch.manual_seed(seed)
    with torch.device(device):
        model = AlignerModel(config).to(parse_dtype(dtype))
    for name, p in model.named_parameters():
        if not ("norm" in name and name.endswith("weight")):
            torch.nn.init.normal_(p, 0.0, 0.02)
    model.thinker.fuse()
    return ForcedAligner(model.eval().requires_grad_(False), tokenizer, torch.device(device), parse_dtype(dtype))
