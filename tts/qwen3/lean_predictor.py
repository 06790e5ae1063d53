"""The code predictor's single-token steps in as few torch calls as possible.

A frame runs the code predictor 15 times: a 2-token step, then 14 steps of one token per row over a
cache of at most 16 columns. Those steps are tiny, so on a CPU (and on a GPU until a CUDA graph is
captured) their cost is the number of torch calls, not arithmetic: the module path
(`CodePredictor.step`) makes about 120 Python-level calls and ~500 aten ops per step. This makes the same
step with the same math in about 50 calls:

* activations stay 2-D, [rows, width] (one token per row): no 3-D reshapes around each matmul;
* matmuls take weights transposed once, and `addmm` adds the residual in the same call;
* each codebook's embedding table is stored already passed through `small_to_mtp_projection`
  (a lookup of projected rows instead of a lookup and a matmul);
* RoPE is elementwise, so the q/k norm weights fold into each position's cos/sin factors:
  rope(w * n) = n * (w * cos) + swap(n) * (swap(w) * sin), two factor tables per position;
* every cache column and cache prefix a step touches is a view made once per batch size.

The sums run in another order here and there (a folded product, `addmm`), so values can differ from
the module path in the last bits; tests/qwen3/test_lean_predictor.py compares the two paths and the
parity tests compare greedy codes with the official model. Only the uniform case is served (every row
at the same predictor position, cache rows 0..B-1: the batch's step), on fused projections.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tts.qwen3.norm import rms_norm

# This module reads a `tts.qwen3.model.CodePredictor`'s weights and caches by attribute and imports
# nothing from model.py (model.py does not import it either: `generate.prepare_caches` builds the plan).


class _Layer:
    """One decoder layer's weights, laid out for 2-D steps."""

    def __init__(self, block, cos: torch.Tensor, sin_signed: torch.Tensor, swap: torch.Tensor):
        attn, mlp = block.self_attn, block.mlp
        self.hq, self.hk, self.d = attn.n_heads, attn.n_kv, attn.head_dim
        self.n_qk = (self.hq + self.hk) * self.d
        self.inter = mlp.gate_proj.out_features
        self.ln_in, self.ln_post = block.input_layernorm.weight, block.post_attention_layernorm.weight
        self.eps = block.input_layernorm.eps
        self.qk_eps = attn.q_norm.eps
        self.qkv_t = attn.qkv_weight.t()  # views: F.linear multiplies by the same transposed weight
        self.o_t = attn.o_proj.weight.t()
        self.gate_up_t = mlp.gate_up_weight.t()
        self.down_t = mlp.down_proj.weight.t()
        w = attn.qk_norm_weight  # [Hq + Hk, D]
        # per position p: [Hq + Hk, D] factors with the norm weight folded in
        self.rope_a = [w * cos[p] for p in range(cos.shape[0])]
        self.rope_b = [w.index_select(-1, swap) * sin_signed[p] for p in range(cos.shape[0])]
        self.rope_a01, self.rope_b01 = torch.stack(self.rope_a[:2]), torch.stack(self.rope_b[:2])  # [2, H, D]
        self.cache = attn.kv_cache


