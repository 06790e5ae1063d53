"""Convolutional pieces of the codec decoder, each able to run chunk by chunk.

Every layer is causal. A stateful layer keeps, per stream, exactly the left
context its kernel reaches back to (`slot` indexes its buffer in the step's
buffer list); a fresh state is zeros, which is the official left zero
padding, so decoding a sequence in any chunking gives the same samples.
Parameter names follow the official classes so checkpoints load by name.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

Buffers = list[torch.Tensor]
StateSpec = tuple[tuple[int, ...], torch.dtype]


def _keep_tail(x: torch.Tensor, n: int) -> torch.Tensor:
    # A copy, so the state never pins a whole chunk's activations. A negative start keeps
    # the slice free of shape arithmetic (the ONNX export's frame axis stays dynamic).
    return x[..., -n:].clone(memory_format=torch.contiguous_format)


class CausalConv1d(nn.Module):
    """Conv1d, stride 1, left-padded by (kernel - 1) * dilation (`Qwen3TTSTokenizerV2CausalConvNet`)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.context = (kernel_size - 1) * dilation
        self.slot = -1

    def state_specs(self) -> list[StateSpec]:
        return [((self.conv.in_channels, self.context), self.conv.weight.dtype)] if self.context else []

    def forward(self, x: torch.Tensor, buffers: Buffers) -> torch.Tensor:
        if self.context:
            x = torch.cat([buffers[self.slot], x], dim=-1)
            buffers[self.slot] = _keep_tail(x, self.context)
        return self.conv(x)


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d whose right overhang (kernel - stride) is cut (`...CausalTransConvNet`).

    Output sample n·stride + r of frame n mixes frames n, n-1, … n-taps+1
    (taps = ceil(kernel / stride)); the last taps-1 input frames are the state.
    It runs as a polyphase Conv1d (stride·out channels, `taps` taps, then
    interleaved): the same sums as the transposed conv, on the fast conv path
    (CPU transposed convolutions with long kernels fall back to a slow kernel).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        if kernel_size < stride:
            raise ValueError("transposed conv kernel shorter than its stride leaves holes")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.taps = -(-kernel_size // stride)
        self.context = self.taps - 1
        self.slot = -1
        self.register_buffer("poly_weight", torch.empty(0), persistent=False)
        self.register_buffer("poly_bias", torch.empty(0), persistent=False)

    def state_specs(self) -> list[StateSpec]:
        return [((self.conv.in_channels, self.context), self.conv.weight.dtype)] if self.context else []

    def prepare(self) -> None:
        w = self.conv.weight  # [in, out, kernel]
        cin, cout, k = w.shape
        w = F.pad(w, (0, self.taps * self.stride - k)).view(cin, cout, self.taps, self.stride)
        # Conv tap u reads frame n - (taps - 1 - u), which uses kernel index (taps - 1 - u)·stride + r.
        w = w.flip(2).permute(1, 3, 0, 2).reshape(cout * self.stride, cin, self.taps)
        self.poly_weight = w.contiguous()
        self.poly_bias = self.conv.bias.repeat_interleave(self.stride)

    def forward(self, x: torch.Tensor, buffers: Buffers) -> torch.Tensor:
        if self.context:
            x = torch.cat([buffers[self.slot], x], dim=-1)
            buffers[self.slot] = _keep_tail(x, self.context)
        y = F.conv1d(x, self.poly_weight, self.poly_bias)  # [B, out·stride, frames], channel o·stride + r
        # [B, out, stride, frames] → [B, out, frames, stride] → [B, out, frames·stride]; no shape
        # arithmetic, so the exported graph keeps batch and frames dynamic.
        return y.unflatten(1, (-1, self.stride)).transpose(2, 3).flatten(2)


class SnakeBeta(nn.Module):
    """x + sin²(x·e^α) / (e^β + 1e-9), always computed in float32.

    exp(β) underflows in fp16 and 1/(·) overflows (the all-silent bf16/fp16
    output others hit), so parameters stay fp32 and the math is upcast.
    `prepare()` folds the two exponentials once (two fewer kernels per call).
    """

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels, dtype=torch.float32))
        self.beta = nn.Parameter(torch.zeros(channels, dtype=torch.float32))
        self.register_buffer("frequency", torch.empty(0), persistent=False)
        self.register_buffer("inverse_magnitude", torch.empty(0), persistent=False)

    def prepare(self) -> None:
        self.frequency = self.alpha.float().exp()[None, :, None]
        self.inverse_magnitude = 1.0 / (self.beta.float().exp()[None, :, None] + 1e-9)

    def forward(self, x: torch.Tensor, buffers: Buffers | None = None) -> torch.Tensor:
        xf = x.float()
        y = xf + self.inverse_magnitude * torch.sin(xf * self.frequency).pow(2)
        if x.dtype == torch.float16:
            y = y.clamp(-65504.0, 65504.0)
        return y.to(x.dtype)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv (k=7) + LayerNorm + pointwise MLP, gamma-scaled residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor, buffers: Buffers) -> torch.Tensor:
        h = self.dwconv(x, buffers).transpose(1, 2)
        # The normalisation runs in fp32 whatever the conv precision (half-precision exports too).
        n = self.norm
        h = F.layer_norm(h.float(), n.normalized_shape, n.weight.float(), n.bias.float(), n.eps).to(h.dtype)
        h = self.pwconv2(self.act(self.pwconv1(h)))
        return x + (self.gamma * h).transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, kernel_size=1)

    def forward(self, x: torch.Tensor, buffers: Buffers) -> torch.Tensor:
        h = self.conv1(self.act1(x), buffers)
        return x + self.conv2(self.act2(h), buffers)


class DecoderBlock(nn.Module):
    """SnakeBeta, ×rate transposed conv (kernel 2·rate), residual units with dilations 1, 3, 9."""

    def __init__(self, in_dim: int, out_dim: int, rate: int):
        super().__init__()
        units = [ResidualUnit(out_dim, d) for d in (1, 3, 9)]
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalConvTranspose1d(in_dim, out_dim, 2 * rate, rate), *units])

    def forward(self, x: torch.Tensor, buffers: Buffers) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, buffers)
        return x


def gelu_or_silu(name: str):
    return F.silu if name == "silu" else F.gelu
