"""The aligner's input audio: 24 kHz engine PCM -> 16 kHz -> Whisper log-mel, as the official code does.

The official `normalize_audios` resamples with librosa's default (soxr, HQ) and rescales only
audio whose peak exceeds 1. Its processor (transformers' WhisperFeatureExtractor, torch path)
zero-pads a batch to its longest clip and then computes, per clip: a centred 400-point STFT
with hop 160, power spectrum without the last frame, a Slaney mel filterbank (128 bands,
0-8 kHz), log10 floored at 1e-10, floored again at the clip's maximum minus 8, then (x + 4) / 4.
Each clip keeps ceil(n / 160) frames, at most the batch's frame count.
"""

from __future__ import annotations

import numpy as np
import soxr
import torch

from tts.qwen3.mel import mel_filterbank

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160


def to_16k(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Mono float PCM at `rate` -> float32 at 16 kHz in [-1, 1] (the official `normalize_audio_input`)."""
    audio = np.asarray(pcm, dtype=np.float32)
    if rate != SAMPLE_RATE:
        audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    if peak > 1.0:
        audio = audio / peak
    return np.clip(audio, -1.0, 1.0) if peak else audio


def log_mel_batch(clips: list[np.ndarray], n_mels: int, device: torch.device | str = "cpu"):
    """16 kHz clips -> (features [B, n_mels, frames] float32, frame counts [B] int64)."""
    longest = max(len(c) for c in clips)
    wave = np.zeros((len(clips), longest), dtype=np.float32)
    for i, c in enumerate(clips):
        wave[i, : len(c)] = c
    x = torch.from_numpy(wave).to(device)
    stft = torch.stft(x, N_FFT, HOP, window=torch.hann_window(N_FFT, device=x.device), return_complex=True)
    power = stft[..., :-1].abs() ** 2
    basis = torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, n_mels, 0.0, 8000.0)).to(x.device)
    spec = torch.clamp(basis @ power, min=1e-10).log10()
    peak = spec.amax(dim=(1, 2), keepdim=True)
    spec = (torch.maximum(spec, peak - 8.0) + 4.0) / 4.0
    frames = longest // HOP
    lengths = torch.tensor([min(-(-len(c) // HOP), frames) for c in clips], dtype=torch.int64)
    return spec, lengths