class LeanPredictor:
    """Single-token steps of one CodePredictor, for rows 0..B-1 all at the same position."""

    def __init__(self, cp):  # a tts.qwen3.model.CodePredictor
        dec = cp.model
        self.source = dec.layers[0].self_attn.kv_cache  # the plan's views belong to these caches
        half = dec.shape.head_dim // 2
        # rotate_half's swap of the two halves as one gather index
        dev = dec.rope_cos.device
        self.swap = torch.cat([torch.arange(half, 2 * half, device=dev), torch.arange(half, device=dev)])
        with torch.no_grad():
            self.layers = [_Layer(b, dec.rope_cos, dec.rope_sin, self.swap) for b in dec.layers]
            # input of step j (codebook j + 1 from codebook j's code): the projected row of table j - 1
            self.tables = [cp.small_to_mtp_projection(t.weight) for t in dec.codec_embedding]
        self.final = dec.norm.weight
        self.eps = dec.norm.eps
        self.heads_t = [h.weight.t() for h in cp.lm_head]
        proj = cp.small_to_mtp_projection
        self.proj = (proj.bias, proj.weight.t()) if isinstance(proj, torch.nn.Linear) else None
        self._views: dict[int, list] = {}

    def _views_for(self, b: int) -> list:
        """Per layer, per position p: (k column, v column, k prefix, v prefix) of cache rows 0..b-1."""
        views = self._views.get(b)
        if views is None:
            views = self._views[b] = []
            for layer in self.layers:
                kc, vc = layer.cache.k_cache[:b], layer.cache.v_cache[:b]
                cols = kc.shape[2]
                views.append([(kc[:, :, p], vc[:, :, p], kc[:, :, : p + 1], vc[:, :, : p + 1]) for p in range(cols)])
        return views

    def first(self, embeds: torch.Tensor) -> torch.Tensor:
        """The 2-token step: embeds [B, 2, talker width] (the talker's hidden state, codebook 0's embedding) at
        positions 0 and 1 -> logits [B, V] of codebook 1 (head 0); fills cache columns 0 and 1."""
        b = embeds.shape[0]
        h = embeds.reshape(2 * b, -1)  # rows (row, position)
        if self.proj is not None:
            h = torch.addmm(self.proj[0], h, self.proj[1])
        for layer, views in zip(self.layers, self._views_for(b)):
            keys, values = views[1][2], views[1][3]  # columns 0..1
            hq, hk, d = layer.hq, layer.hk, layer.d
            qkv = torch.mm(rms_norm(h, layer.ln_in, layer.eps), layer.qkv_t)
            normed = rms_norm(qkv[:, : layer.n_qk].view(b, 2, hq + hk, d), None, layer.qk_eps)
            qk = torch.addcmul(normed * layer.rope_a01, normed.index_select(-1, self.swap), layer.rope_b01)
            keys.copy_(qk[:, :, hq:].transpose(1, 2))
            values.copy_(qkv[:, layer.n_qk :].view(b, 2, hk, d).transpose(1, 2))
            out = F.scaled_dot_product_attention(
                qk[:, :, :hq].transpose(1, 2), keys, values, is_causal=True, enable_gqa=hq != hk
            )
            h = torch.addmm(h, out.transpose(1, 2).reshape(2 * b, hq * d), layer.o_t)
            gate_up = torch.mm(rms_norm(h, layer.ln_post, layer.eps), layer.gate_up_t)
            h = torch.addmm(h, F.silu(gate_up[:, : layer.inter]) * gate_up[:, layer.inter :], layer.down_t)
        return torch.mm(rms_norm(h.view(b, 2, -1)[:, 1], self.final, self.eps), self.heads_t[0])

    def step(self, code: torch.Tensor, j: int) -> torch.Tensor:
        """Codes [B] of codebook j -> logits [B, V] of codebook j + 1 (predictor position j + 1, head j).
        Positions 0 and 1 (the 2-token step) must be in the cache already."""
        b, pos = code.shape[0], j + 1
        h = F.embedding(code, self.tables[j - 1])  # [B, hidden], projected
        for layer, views in zip(self.layers, self._views_for(b)):
            k_col, v_col, keys, values = views[pos]
            qkv = torch.mm(rms_norm(h, layer.ln_in, layer.eps), layer.qkv_t)
            normed = rms_norm(qkv[:, : layer.n_qk].view(b, layer.hq + layer.hk, layer.d), None, layer.qk_eps)
            qk = torch.addcmul(normed * layer.rope_a[pos], normed.index_select(-1, self.swap), layer.rope_b[pos])
            k_col.copy_(qk[:, layer.hq :])
            v_col.copy_(qkv[:, layer.n_qk :].view(b, layer.hk, layer.d))
            out = F.scaled_dot_product_attention(
                qk[:, : layer.hq].unsqueeze(2), keys, values, enable_gqa=layer.hq != layer.hk
            )
            h = torch.addmm(h, out.view(b, layer.hq * layer.d), layer.o_t)
            gate_up = torch.mm(rms_norm(h, layer.ln_post, layer.eps), layer.gate_up_t)
            h = torch.addmm(h, F.silu(gate_up[:, : layer.inter]) * gate_up[:, layer.inter :], layer.down_t)
        return torch.mm(rms_norm(h, self.final, self.eps), self.heads_t[j])


def lean_predictor(cp) -> LeanPredictor | None:
    """The plan for `cp` (a CodePredictor; built once, rebuilt when its caches are reallocated), or None
    before its caches exist. `generate.prepare_caches` builds it right after the caches: its tables are
    computed by kernels, which must run eagerly, never first inside a CUDA graph capture."""
    layers = cp.model.layers
    if not layers or layers[0].self_attn.qkv_weight is None or layers[0].self_attn.kv_cache is None:
        return None
    plan = cp.__dict__.get("_lean")
    if plan is None or plan.source is not layers[0].self_attn.kv_cache:
        plan = LeanPredictor(cp)
        cp.__dict__["_lean"] = plan
    return plan
