"""The Base model's ECAPA-TDNN speaker encoder (`speaker_encoder.*`): log-mel -> x-vector.

No BatchNorm; every convolution is `padding="same"` with reflect padding and a bias;
SE-Res2Net blocks; multi-layer aggregation of blocks 1..N (not block 0); attentive
statistics pooling (tanh after the TDNN's ReLU). The x-vector goes into the talker
as one raw codec-embedding row, so `enc_dim` equals the talker's hidden size.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tts.qwen3.config import SpeakerEncoderConfig


def _conv(cin: int, cout: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TimeDelayBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(
            TimeDelayBlock(channels // scale, channels // scale, kernel, dilation) for _ in range(scale - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = []
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                y = part
            elif i == 1:
                y = self.blocks[0](part)
            else:
                y = self.blocks[i - 1](part + y)
            outs.append(y)
        return torch.cat(outs, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _conv(channels, se_channels)
        self.conv2 = _conv(se_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * s


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TimeDelayBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, scale, kernel, dilation)
        self.tdnn2 = TimeDelayBlock(cout, cout, 1, 1)
        self.se_block = SqueezeExcitation(cout, se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


def _stats(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-12) -> tuple[torch.Tensor, torch.Tensor]:
    mean = (w * x).sum(2)
    std = torch.sqrt((w * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(eps))
    return mean, std


class AttentivePooling(nn.Module):
    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        uniform = torch.full((x.shape[0], 1, t), 1.0 / t, dtype=x.dtype, device=x.device)
        mean, std = _stats(x, uniform)
        ctx = torch.cat([x, mean.unsqueeze(2).expand(-1, -1, t), std.unsqueeze(2).expand(-1, -1, t)], dim=1)
        attn = torch.softmax(self.conv(torch.tanh(self.tdnn(ctx))), dim=2)
        mean, std = _stats(x, attn)
        return torch.cat([mean, std], dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    def __init__(self, c: SpeakerEncoderConfig):
        super().__init__()
        ch, ks, dil = c.enc_channels, c.enc_kernel_sizes, c.enc_dilations
        self.blocks = nn.ModuleList([TimeDelayBlock(c.mel_dim, ch[0], ks[0], dil[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], c.enc_res2net_scale, c.enc_se_channels, ks[i], dil[i]))
        self.mfa = TimeDelayBlock(ch[-1], ch[-1], ks[-1], dil[-1])
        self.asp = AttentivePooling(ch[-1], c.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, c.enc_dim)
        self.sample_rate = c.sample_rate

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """mels [B, frames, mel_dim] -> x-vectors [B, enc_dim]."""
        x = mels.transpose(1, 2)
        hidden = []
        for block in self.blocks:
            x = block(x)
            hidden.append(x)
        x = self.mfa(torch.cat(hidden[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)

    @torch.inference_mode()
    def embed(self, wav_24k: np.ndarray) -> torch.Tensor:
        """One mono float32 waveform at 24 kHz -> its x-vector [enc_dim] (in the encoder's dtype)."""
        from tts.qwen3.mel import log_mel

        p = self.fc.weight
        mels = log_mel(torch.from_numpy(np.ascontiguousarray(wav_24k, dtype=np.float32)).unsqueeze(0).to(p.device))
        return self(mels.to(p.dtype))[0]
