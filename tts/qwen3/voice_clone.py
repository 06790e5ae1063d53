"""Cloned voices: a reference recording (+ transcript) -> the prompt parts a Base checkpoint needs.

`VoiceCloner` owns the speaker encoder (from the talker checkpoint) and the speech
tokenizer's encoder, and caches each voice's parts in memory and on disk, keyed by the
reference file's SHA-256, the checkpoint's fingerprint and the mode, so a voice costs its
encoders once per checkpoint (and a call pays only the prefill its prompt needs).

Official flow (qwen-tts 0.1.1 `create_voice_clone_prompt`): the file at its native rate,
channels averaged, resampled to 24 kHz (soxr HQ); the x-vector from the 24 kHz audio; in
ICL mode also the codec encoder's 16-codebook frames and the transcript's token ids.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from audio.reference import ReferenceAudio, ReferenceAudioError, to_rate
from tts.qwen3.prompt import ClonePrompt, PromptError, ref_text_ids

log = logging.getLogger("voxgate.qwen3.clone")

_SAMPLE_CHUNK = 1 << 20


def checkpoint_fingerprint(model_dir: str) -> str:
    """Short hash of a checkpoint's config and weights (sizes plus their first and last MiB)."""
    h = hashlib.sha256()
    for rel in (
        "config.json",
        "model.safetensors",
        "speech_tokenizer/config.json",
        "speech_tokenizer/model.safetensors",
    ):
        path = os.path.join(model_dir, rel)
        if not os.path.isfile(path):
            h.update(f"{rel}:absent".encode())
            continue
        size = os.path.getsize(path)
        h.update(f"{rel}:{size}".encode())
        with open(path, "rb") as f:
            h.update(f.read(_SAMPLE_CHUNK))
            if size > 2 * _SAMPLE_CHUNK:
                f.seek(size - _SAMPLE_CHUNK)
                h.update(f.read())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class VoiceParts:
    """The audio-derived parts of a voice (what the disk cache holds)."""

    xvector: np.ndarray  # float32 [D]
    ref_codes: np.ndarray | None  # int64 [T, 16] (ICL only)


