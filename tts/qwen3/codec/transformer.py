"""The decoder's causal sliding-window transformer at 12.5 Hz (`pre_transformer`).

Query frame p sees key frames p - window + 1 .. p. Per stream the state keeps
the last `window - 1` keys and values of each layer (RoPE already applied,
at absolute positions), so a step with t new frames attends over
[cached window | t new] and needs no recomputation of older frames. Rows of
one batch may be at different positions: `frames[b]` sets row b's RoPE
positions and which cache entries are real (a young stream's cache is
partly empty and masked out).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from tts.qwen3.codec.config import CodecConfig
from tts.qwen3.codec.layers import Buffers, StateSpec, gelu_or_silu


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.cached = cfg.sliding_window - 1
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.slot = -1

    def state_specs(self) -> list[StateSpec]:
        shape = (self.kv_heads, self.cached, self.head_dim)
        return [(shape, self.k_proj.weight.dtype), (shape, self.k_proj.weight.dtype)]

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, buffers: Buffers
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        keys = torch.cat([buffers[self.slot], k], dim=2)
        values = torch.cat([buffers[self.slot + 1], v], dim=2)
        # Keep the newest window-1 entries (a negative start: no shape arithmetic in the export).
        keep = slice(-self.cached, None) if self.cached else slice(0, 0)
        buffers[self.slot] = keys[:, :, keep]
        buffers[self.slot + 1] = values[:, :, keep]
        if self.kv_heads != self.heads:
            groups = self.heads // self.kv_heads
            keys = keys.repeat_interleave(groups, dim=1)
            values = values.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = gelu_or_silu(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = Mlp(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(self, x, cos, sin, mask, buffers: Buffers) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, buffers))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class SlidingWindowTransformer(nn.Module):
    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.window = cfg.sliding_window
        self.head_dim = cfg.head_dim
        self.rope_theta = cfg.rope_theta
        self.layers = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.register_buffer("inv_freq", torch.empty(cfg.head_dim // 2), persistent=False)

    def prepare(self) -> None:
        """Fill the RoPE frequencies (not stored in checkpoints) on the weights' device."""
        device = self.input_proj.weight.device
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device).float() / self.head_dim
        self.inv_freq = 1.0 / (self.rope_theta**exponents)

    def _rope(self, frames: torch.Tensor, t: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        positions = frames[:, None] + torch.arange(t, device=frames.device)  # [B, t]
        freqs = positions.float()[..., None] * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, t, head_dim]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def _mask(self, frames: torch.Tensor, t: int) -> torch.Tensor:
        # Key j of [cache (window-1) | new t] sits at absolute frame frames - (window-1) + j.
        cached = self.window - 1
        j = torch.arange(cached + t, device=frames.device)
        i = torch.arange(t, device=frames.device)
        band = (j[None, :] >= i[:, None]) & (j[None, :] <= i[:, None] + cached)
        real = j[None, :] >= (cached - frames)[:, None]
        return (band[None] & real[:, None])[:, None]  # [B, 1, t, cached + t]

    def forward(self, x: torch.Tensor, frames: torch.Tensor, buffers: Buffers) -> torch.Tensor:
        """x: [B, t, latent_dim] for frames `frames[b]`.. of each row; returns the same shape."""
        t = x.shape[1]
        h = self.input_proj(x)
        cos, sin = self._rope(frames, t, h.dtype)
        mask = self._mask(frames, t)
        for layer in self.layers:
            h = layer(h, cos, sin, mask, buffers)
        return self.output_proj(self.norm(h))
