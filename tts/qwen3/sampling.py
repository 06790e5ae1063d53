"""Sampling on the device, per row of a batch, with no device->host sync.

The talker's logits pass the official processors (repetition penalty over the codebook-0
tokens generated so far, EOS blocked before `min_new_tokens`, suppressed control ids),
then temperature, top-k and top-p as transformers' warpers do. The draw is gpt-fast's:
argmax of probabilities over exponential noise, which needs no `multinomial` sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingRows:
    """Per-row sampling settings as device tensors [B] (so one graph serves mixed requests)."""

    temperature: torch.Tensor  # float
    top_k: torch.Tensor  # long; <= 0 disables
    top_p: torch.Tensor  # float; 1.0 disables
    greedy: torch.Tensor  # bool
    repetition_penalty: torch.Tensor | None = None  # float; talker only

    @classmethod
    def filled(cls, batch: int, device, *, temperature: float = 0.9, top_k: int = 50, top_p: float = 1.0,
               greedy: bool = False, repetition_penalty: float | None = None) -> "SamplingRows":
        def full(v, dtype):
            return torch.full((batch,), v, dtype=dtype, device=device)

        return cls(full(temperature, torch.float32), full(top_k, torch.long), full(top_p, torch.float32),
                   full(greedy, torch.bool),
                   None if repetition_penalty is None else full(repetition_penalty, torch.float32))

    def slice(self, n: int) -> "SamplingRows":
        """Views of rows 0..n-1 (writes go to the full tensors)."""
        rp = None if self.repetition_penalty is None else self.repetition_penalty[:n]
        return SamplingRows(self.temperature[:n], self.top_k[:n], self.top_p[:n], self.greedy[:n], rp)

    def index(self, idx: torch.Tensor) -> "SamplingRows":
        rp = None if self.repetition_penalty is None else self.repetition_penalty[idx]
        return SamplingRows(self.temperature[idx], self.top_k[idx], self.top_p[idx], self.greedy[idx], rp)

    def set_row(self, row: int, *, temperature: float, top_k: int, top_p: float, greedy: bool,
                repetition_penalty: float | None = None) -> None:
        self.temperature[row] = temperature
        self.top_k[row] = top_k
        self.top_p[row] = top_p
        self.greedy[row] = greedy
        if self.repetition_penalty is not None and repetition_penalty is not None:
            self.repetition_penalty[row] = repetition_penalty


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    p = penalty.view(-1, 1)
    penalised = torch.where(logits < 0, logits * p, logits / p)
    return torch.where(seen, penalised, logits)


def talker_logits(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor, suppress: torch.Tensor,
                  eos_id: int, eos_allowed: torch.Tensor) -> torch.Tensor:
    """The official processors for codebook 0. seen [B, V] bool, suppress [V] bool, eos_allowed [B] bool."""
    # masked_fill with Python scalars keeps this capturable in a CUDA graph (no host->device copies)
    logits = apply_repetition_penalty(logits.float(), seen, penalty)
    logits = logits.masked_fill(suppress.view(1, -1), float("-inf"))
    eos_col = torch.zeros_like(suppress)
    eos_col[eos_id] = True
    return logits.masked_fill(eos_col.view(1, -1) & ~eos_allowed.view(-1, 1), float("-inf"))


def warp(logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    """Temperature, then top-k, then top-p (transformers' order and tie rules)."""
    vocab = logits.shape[-1]
    x = logits / rows.temperature.clamp_min(1e-5).view(-1, 1)
    desc = x.sort(dim=-1, descending=True).values
    k = torch.where(rows.top_k > 0, rows.top_k.clamp(max=vocab), torch.full_like(rows.top_k, vocab))
    kth = desc.gather(1, (k - 1).view(-1, 1))
    x = x.masked_fill(x < kth, float("-inf"))
    # top-p: drop the low tail whose cumulative probability stays <= 1 - top_p; keep the best token
    asc, order = x.sort(dim=-1)
    cum = asc.softmax(dim=-1).cumsum(dim=-1)
    drop = cum <= (1 - rows.top_p).view(-1, 1)
    drop[:, -1] = False
    drop = drop.scatter(1, order, drop)
    return x.masked_fill(drop, float("-inf"))


def sample(logits: torch.Tensor, rows: SamplingRows, generator: torch.Generator | None = None) -> torch.Tensor:
    """Processed logits [B, V] -> tokens [B] (long), on the device."""
    logits = logits.float()
    greedy_tok = logits.argmax(dim=-1)
    probs = warp(logits, rows).softmax(dim=-1)
    noise = torch.empty_like(probs).exponential_(1, generator=generator)
    sampled = (probs / noise).argmax(dim=-1)
    return torch.where(rows.greedy, greedy_tok, sampled)
