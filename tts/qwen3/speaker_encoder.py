"""The Base model's ECAPA-TDNN speaker encoder (`speaker_encoder.*`), parameters only.

Base checkpoints carry it to compute x-vectors from reference audio. Computing
x-vectors is a later issue; the module exists so Base checkpoints load by their
exact key names (nothing skipped silently) and parameter counts match the official class.
"""

from __future__ import annotations

from torch import nn

from tts.qwen3.config import SpeakerEncoderConfig


class TimeDelayBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class Res2NetBlock(nn.Module):
    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        self.blocks = nn.ModuleList(TimeDelayBlock(channels // scale, channels // scale, kernel, dilation)
                                    for _ in range(scale - 1))


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = nn.Conv1d(channels, se_channels, 1)
        self.conv2 = nn.Conv1d(se_channels, channels, 1)


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TimeDelayBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, scale, kernel, dilation)
        self.tdnn2 = TimeDelayBlock(cout, cout, 1, 1)
        self.se_block = SqueezeExcitation(cout, se_channels)


class AttentivePooling(nn.Module):
    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayBlock(channels * 3, attention_channels, 1, 1)
        self.conv = nn.Conv1d(attention_channels, channels, 1)


class SpeakerEncoder(nn.Module):
    def __init__(self, c: SpeakerEncoderConfig):
        super().__init__()
        ch, ks, dil = c.enc_channels, c.enc_kernel_sizes, c.enc_dilations
        self.blocks = nn.ModuleList([TimeDelayBlock(c.mel_dim, ch[0], ks[0], dil[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], c.enc_res2net_scale, c.enc_se_channels, ks[i], dil[i]))
        self.mfa = TimeDelayBlock(ch[-1], ch[-1], ks[-1], dil[-1])
        self.asp = AttentivePooling(ch[-1], c.enc_attention_channels)
        self.fc = nn.Conv1d(ch[-1] * 2, c.enc_dim, 1)