class VoiceCloner:
    """Computes and caches `ClonePrompt`s for one loaded Base checkpoint. Thread-safe."""

    def __init__(
        self,
        model,
        tokenizer,
        model_dir: str | None,
        cache_dir: str | None = None,
        fingerprint: str | None = None,
        encoder=None,
    ):
        if model.speaker_encoder is None:
            raise PromptError("unknown_voice", "this checkpoint is not a Base model: it cannot clone voices")
        self.model = model
        self.tokenizer = tokenizer
        self.model_dir = model_dir
        self.cache_dir = Path(cache_dir) if cache_dir else None
        dtype = next(model.speaker_encoder.parameters()).dtype
        base = fingerprint or (checkpoint_fingerprint(model_dir) if model_dir else "random")
        self.fingerprint = f"{base}-{str(dtype).removeprefix('torch.')}"
        self._encoder = encoder  # the speech tokenizer's encoder; loaded from model_dir on first use if None
        self._lock = threading.Lock()
        self._memory: dict[str, VoiceParts] = {}
        self.counters = {"computed": 0, "memory_hits": 0, "disk_hits": 0}

    # -- encoders
    def codec_encoder(self):
        if self._encoder is None:
            if not self.model_dir:
                raise PromptError(
                    "unknown_voice", "in-context cloning needs a checkpoint folder with speech_tokenizer/"
                )
            from tts.qwen3.codec.encoder import load_codec_encoder

            device = self.model.talker.codec_head.weight.device
            self._encoder = load_codec_encoder(os.path.join(self.model_dir, "speech_tokenizer"), device=device)
        return self._encoder

    def xvector(self, wav_24k: np.ndarray) -> np.ndarray:
        return self.model.speaker_encoder.embed(wav_24k).float().cpu().numpy()

    def encode(self, wav_24k: np.ndarray) -> np.ndarray:
        return self.codec_encoder().encode(wav_24k).cpu().numpy().astype(np.int64)

    # -- parts, cached
    def key(self, ref: ReferenceAudio, icl: bool) -> str:
        return f"{ref.sha256[:32]}-{self.fingerprint}-{'icl' if icl else 'xvec'}"

    def parts(self, ref: ReferenceAudio, icl: bool) -> tuple[VoiceParts, str]:
        """(parts, where they came from: 'memory' | 'disk' | 'computed')."""
        key = self.key(ref, icl)
        with self._lock:
            hit = self._memory.get(key)
        if hit is not None:
            self.counters["memory_hits"] += 1
            return hit, "memory"
        parts = self._load(key)
        source = "disk"
        if parts is None:
            wav = to_rate(ref.samples, ref.sample_rate, self.model.speaker_encoder.sample_rate)
            parts = VoiceParts(self.xvector(wav), self.encode(wav) if icl else None)
            self._store(key, parts)
            source = "computed"
            self.counters["computed"] += 1
        else:
            self.counters["disk_hits"] += 1
        with self._lock:
            self._memory[key] = parts
        return parts, source

    def prompt(self, ref: ReferenceAudio, ref_text: str | None, x_vector_only: bool) -> ClonePrompt:
        if not x_vector_only and not (ref_text and ref_text.strip()):
            raise PromptError(
                "bad_voice", "in-context cloning needs the reference transcript (ref_text); or set x_vector_only"
            )
        parts, _ = self.parts(ref, icl=not x_vector_only)
        return self.to_prompt(parts, None if x_vector_only else ref_text)

    def to_prompt(self, parts: VoiceParts, ref_text: str | None) -> ClonePrompt:
        p = next(self.model.talker.parameters())
        xvec = torch.from_numpy(parts.xvector).to(p.device, p.dtype)
        if parts.ref_codes is None or ref_text is None:
            return ClonePrompt(xvec)
        ids = ref_text_ids(self.tokenizer, ref_text)
        return ClonePrompt(xvec, torch.from_numpy(parts.ref_codes).to(p.device), ids)

    # -- disk
    def _paths(self, key: str) -> tuple[Path, Path] | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{key}.npz", self.cache_dir / f"{key}.json"

    def _load(self, key: str) -> VoiceParts | None:
        paths = self._paths(key)
        if paths is None or not paths[0].is_file():
            return None
        try:
            with np.load(paths[0]) as z:
                codes = z["ref_codes"] if "ref_codes" in z.files else None
                return VoiceParts(z["xvector"].astype(np.float32), None if codes is None else codes.astype(np.int64))
        except Exception as e:  # noqa: BLE001 - a damaged cache entry is recomputed, never fatal
            log.warning("voice cache entry %s unreadable (%s); recomputing", paths[0], e)
            return None

    def _store(self, key: str, parts: VoiceParts) -> None:
        paths = self._paths(key)
        if paths is None:
            return
        try:
            paths[0].parent.mkdir(parents=True, exist_ok=True)
            tmp = paths[0].with_suffix(".tmp.npz")
            arrays = {"xvector": parts.xvector}
            if parts.ref_codes is not None:
                arrays["ref_codes"] = parts.ref_codes
            np.savez(tmp, **arrays)
            os.replace(tmp, paths[0])
            paths[1].write_text(
                json.dumps(
                    {
                        "key": key,
                        "checkpoint": self.fingerprint,
                        "frames": None if parts.ref_codes is None else len(parts.ref_codes),
                    }
                )
            )
        except OSError as e:
            log.warning("voice cache %s not writable (%s); keeping the voice in memory only", paths[0], e)


def load_reference_or_error(source: bytes | str) -> ReferenceAudio:
    """`audio.reference.load_reference`, as a PromptError('bad_audio', …) for engine callers."""
    from audio.reference import load_reference

    try:
        return load_reference(source)
    except ReferenceAudioError as e:
        raise PromptError("bad_audio", e.message) from None
