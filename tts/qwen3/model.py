"""Qwen3-TTS talker and code predictor in plain torch.

Both are Qwen3 decoders (pre-norm RMSNorm, per-head q/k RMSNorm, GQA, SwiGLU, no
biases). Module and parameter names follow the official checkpoint keys
(`talker.model.layers.N.self_attn.q_proj.weight`, ...), so weights load by name.

Every forward takes a batch of sequences with their own positions `input_pos`
[B, T] and writes into the static KV cache rows `rows` [B] (None: rows 0..B-1).
The talker's multimodal RoPE carries the same position on its three streams for
TTS, which is plain 1-D RoPE; `rope_cos_sin` computes it as the official code does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tts.qwen3.attention import decode_attention, pinned_sdpa, prefill_attention
from tts.qwen3.config import CodePredictorConfig, DecoderShape, ModelConfig, TalkerConfig
from tts.qwen3.kv_cache import KVCache
from tts.qwen3.norm import rms_norm
from tts.qwen3.speaker_encoder import SpeakerEncoder


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_cos_sin(
    input_pos: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [B, 1, T, head_dim] for positions [B, T], computed in float32 like the reference."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=input_pos.device).float() / head_dim)
    )
    freqs = input_pos.float().unsqueeze(-1) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x*cos + rotate_half(x)*sin, with rotate_half as a half swap and the sign folded into
    sin_signed = [-sin, sin] (exactly the same values, two ops fewer)."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * sin_signed


class Attention(nn.Module):
    def __init__(self, s: DecoderShape):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, s.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, s.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, s.rms_norm_eps)
        self.kv_cache: KVCache | None = None
        self.sdpa_backend: str | tuple[str, ...] | None = None  # pinned backend(s): a capture, a prefill (attention.py)
        # Set by fuse() (Qwen3TTSModel.fuse_projections, before the first forward): one matmul for q, k
        # and v, one norm for q and k heads; forward uses only these. Buffers (not saved), so `.to()`
        # moves them along.
        self.register_buffer("qkv_weight", None, persistent=False)
        self.register_buffer("qk_norm_weight", None, persistent=False)

    def fuse(self) -> None:
        """One [q; k; v] weight; the three Linear weights become views of it (same storage, same keys)."""
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]).detach()
        nq, nk = self.q_proj.out_features, self.k_proj.out_features
        self.q_proj.weight.data, self.k_proj.weight.data, self.v_proj.weight.data = (
            w[:nq],
            w[nq : nq + nk],
            w[nq + nk :],
        )
        self.qkv_weight = w
        self.qk_norm_weight = torch.cat(
            [self.q_norm.weight.detach().expand(self.n_heads, -1), self.k_norm.weight.detach().expand(self.n_kv, -1)]
        )

    def _norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """q_norm on the q heads and k_norm on the k heads of [B, T, Hq+Hk, D] in one pass."""
        if qk.dtype == torch.float32:
            return rms_norm(qk, None, self.q_norm.eps) * self.qk_norm_weight
        return self.qk_norm_weight * rms_norm(qk, None, self.q_norm.eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        input_pos: torch.Tensor | int,
        rows: torch.Tensor | None,
        kv_len: int | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        hq, hk = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        q, k, v = F.linear(x, self.qkv_weight).split([hq, hk, hk], dim=-1)  # fused: see fuse()
        v = v.reshape(b, t, self.n_kv, self.head_dim)
        # q and k heads side by side: one norm, one RoPE
        qk = self._norm_qk(torch.cat([q, k], dim=-1).view(b, t, self.n_heads + self.n_kv, self.head_dim))
        qk = apply_rope(qk.transpose(1, 2), cos, sin)
        q, k = qk[:, : self.n_heads], qk[:, self.n_heads :]
        gqa = self.n_heads != self.n_kv
        if isinstance(input_pos, int):  # every row at positions start..start+t-1 (the code predictor)
            keys, values = self.kv_cache.update_uniform(b, input_pos, k, v.transpose(1, 2))
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1, enable_gqa=gqa)
            return self.o_proj.forward(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))
        keys, values = self.kv_cache.update(rows, input_pos, k.transpose(1, 2), v, kv_len)
        # decode: GQA folded into query rows, so a fused kernel takes the mask; prefill: causal, no mask
        attend = prefill_attention if mask is None else decode_attention
        with pinned_sdpa(self.sdpa_backend):  # None: torch's choice
            out = attend(q, keys, values, mask)
        return self.o_proj.forward(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.register_buffer("gate_up_weight", None, persistent=False)

    def fuse(self) -> None:
        w = torch.cat([self.gate_proj.weight, self.up_proj.weight]).detach()
        n = self.gate_proj.out_features
        self.gate_proj.weight.data, self.up_proj.weight.data = w[:n], w[n:]
        self.gate_up_weight = w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)  # fused: see fuse()
        return self.down_proj.forward(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, s: DecoderShape):
        super().__init__()
        self.self_attn = Attention(s)
        self.mlp = MLP(s.hidden_size, s.intermediate_size)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(self, x, cos, sin, mask, input_pos, rows, kv_len=None):
        # `.forward` straight: these modules have no hooks, and the code predictor runs ~300 module calls
        # per batched frame, whose `nn.Module.__call__` machinery is a measurable part of a CPU step
        x = x + self.self_attn.forward(self.input_layernorm.forward(x), cos, sin, mask, input_pos, rows, kv_len)
        return x + self.mlp.forward(self.post_attention_layernorm.forward(x))


class Decoder(nn.Module):
    """The transformer stack with its final norm; embeddings live in subclasses."""

    def __init__(self, s: DecoderShape):
        super().__init__()
        self.shape = s
        self.layers = nn.ModuleList(Block(s) for _ in range(s.num_hidden_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.max_seq_len = 0

    def setup_caches(self, max_batch: int, max_seq_len: int, dtype: torch.dtype, device) -> None:
        self.max_seq_len = max_seq_len
        for layer in self.layers:
            layer.self_attn.kv_cache = KVCache(
                max_batch, max_seq_len, self.shape.num_key_value_heads, self.shape.head_dim, dtype, device
            )
        # RoPE for every cache column, computed once with the same arithmetic as `rope_cos_sin`;
        # the sine carries rotate_half's sign ([-sin, sin]) for `apply_rope`.
        cos, sin = rope_cos_sin(
            torch.arange(max_seq_len, device=device).view(1, -1), self.shape.head_dim, self.shape.rope_theta, dtype
        )
        half = self.shape.head_dim // 2
        self.rope_cos = cos[0, 0]  # [S, head_dim]
        self.rope_sin = torch.cat([-sin[0, 0, :, :half], sin[0, 0, :, half:]], dim=-1)
        self.cols = torch.arange(max_seq_len, device=device)

    def forward(
        self,
        x: torch.Tensor,
        input_pos: torch.Tensor | int,
        rows: torch.Tensor | None = None,
        kv_len: int | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        """x [B, T, hidden] at positions input_pos [B, T] -> normed hidden states [B, T, hidden].

        An int `input_pos` means every row sits at start..start+T-1 (cache rows 0..B-1, causal from 0):
        the code predictor's case, which then needs no mask and no gather.
        `kv_len` (tensor positions only): attention reads cache columns 0..kv_len-1 only, which must
        cover every position a live row attends to (the caller's bucket of the longest live length).
        `causal` (tensor positions): every row at 0..T-1 and kv_len == T (a prefill): attention is causal
        without a mask, which flash attention takes (a mask rules it out).
        """
        if isinstance(input_pos, int):
            t = x.shape[1]
            if t > 1 and input_pos:
                raise ValueError("a multi-token uniform step must start at position 0")
            cos = self.rope_cos[input_pos : input_pos + t].view(1, 1, t, -1)
            sin = self.rope_sin[input_pos : input_pos + t].view(1, 1, t, -1)
            mask = None
        else:
            cos, sin = self.rope_cos[input_pos].unsqueeze(1), self.rope_sin[input_pos].unsqueeze(1)  # [B, 1, T, D]
            if causal:
                mask = None
            else:
                cols = self.cols if kv_len is None else self.cols[:kv_len]
                mask = cols.view(1, 1, 1, -1) <= input_pos.unsqueeze(1).unsqueeze(-1)  # [B, 1, T, L]
        for layer in self.layers:
            x = layer.forward(x, cos, sin, mask, input_pos, rows, kv_len)
        return self.norm.forward(x)


class TalkerDecoder(Decoder):
    def __init__(self, c: TalkerConfig):
        super().__init__(c)
        self.codec_embedding = nn.Embedding(c.vocab_size, c.hidden_size)
        self.text_embedding = nn.Embedding(c.text_vocab_size, c.text_hidden_size)


class PredictorDecoder(Decoder):
    def __init__(self, c: CodePredictorConfig, embedding_dim: int):
        super().__init__(c)
        # Inputs come at the talker's width and are projected by small_to_mtp_projection.
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(c.vocab_size, embedding_dim) for _ in range(c.num_code_groups - 1)
        )


class TextProjection(nn.Module):
    def __init__(self, text_hidden: int, hidden: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class CodePredictor(nn.Module):
    """Predicts codebooks 1..G-1 of a frame from the talker's hidden state and codebook 0."""

    def __init__(self, c: CodePredictorConfig, talker_hidden: int):
        super().__init__()
        self.config = c
        self.model = PredictorDecoder(c, talker_hidden)
        self.lm_head = nn.ModuleList(
            nn.Linear(c.hidden_size, c.vocab_size, bias=False) for _ in range(c.num_code_groups - 1)
        )
        self.small_to_mtp_projection = (
            nn.Linear(talker_hidden, c.hidden_size, bias=True) if c.hidden_size != talker_hidden else nn.Identity()
        )

    def step(
        self, embeds: torch.Tensor, input_pos: torch.Tensor | int, head: int, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Talker-width embeds [B, T, Dt] at input_pos -> logits of lm_head[head] at the last position [B, V]."""
        h = self.model.forward(self.small_to_mtp_projection(embeds), input_pos, rows)
        return self.lm_head._modules[str(head)].forward(h[:, -1])  # ModuleList[int] costs more than the matmul


class Talker(nn.Module):
    def __init__(self, c: TalkerConfig):
        super().__init__()
        self.config = c
        self.model = TalkerDecoder(c)
        self.text_projection = TextProjection(c.text_hidden_size, c.hidden_size)
        self.codec_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.code_predictor = CodePredictor(c.code_predictor, c.hidden_size)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum of the G codebook embeddings of frames codes [..., G] -> [..., hidden]."""
        parts = [self.model.codec_embedding(codes[..., 0])]
        parts += [table(codes[..., i + 1]) for i, table in enumerate(self.code_predictor.model.codec_embedding)]
        return torch.stack(parts, dim=-2).sum(-2)  # one reduction, as the reference sums

    def forward(
        self,
        embeds: torch.Tensor,
        input_pos: torch.Tensor,
        rows: torch.Tensor | None = None,
        last: torch.Tensor | None = None,
        kv_len: int | None = None,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """embeds [B, T, D] -> (hidden [B, D], codebook-0 logits [B, V]) at index `last` [B] (default: T-1)."""
        h = self.model(embeds, input_pos, rows, kv_len, causal)
        if last is None:
            h = h[:, -1]
        else:
            h = h.gather(1, last.view(-1, 1, 1).expand(-1, 1, h.shape[-1])).squeeze(1)
        return h, self.codec_head(h)


class Qwen3TTSModel(nn.Module):
    """The whole checkpoint: `talker.*`, and for Base `speaker_encoder.*` (loaded, not run yet)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.talker = Talker(config.talker)
        self.speaker_encoder = SpeakerEncoder(config.speaker_encoder) if config.has_speaker_encoder else None

    def fuse_projections(self) -> None:
        """Fewer, larger matmuls (q/k/v and gate/up) for every decoder layer; idempotent."""
        for dec in (self.talker.model, self.talker.code_predictor.model):
            for layer in dec.layers:
                if layer.self_attn.qkv_weight is None:
                    layer.self_attn.fuse()
                    layer.mlp.fuse()

    def setup_caches(self, max_batch: int, max_seq_len: int, dtype: torch.dtype | None = None, device=None) -> None:
        """Static KV caches for `max_batch` rows of `max_seq_len` positions (the forward's one layout is the
        fused one, so this fuses first; idempotent). Code predictor steps go through
        `tts.qwen3.lean_predictor`, whose plan views these caches: callers build it eagerly after this."""
        self.fuse_projections()
        p = next(self.parameters())
        dtype, device = dtype or p.dtype, device or p.device
        self.talker.model.setup_caches(max_batch, max_seq_len, dtype, device)
        g = self.config.talker.num_code_groups
        self.talker.code_predictor.model.setup_caches(max_batch, g, dtype, device)
