"""Split residual VQ, decode side: 16 codes per frame → one codebook_dim vector.

Codebook 0 (semantic) and codebooks 1.. (acoustic) each sum their entries and
go through their own 1×1 output projection; the two results add. Entries are
stored as EMA statistics (`embedding_sum / cluster_usage`); `prepare()` turns
them into plain lookup tables once after loading.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

_USAGE_EPS = 1e-5  # EuclideanCodebook's epsilon


class Codebook(nn.Module):
    def __init__(self, dim: int, size: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        return self.embedding_sum.float() / self.cluster_usage.float().clamp(min=_USAGE_EPS)[:, None]


class VectorQuantization(nn.Module):
    def __init__(self, dim: int, size: int):
        super().__init__()
        self._codebook = Codebook(dim, size)


class _Layers(nn.Module):
    def __init__(self, count: int, dim: int, size: int):
        super().__init__()
        self.layers = nn.ModuleList([VectorQuantization(dim, size) for _ in range(count)])


class ResidualVectorQuantizer(nn.Module):
    """One group of codebooks with its projections; `input_proj` only serves the encoder."""

    def __init__(self, count: int, dim: int, outer_dim: int, size: int):
        super().__init__()
        self.input_proj = nn.Conv1d(outer_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, outer_dim, 1, bias=False)
        self.vq = _Layers(count, dim, size)


class SplitResidualVectorQuantizer(nn.Module):
    def __init__(self, num_quantizers: int, codebook_size: int, codebook_dim: int):
        super().__init__()
        dim = codebook_dim // 2
        self.num_quantizers = num_quantizers
        self.codebook_size = codebook_size
        self.rvq_first = ResidualVectorQuantizer(1, dim, codebook_dim, codebook_size)
        self.rvq_rest = ResidualVectorQuantizer(num_quantizers - 1, dim, codebook_dim, codebook_size)
        self.register_buffer("tables", torch.empty(num_quantizers * codebook_size, dim), persistent=False)

    def prepare(self, dtype: torch.dtype) -> None:
        codebooks = [vq._codebook for vq in (*self.rvq_first.vq.layers, *self.rvq_rest.vq.layers)]
        self.tables = torch.cat([c.table() for c in codebooks]).to(dtype)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, t, Q] in range → [B, t, codebook_dim]."""
        offsets = torch.arange(self.num_quantizers, device=codes.device) * self.codebook_size
        entries = F.embedding(codes + offsets, self.tables)  # [B, t, Q, dim]
        rest = entries[:, :, 1]
        for q in range(2, self.num_quantizers):  # in order, as the reference sums
            rest = rest + entries[:, :, q]
        first = F.linear(entries[:, :, 0], self.rvq_first.output_proj.weight[:, :, 0])
        return first + F.linear(rest, self.rvq_rest.output_proj.weight[:, :, 0])
