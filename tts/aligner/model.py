"""The aligner's text side: a Qwen3 decoder over [audio tokens, text with timestamp slots] and the
timestamp head, in one non-autoregressive pass (the official `Qwen3ASRThinkerForConditionalGeneration`
with its `classify_num`-way `lm_head`).

The decoder is the talker's kind of Qwen3 stack (RMSNorm, per-head q/k norm, GQA, SwiGLU; its
RMSNorm and MLP are reused from tts/qwen3/model.py), run over whole left-padded sequences with a
causal mask and no KV cache. Positions count real tokens from 0 (padding sits at 1), on all three
MRoPE streams alike, which makes the interleaved MRoPE plain RoPE. Parameter names follow the
checkpoint (`thinker.model.layers.N...`, `thinker.audio_tower...`, `thinker.lm_head.weight`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tts.aligner.config import AlignerConfig, TextConfig
from tts.aligner.encoder import AudioEncoder
from tts.qwen3.model import MLP, RMSNorm, rope_cos_sin


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class TextAttention(nn.Module):
    def __init__(self, c: TextConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class TextBlock(nn.Module):
    def __init__(self, c: TextConfig):
        super().__init__()
        self.self_attn = TextAttention(c)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class TextModel(nn.Module):
    def __init__(self, c: TextConfig):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(TextBlock(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """x [B, T, hidden] embeddings, attention_mask [B, T] (1 = real token) -> normed hidden states."""
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        t = x.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        # a padding row sees itself only, so no row is all masked (its output is never read)
        mask = (causal & attention_mask.bool()[:, None, :]) | torch.eye(t, dtype=torch.bool, device=x.device)
        mask = mask[:, None]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


class Thinker(nn.Module):
    def __init__(self, c: AlignerConfig):
        super().__init__()
        self.config = c
        self.audio_tower = AudioEncoder(c.audio)
        self.model = TextModel(c.text)
        self.lm_head = nn.Linear(c.text.hidden_size, c.classify_num, bias=False)

    def fuse(self) -> None:
        """The reused MLP reads one fused gate/up weight (tts/qwen3/model.py); made once after loading."""
        for layer in self.model.layers:
            layer.mlp.fuse()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        features: torch.Tensor,
        feature_lengths: torch.Tensor,
    ) -> torch.Tensor:
        """Token ids [B, T] (audio placeholders included), mask [B, T], mel [B, n_mels, F] with lengths [B]
        -> timestamp logits [B, T, classify_num]."""
        x = self.model.embed_tokens(input_ids)
        audio = torch.cat(self.audio_tower(features.to(x.dtype), feature_lengths))
        slots = input_ids == self.config.audio_token_id
        if int(slots.sum()) != audio.shape[0]:
            raise ValueError(f"{int(slots.sum())} audio placeholders for {audio.shape[0]} audio tokens")
        x = x.masked_scatter(slots[..., None], audio.to(x.dtype))
        return self.lm_head(self.model(x, attention_mask))


class AlignerModel(nn.Module):
    """The checkpoint's top level (`thinker.` keys)."""

    def __init__(self, c: AlignerConfig):
        super().__init__()
        self.thinker = Thinker(c)
