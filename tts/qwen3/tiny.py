"""Tiny random-weight checkpoints in the released layout, for tests and CPU runs.

Written files: config.json, generation_config.json, model.safetensors, vocab.json,
merges.txt, tokenizer_config.json and speech_tokenizer/ (the codec's own writer).
Shapes are small; the structure is the real one (1b7 has small_to_mtp_projection,
0b6 does not). Codec ids keep the released offsets above the codebook, so a tiny
codebook simply shifts them; every id is read back from config.json.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from tts.qwen3.config import CodePredictorConfig, GenerationDefaults, ModelConfig, SpeakerEncoderConfig, released_config


# The 256 byte-level symbols of GPT-2/Qwen2 BPE, in their order.
def _byte_symbols() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


_MERGED_WORDS = ("assistant", "user", "ĠHello", "Ġworld")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>")


def tiny_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A small Qwen2-style BPE: all 256 bytes plus the merges that make a few words single tokens."""
    vocab = {s: i for i, s in enumerate(_byte_symbols())}
    merges: list[tuple[str, str]] = []
    for word in _MERGED_WORDS:
        prefix = word[0]
        for ch in word[1:]:
            if prefix + ch not in vocab:
                merges.append((prefix, ch))
                vocab[prefix + ch] = len(vocab)
            prefix += ch
    return vocab, merges


def write_tokenizer(model_dir: str, special_tokens: tuple[str, ...] = SPECIAL_TOKENS, **config) -> dict[str, int]:
    """vocab.json, merges.txt and tokenizer_config.json (`config` adds or overrides its keys); returns the special
    tokens' ids. The aligner's tiny checkpoint writes its tokenizer with this too."""
    vocab, merges = tiny_vocab()
    with open(os.path.join(model_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(model_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        f.writelines(f"{a} {b}\n" for a, b in merges)
    ids = {tok: len(vocab) + i for i, tok in enumerate(special_tokens)}
    added = {
        str(i): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for tok, i in ids.items()
    }
    tok_cfg = {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
        **config,
    }
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tok_cfg, f, ensure_ascii=False, indent=2)
    ids["assistant"] = vocab["assistant"]
    return ids


def _shift(real_id: int, codebook: int) -> int:
    return codebook + (real_id - 2048)  # released control ids sit right above a 2048-entry codebook


def tiny_config(
    variant: str = "1b7",
    kind: str = "custom_voice",
    codebook_size: int = 2048,
    num_code_groups: int = 16,
    text_ids: dict[str, int] | None = None,
    text_vocab_size: int = 320,
) -> ModelConfig:
    """Small widths and depths in the structure of the released `variant` / `kind`."""
    real = released_config(variant, kind)
    t = real.talker
    hidden = 64 if variant == "1b7" else 32
    predictor = CodePredictorConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rope_theta=1_000_000.0,
        max_position_embeddings=65536,
        vocab_size=codebook_size,
        num_code_groups=num_code_groups,
    )
    s = lambda i: _shift(i, codebook_size)  # noqa: E731
    talker = replace(
        t,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        text_vocab_size=text_vocab_size,
        text_hidden_size=48,
        vocab_size=codebook_size + 1024,
        num_code_groups=num_code_groups,
        code_predictor=predictor,
        codec_pad_id=s(t.codec_pad_id),
        codec_bos_id=s(t.codec_bos_id),
        codec_eos_token_id=s(t.codec_eos_token_id),
        codec_think_id=s(t.codec_think_id),
        codec_nothink_id=s(t.codec_nothink_id),
        codec_think_bos_id=s(t.codec_think_bos_id),
        codec_think_eos_id=s(t.codec_think_eos_id),
        codec_language_id={k: s(v) for k, v in t.codec_language_id.items()},
        spk_id={k: s(v) for k, v in t.spk_id.items()},
        mrope_section=(4, 2, 2),
    )
    ids = text_ids or {}
    tokens = {}
    for field, name in (
        ("im_start_token_id", "<|im_start|>"),
        ("im_end_token_id", "<|im_end|>"),
        ("tts_pad_token_id", "<tts_pad>"),
        ("tts_bos_token_id", "<tts_text_bos>"),
        ("tts_eos_token_id", "<tts_text_eod>"),
        ("assistant_token_id", "assistant"),
    ):
        if name in ids:
            tokens[field] = ids[name]
    return replace(
        real,
        talker=talker,
        speaker_encoder=SpeakerEncoderConfig(
            enc_dim=hidden,
            enc_channels=(16, 16, 16, 16, 48),
            enc_attention_channels=8,
            enc_se_channels=8,
            enc_res2net_scale=2,
        ),
        **tokens,
    )


def write_config_files(model_dir: str, config: ModelConfig, generation: GenerationDefaults | None = None) -> None:
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config.to_json(), f, indent=2, ensure_ascii=False)
    gen = (generation or GenerationDefaults()).to_json()
    gen.pop("min_new_tokens", None)  # not a released key; the official code fixes it at 2
    with open(os.path.join(model_dir, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)


def write_codec(model_dir: str, seed: int, reference: bool = False) -> tuple[int, int] | None:
    """speech_tokenizer/ by the codec's own writer; returns (codebook_size, num_quantizers), None if unavailable."""
    try:
        from tts.qwen3.codec import CodecConfig, write_tiny_codec
    except ImportError:
        return None
    st_dir = os.path.join(model_dir, "speech_tokenizer")
    os.makedirs(st_dir, exist_ok=True)
    write_tiny_codec(st_dir, seed=seed, reference=reference)
    c = CodecConfig.from_dir(st_dir)
    return c.codebook_size, c.num_quantizers


def make_tiny_model(
    model_dir: str, variant: str = "1b7", kind: str = "custom_voice", seed: int = 0, with_codec: bool = True
) -> ModelConfig:
    """Write a whole tiny checkpoint with our own random init; returns its config."""
    from safetensors.torch import save_file

    from tts.qwen3.weights import random_model

    os.makedirs(model_dir, exist_ok=True)
    codec = write_codec(model_dir, seed) if with_codec else None
    codebook, groups = codec or (2048, 16)
    ids = write_tokenizer(model_dir)
    config = tiny_config(variant, kind, codebook, groups, ids)
    write_config_files(model_dir, config)
    model = random_model(config, seed=seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}  # fused weights share storage
    save_file(state, os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})
    return config
