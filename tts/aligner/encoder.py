"""The aligner's audio encoder, as the official `Qwen3ASRAudioEncoder` computes it.

Per clip: the mel frames are cut into chunks of 2 * n_window (the last one shorter), each
zero-padded to the clip's widest chunk and run through three stride-2 convolutions (GELU), a
linear projection and sinusoidal positions; the valid outputs of all chunks are concatenated
and attend to each other bidirectionally; then LayerNorm and a two-layer projection to the text
model's width. (The official encoder computes windows of n_window_infer frames, but only its
flash-attention-2 path uses them: on its SDPA and eager paths, the transformers backend this
port matches, a clip attends across all its windows.)

Several clips run in one pass: chunks of the same padded width share their convolutions, and
all windows share the attention layers under one block-diagonal mask. The padded width is
kept per clip because it changes the convolution output near a short chunk's end.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tts.aligner.config import AudioEncoderConfig


def tokens_after_cnn(frames: torch.Tensor | int):
    """Mel frames -> encoder outputs (the official `_get_feat_extract_output_lengths`: 13 per 100 frames)."""
    leave = frames % 100
    feat = (leave - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (frames // 100) * 13


def _conv_len(n: int) -> int:
    for _ in range(3):
        n = (n - 1) // 2 + 1
    return n


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2).float())
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


class EncoderAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        q, k, v = (p(x).view(n, self.heads, -1).transpose(0, 1) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(out.transpose(0, 1).reshape(n, d))


class EncoderLayer(nn.Module):
    def __init__(self, c: AudioEncoderConfig):
        super().__init__()
        self.self_attn = EncoderAttention(c.d_model, c.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(c.d_model)
        self.fc1 = nn.Linear(c.d_model, c.encoder_ffn_dim)
        self.fc2 = nn.Linear(c.encoder_ffn_dim, c.d_model)
        self.final_layer_norm = nn.LayerNorm(c.d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    def __init__(self, c: AudioEncoderConfig):
        super().__init__()
        self.config = c
        ch = c.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, ch, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(ch, ch, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(ch, ch, 3, 2, padding=1)
        self.conv_out = nn.Linear(ch * _conv_len(c.num_mel_bins), c.d_model, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.ln_post = nn.LayerNorm(c.d_model)
        self.proj1 = nn.Linear(c.d_model, c.d_model)
        self.proj2 = nn.Linear(c.d_model, c.output_dim)
        self.register_buffer("positions", sinusoids(c.max_source_positions, c.d_model), persistent=False)

    def _convolve(self, chunks: torch.Tensor) -> torch.Tensor:
        """[C, n_mels, W] equally padded chunks -> [C, W', d_model] with positions added."""
        out = []
        for part in chunks.unsqueeze(1).split(self.config.conv_chunksize):
            h = F.gelu(self.conv2d1(part))
            h = F.gelu(self.conv2d2(h))
            out.append(F.gelu(self.conv2d3(h)))
        h = torch.cat(out)
        c, ch, f, t = h.shape
        h = self.conv_out(h.permute(0, 3, 1, 2).reshape(c, t, ch * f))
        return h + self.positions[:t].to(h.dtype)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """features [B, n_mels, frames] with valid frame counts [B] -> per clip [tokens_after_cnn(len), output_dim]."""
        c = self.config
        span = 2 * c.n_window
        pieces: list[tuple[int, int, int, torch.Tensor]] = []  # (clip, chunk index, padded width, chunk)
        for b, n in enumerate(lengths.tolist()):
            starts = range(0, n, span)
            width = span if len(starts) > 1 else n
            for j, s in enumerate(starts):
                chunk = features[b, :, s : min(s + span, n)]
                pieces.append((b, j, width, F.pad(chunk, (0, width - chunk.shape[1]))))
        embedded: dict[tuple[int, int], torch.Tensor] = {}
        for width in sorted({p[2] for p in pieces}):
            group = [p for p in pieces if p[2] == width]
            out = self._convolve(torch.stack([p[3] for p in group]))
            for (b, j, _, _), h in zip(group, out):
                embedded[(b, j)] = h
        seq = []
        for b, n in enumerate(lengths.tolist()):
            for j, s in enumerate(range(0, n, span)):
                seq.append(embedded[(b, j)][: int(tokens_after_cnn(min(span, n - s)))])
        x = torch.cat(seq)
        counts = [int(tokens_after_cnn(n)) for n in lengths.tolist()]
        clip = torch.repeat_interleave(
            torch.arange(len(counts), device=x.device), torch.tensor(counts, device=x.device)
        )
        mask = clip[:, None] == clip[None, :]  # each clip attends within itself only
        for layer in self.layers:
            x = layer(x, mask)
        x = self.proj2(F.gelu(self.proj1(self.ln_post(x))))
        return list(x.split(counts))
