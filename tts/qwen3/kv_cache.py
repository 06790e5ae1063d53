"""A static, pre-allocated KV cache: one row per sequence slot, one column per position.

Each slot holds its own sequence from position 0, so a sequence's cache column is its
position; attention masks columns beyond it. Shapes never change, which is what
CUDA graphs need.
"""

from __future__ import annotations

import torch
from torch import nn


class KVCache(nn.Module):
    def __init__(
        self,
        max_batch: int,
        max_seq_len: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        shape = (max_batch, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(
        self,
        rows: torch.Tensor | None,
        input_pos: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_len: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k/v [B, T, H, D] at `input_pos` [B, T]; return the rows' caches [B, H, L, D], L = kv_len
        (default: every column). Columns at or past kv_len must be ones no row may attend to.

        `rows` [B] picks the slots (None: slots 0..B-1, read without a copy).
        """
        b = k.shape[0]
        end = self.k_cache.shape[2] if kv_len is None else kv_len
        if rows is None:
            rows = torch.arange(b, device=k.device)
            kc, vc = self.k_cache[:b, :, :end], self.v_cache[:b, :, :end]
        else:
            kc = vc = None
        r = rows.view(b, 1)
        self.k_cache[r, :, input_pos] = k
        self.v_cache[r, :, input_pos] = v
        if kc is None:  # gather the picked rows' live columns only
            kc, vc = self.k_cache[:, :, :end][rows], self.v_cache[:, :, :end][rows]
        return kc, vc

    def update_uniform(self, b: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows 0..b-1 all at positions start..start+T-1: k/v [B, H, T, D] by slicing; returns the
        caches up to the last written column (no gather, no mask needed)."""
        end = start + k.shape[2]
        self.k_cache[:b, :, start:end] = k
        self.v_cache[:b, :, start:end] = v
        return self.k_cache[:b, :, :end], self.v_cache[:b, :, :end]
