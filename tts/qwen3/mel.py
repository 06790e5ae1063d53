"""The speaker encoder's log-mel frontend, as the official `mel_spectrogram` computes it.

24 kHz input; reflect-pad (n_fft - hop) / 2 on each side; STFT 1024 / hop 256 with a
periodic Hann window and `center=False`; magnitude sqrt(re² + im² + 1e-9); a Slaney
mel filterbank (128 bands, 0–12 kHz, librosa's construction, recomputed here without
librosa); natural log of max(x, 1e-5).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

SAMPLE_RATE = 24000
N_FFT = 1024
HOP = 256
WIN = 1024
N_MELS = 128
FMIN = 0.0
FMAX = 12000.0
LOG_FLOOR = 1e-5

# Slaney's mel scale: linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    mel = f / _F_SP
    log_part = _MIN_LOG_MEL + np.log(np.maximum(f, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP
    return np.where(f >= _MIN_LOG_HZ, log_part, mel)


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    hz = _F_SP * m
    log_part = _MIN_LOG_HZ * np.exp(_LOGSTEP * (m - _MIN_LOG_MEL))
    return np.where(m >= _MIN_LOG_MEL, log_part, hz)


@functools.lru_cache(maxsize=4)
def mel_filterbank(
    sr: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS, fmin: float = FMIN, fmax: float = FMAX
) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] float32 triangles with Slaney area normalisation."""
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((n_mels, len(fft_freqs)), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def log_mel(wav: torch.Tensor) -> torch.Tensor:
    """wav [B, n] float32 at 24 kHz -> log-mel [B, frames, 128] (the encoder's input layout)."""
    basis = torch.from_numpy(mel_filterbank()).to(wav.device)
    window = torch.hann_window(WIN, device=wav.device)
    pad = (N_FFT - HOP) // 2
    y = torch.nn.functional.pad(wav.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(
        y,
        N_FFT,
        hop_length=HOP,
        win_length=WIN,
        window=window,
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(torch.matmul(basis, mag), min=LOG_FLOOR)).transpose(1, 2)
