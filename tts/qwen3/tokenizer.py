"""The Qwen2 byte-level BPE text tokenizer, built with `tokenizers` from the checkpoint's files.

`tokenizer.json` is used when present; otherwise `vocab.json` + `merges.txt` are assembled
the way transformers' Qwen2 converter does (NFC, the Qwen2 split regex, byte-level BPE),
and the added tokens come from `tokenizer_config.json` at their listed ids.
"""

from __future__ import annotations

import json
import os

from tts.qwen3.config import ConfigError

QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _read_merges(path: str) -> list[tuple[str, str]]:
    merges = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#version"):
                continue
            a, b = line.split(" ")
            merges.append((a, b))
    return merges


def build_qwen2_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]]):
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    tok = Tokenizer(
        BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


class TextTokenizer:
    def __init__(self, tokenizer):
        self._tok = tokenizer

    @classmethod
    def from_dir(cls, model_dir: str) -> "TextTokenizer":
        from tokenizers import AddedToken, Tokenizer

        tj = os.path.join(model_dir, "tokenizer.json")
        if os.path.isfile(tj):
            return cls(Tokenizer.from_file(tj))
        vocab_path, merges_path = os.path.join(model_dir, "vocab.json"), os.path.join(model_dir, "merges.txt")
        if not (os.path.isfile(vocab_path) and os.path.isfile(merges_path)):
            raise ConfigError("missing_file", f"{model_dir}: no tokenizer.json and no vocab.json + merges.txt")
        with open(vocab_path, encoding="utf-8") as f:
            vocab = json.load(f)
        tok = build_qwen2_tokenizer(vocab, _read_merges(merges_path))
        cfg_path = os.path.join(model_dir, "tokenizer_config.json")
        added: dict[str, dict] = {}
        if os.path.isfile(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                added = json.load(f).get("added_tokens_decoder", {}) or {}
        for tid, spec in sorted(added.items(), key=lambda kv: int(kv[0])):
            token = AddedToken(
                spec["content"],
                single_word=spec.get("single_word", False),
                lstrip=spec.get("lstrip", False),
                rstrip=spec.get("rstrip", False),
                normalized=spec.get("normalized", False),
                special=spec.get("special", True),
            )
            tok.add_tokens([token])
            got = tok.token_to_id(spec["content"])
            if got != int(tid):
                raise ConfigError(
                    "bad_tokenizer",
                    f"{cfg_path}: added token {spec['content']!r} lands at id {got}, "
                    f"file says {tid} (vocab.json has {len(vocab)} entries)",
                )
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def pre_tokenizer(self):
        """text -> the end offsets of its pre-tokeniser pieces (BPE encodes each piece on its own)."""
        pre = self._tok.pre_tokenizer

        def split(text: str) -> list[int]:
            return [end for _, (_, end) in pre.pre_tokenize_str(text)]

        return split

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)
