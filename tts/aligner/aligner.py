"""Loading a Qwen3-ForcedAligner checkpoint directory and aligning batches of (audio, text).

One call aligns any number of clips in one pass (the official `Qwen3ForcedAligner.align`):
each clip's text becomes `<|audio_start|>` + one placeholder per audio token + `<|audio_end|>`
+ every word followed by two `<timestamp>` slots; the batch is left-padded; the head's argmax
at each slot, times `timestamp_segment_time`, is that word boundary in ms of the clip, made
non-decreasing by the official fix-up. Nothing is downloaded: the directory holds config.json,
model.safetensors and the tokenizer files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from tts.aligner.config import AlignerConfig
from tts.aligner.encoder import sinusoids, tokens_after_cnn
from tts.aligner.features import log_mel_batch, to_16k
from tts.aligner.model import AlignerModel
from tts.aligner.words import TIMESTAMP, Word, fix_timestamps, split_words
from tts.qwen3.config import ConfigError
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.weights import load_state, parse_dtype

AUDIO_START, AUDIO_PAD, AUDIO_END = "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>"
PAD = "<|endoftext|>"


@dataclass(frozen=True)
class AlignedWord:
    """A whitespace token of the text, `text[char_start:char_end]`, heard from sample `start` to `end`
    of its clip (at the clip's own rate)."""

    char_start: int
    char_end: int
    start: int
    end: int


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    features: torch.Tensor  # [B, n_mels, frames]
    feature_lengths: torch.Tensor  # [B]
    words: list[list[Word]]


class ForcedAligner:
    def __init__(self, model: AlignerModel, tokenizer: TextTokenizer, device: torch.device, dtype: torch.dtype):
        self.model, self.tokenizer, self.device, self.dtype = model, tokenizer, device, dtype
        self.config: AlignerConfig = model.thinker.config
        ids = {name: tokenizer.token_to_id(name) for name in (AUDIO_START, AUDIO_PAD, AUDIO_END, TIMESTAMP)}
        if None in ids.values():
            missing = ", ".join(k for k, v in ids.items() if v is None)
            raise ConfigError("bad_tokenizer", f"the aligner's tokenizer lacks {missing}")
        if ids[AUDIO_PAD] != self.config.audio_token_id or ids[TIMESTAMP] != self.config.timestamp_token_id:
            raise ConfigError("bad_tokenizer", "the tokenizer's audio/timestamp ids differ from config.json")
        self.ids = ids
        self.pad_id = tokenizer.token_to_id(PAD) or 0  # the official left padding's token (never attended to)

    @classmethod
    def from_dir(cls, model_dir: str, device: str | torch.device = "cpu", dtype="float32") -> "ForcedAligner":
        if not os.path.isdir(model_dir):
            raise ConfigError("missing_dir", f"aligner directory {model_dir!r} does not exist")
        config = AlignerConfig.from_dir(model_dir)
        weights = os.path.join(model_dir, "model.safetensors")
        if not os.path.isfile(weights):
            raise ConfigError("missing_file", f"{model_dir}: no model.safetensors")
        device, dtype = torch.device(device), parse_dtype(dtype)
        with torch.device("meta"):
            model = AlignerModel(config)
        expected = {k: v.shape for k, v in model.state_dict().items()}
        model.load_state_dict(load_state(weights, expected, device, dtype), assign=True, strict=True)
        tower = model.thinker.audio_tower  # its sinusoid table is no checkpoint tensor: made here, not on meta
        tower.positions = sinusoids(config.audio.max_source_positions, config.audio.d_model).to(device, dtype)
        model.thinker.fuse()
        model = model.eval().requires_grad_(False)
        return cls(model, TextTokenizer.from_dir(model_dir), device, dtype)

    def prepare(self, clips: list[tuple[np.ndarray, int, str]]) -> Batch:
        """(PCM, its rate, its text) per clip -> the model's left-padded inputs."""
        audio = [to_16k(pcm, rate) for pcm, rate, _ in clips]
        features, lengths = log_mel_batch(audio, self.config.audio.num_mel_bins, self.device)
        rows, words = [], []
        for (_, _, text), n in zip(clips, lengths.tolist()):
            ws = split_words(text)
            row = [self.ids[AUDIO_START]] + [self.ids[AUDIO_PAD]] * int(tokens_after_cnn(n)) + [self.ids[AUDIO_END]]
            for w in ws:
                row += self.tokenizer.encode(w.text) + [self.ids[TIMESTAMP]] * 2
            rows.append(row)
            words.append(ws)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.int64)
        mask = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        return Batch(ids.to(self.device), mask.to(self.device), features, lengths.to(self.device), words)

    @torch.inference_mode()
    def logits(self, batch: Batch) -> torch.Tensor:
        return self.model.thinker(batch.input_ids, batch.attention_mask, batch.features, batch.feature_lengths)

    def boundaries_ms(self, batch: Batch, logits: torch.Tensor) -> list[list[int]]:
        """Per clip: the fixed-up slot times in ms (two per word: start, end)."""
        classes = logits.argmax(-1)
        out = []
        for ids, cls in zip(batch.input_ids, classes):
            raw = (cls[ids == self.config.timestamp_token_id] * self.config.timestamp_segment_time).cpu()
            out.append(fix_timestamps(raw.tolist()))
        return out

    def align(self, clips: list[tuple[np.ndarray, int, str]]) -> list[list[AlignedWord]]:
        """Per clip, its timed whitespace tokens in order, in samples at the clip's rate (tokens with no
        letters or digits are not timed; a token the aligner split, like CJK text, spans its parts)."""
        if not clips:
            return []
        for pcm, rate, _ in clips:
            if len(pcm) < 0.02 * rate:
                raise ValueError("aligner: a clip shorter than 20 ms cannot be aligned")
        batch = self.prepare(clips)
        result = []
        for (_, rate, _), words, ms in zip(clips, batch.words, self.boundaries_ms(batch, self.logits(batch))):
            spans: dict[tuple[int, int], list[int]] = {}
            for i, w in enumerate(words):
                key = (w.char_start, w.char_end)
                start, end = ms[2 * i], ms[2 * i + 1]
                spans[key] = [spans[key][0], end] if key in spans else [start, end]
            result.append(
                [AlignedWord(a, b, round(s * rate / 1000), round(e * rate / 1000)) for (a, b), (s, e) in spans.items()]
            )
        return result
