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
    """Per-row sampling settings as device tensors [B] (so one graph serves mixed requests).

    `kmax` and `top_p_on` are host-side summaries of the rows (sticky as rows are set): top-k
    runs as one `topk(kmax)` instead of a full sort, and top-p runs only when a row asked for it.
    """

    temperature: torch.Tensor  # float
    top_k: torch.Tensor  # long; <= 0 disables
    top_p: torch.Tensor  # float; 1.0 disables
    greedy: torch.Tensor  # bool
    repetition_penalty: torch.Tensor | None = None  # float; talker only
    kmax: int | None = 0  # largest top_k of any row; None: some row samples the whole vocabulary
    top_p_on: bool = False
    any_greedy: bool = True  # conservative summaries: some row may be greedy / every row is greedy
    all_greedy: bool = False
    fixed: bool = False  # summaries pinned (CUDA graphs): rows may change, the layout may not

    @classmethod
    def filled(
        cls,
        batch: int,
        device,
        *,
        temperature: float = 0.9,
        top_k: int = 50,
        top_p: float = 1.0,
        greedy: bool = False,
        repetition_penalty: float | None = None,
        general: bool = False,
    ) -> "SamplingRows":
        """`general`: a pinned layout that serves any row's settings — top-k over the `top_k` widest
        candidates (rows asking for more, or for none, need `wide()`), top-p on, greedy rows by mask."""

        def full(v, dtype):
            return torch.full((batch,), v, dtype=dtype, device=device)

        rows = cls(
            full(temperature, torch.float32),
            full(top_k, torch.long),
            full(top_p, torch.float32),
            full(greedy, torch.bool),
            None if repetition_penalty is None else full(repetition_penalty, torch.float32),
            kmax=top_k if top_k > 0 else None,
            top_p_on=top_p < 1.0,
            any_greedy=greedy,
            all_greedy=greedy,
        )
        if general:
            rows.top_p_on, rows.any_greedy, rows.all_greedy, rows.fixed = True, True, False, True
        return rows

    def _like(self, **tensors) -> "SamplingRows":
        return SamplingRows(
            **tensors,
            kmax=self.kmax,
            top_p_on=self.top_p_on,
            any_greedy=self.any_greedy,
            all_greedy=self.all_greedy,
            fixed=self.fixed,
        )

    def wide(self) -> "SamplingRows":
        """The same rows in the pinned layout that samples the whole vocabulary (rows with top_k <= 0
        or above the narrow layout's width)."""
        rows = self._like(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            greedy=self.greedy,
            repetition_penalty=self.repetition_penalty,
        )
        rows.kmax = None
        return rows

    def needs_wide(self, top_k: int) -> bool:
        return self.fixed and self.kmax is not None and (top_k <= 0 or top_k > self.kmax)

    def tensors(self) -> list[torch.Tensor]:
        return [
            t for t in (self.temperature, self.top_k, self.top_p, self.greedy, self.repetition_penalty) if t is not None
        ]

    def slice(self, n: int) -> "SamplingRows":
        """Views of rows 0..n-1 (writes go to the full tensors)."""
        rp = None if self.repetition_penalty is None else self.repetition_penalty[:n]
        return self._like(
            temperature=self.temperature[:n],
            top_k=self.top_k[:n],
            top_p=self.top_p[:n],
            greedy=self.greedy[:n],
            repetition_penalty=rp,
        )

    def index(self, idx: torch.Tensor) -> "SamplingRows":
        rp = None if self.repetition_penalty is None else self.repetition_penalty[idx]
        return self._like(
            temperature=self.temperature[idx],
            top_k=self.top_k[idx],
            top_p=self.top_p[idx],
            greedy=self.greedy[idx],
            repetition_penalty=rp,
        )

    def columns(self, settings: list[dict]) -> list[list[float]]:
        """The host values of rows with these settings, one list per tensor in `tensors()` order (a
        missing repetition_penalty is NaN: that row keeps its value). For `write`, after one staged copy."""
        cols = [
            [s["temperature"] for s in settings],
            [s["top_k"] for s in settings],
            [s["top_p"] for s in settings],
            [bool(s["greedy"]) for s in settings],
        ]
        if self.repetition_penalty is not None:
            cols.append(
                [
                    s.get("repetition_penalty") if s.get("repetition_penalty") is not None else float("nan")
                    for s in settings
                ]
            )
        return cols

    def write(self, idx: torch.Tensor, values: torch.Tensor) -> None:
        """Rows `idx` [n] (device, long) take `values` [len(columns), n] (device, float64): kernels only."""
        self.temperature.index_copy_(0, idx, values[0].to(self.temperature.dtype))
        self.top_k.index_copy_(0, idx, values[1].to(self.top_k.dtype))
        self.top_p.index_copy_(0, idx, values[2].to(self.top_p.dtype))
        self.greedy.index_copy_(0, idx, values[3] != 0)
        if self.repetition_penalty is not None:
            rp = values[4]
            kept = torch.where(rp.isnan(), self.repetition_penalty.index_select(0, idx).to(rp.dtype), rp)
            self.repetition_penalty.index_copy_(0, idx, kept.to(self.repetition_penalty.dtype))
        self._k_index = self._temperature_col = None

    def note(
        self, *, temperature: float, top_k: int, top_p: float, greedy: bool, repetition_penalty: float | None = None
    ) -> None:
        """Fold one row's settings into the host-side summaries (what `write` cannot see)."""
        self._k_index = self._temperature_col = None
        if self.fixed:
            return
        self.any_greedy = self.any_greedy or greedy
        self.all_greedy = self.all_greedy and greedy
        if not greedy:
            self.kmax = None if (top_k <= 0 or self.kmax is None) else max(self.kmax, top_k)
            self.top_p_on = self.top_p_on or top_p < 1.0

    def set_rows(self, rows: list[int], settings: list[dict]) -> None:
        """Rows take these settings: one staged host->device copy, no per-element writes."""
        from tts.qwen3.staging import Staged

        staged = Staged()
        at_rows = staged.add(rows)
        at_cols = [staged.add(c) for c in self.columns(settings)]
        dev = staged.send(self.temperature.device)
        self.write(dev[at_rows].long(), torch.stack([dev[c] for c in at_cols]))
        for s in settings:
            self.note(**s)

    def set_row(self, row: int, **settings) -> None:
        self.set_rows([row], [settings])

    def k_index(self, kmax: int) -> torch.Tensor:
        """Each row's k (top_k, or kmax when off) as a [B, 1] gather index; computed once per object,
        so the code predictor's 15 draws of a frame share it."""
        cached = getattr(self, "_k_index", None)
        if cached is None or cached[0] != kmax:
            k = torch.where(self.top_k > 0, self.top_k.clamp(max=kmax), torch.full_like(self.top_k, kmax))
            cached = (kmax, (k - 1).view(-1, 1))
            self._k_index = cached
        return cached[1]

    def temperature_col(self) -> torch.Tensor:
        """Each row's temperature (floored at 1e-5) as [B, 1]; once per object, like `k_index`."""
        cached = getattr(self, "_temperature_col", None)
        if cached is None:
            cached = self._temperature_col = self.temperature.clamp_min(1e-5).view(-1, 1)
        return cached

    @property
    def shape_key(self) -> tuple:
        """What a captured graph depends on besides the tensors."""
        return (self.kmax, self.top_p_on, self.any_greedy, self.all_greedy)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    p = penalty.view(-1, 1)
    penalised = torch.where(logits < 0, logits * p, logits / p)
    return torch.where(seen, penalised, logits)


def eos_mask(vocab: int, eos_id: int, device) -> torch.Tensor:
    """[V] bool, True at the end-of-speech token. Built by a kernel: `mask[eos_id] = True` on a CUDA
    tensor would copy the scalar from the host and synchronise (and fail inside a graph capture)."""
    return torch.arange(vocab, device=device) == eos_id


def talker_logits(
    logits: torch.Tensor,
    seen: torch.Tensor,
    penalty: torch.Tensor,
    suppress: torch.Tensor,
    eos_id: int | torch.Tensor,
    eos_allowed: torch.Tensor,
) -> torch.Tensor:
    """The official processors for codebook 0. seen [B, V] bool, suppress [V] bool, eos_allowed [B] bool;
    `eos_id`: the token, or its `eos_mask` built once (what the engine's step passes)."""
    # masked_fill with Python scalars keeps this capturable in a CUDA graph (no host->device copies)
    logits = apply_repetition_penalty(logits.float(), seen, penalty)
    logits = logits.masked_fill(suppress.view(1, -1), float("-inf"))
    eos_col = eos_id if isinstance(eos_id, torch.Tensor) else eos_mask(suppress.shape[0], eos_id, suppress.device)
    return logits.masked_fill(eos_col.view(1, -1) & ~eos_allowed.view(-1, 1), float("-inf"))


def warp(logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    """Temperature, then top-k, then top-p (transformers' order and tie rules)."""
    vocab = logits.shape[-1]
    x = logits / rows.temperature.clamp_min(1e-5).view(-1, 1)
    kmax = vocab if rows.kmax is None else min(rows.kmax, vocab)
    if kmax > 0:
        best = x.topk(kmax, dim=-1).values if kmax < vocab else x.sort(dim=-1, descending=True).values
        k = torch.where(rows.top_k > 0, rows.top_k.clamp(max=kmax), torch.full_like(rows.top_k, kmax))
        x = x.masked_fill(x < best.gather(1, (k - 1).view(-1, 1)), float("-inf"))
    if rows.top_p_on:
        # drop the low tail whose cumulative probability stays <= 1 - top_p; keep the best token
        asc, order = x.sort(dim=-1)
        cum = asc.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1 - rows.top_p).view(-1, 1)
        drop[:, -1] = False
        x = x.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return x


# Two-stage top-k on the CPU from this many logits per call (rows x vocabulary): below it one `topk`
# is cheaper; above it torch's CPU `topk` slows sharply (measured: [16, 2048] k=50 took ~3.5x the
# two stages, [1, 2048] a third of them).
TWO_STAGE_MIN = 24_576
CHUNK_MEMBERS = 8


def top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=-1)` (sorted, best first) for [B, V] logits; the same values and, barring ties,
    the same indices. On the CPU, for large batches, in two cheaper stages: the vocabulary is cut into
    V/8 chunks (column c holds tokens c, c + V/8, ...), and every token of the top k lies in one of
    the k chunks with the largest maxima (a chunk whose maximum is below the k-th value holds none of
    the top k, and at most k chunks have a maximum at or above it); one `topk` over those k chunks'
    8k tokens then finds them."""
    b, v = x.shape
    s = CHUNK_MEMBERS
    if x.device.type != "cpu" or b * v < TWO_STAGE_MIN or v % s or v // s < k:
        return x.topk(k, dim=-1)
    w = v // s
    chunks = x.view(b, s, w)  # chunks[:, j, c] = token j * w + c
    ids = chunks.amax(1).topk(k, dim=-1, sorted=False).indices  # [B, k] chunk columns
    cand = chunks.gather(2, ids.unsqueeze(1).expand(b, s, k)).reshape(b, s * k)  # [B, j * k + i]
    vals, pos = cand.topk(k, dim=-1)
    return vals, ids.gather(1, pos % k) + (pos // k) * w


def _sample_top_k(logits: torch.Tensor, rows: SamplingRows, kmax: int, generator) -> torch.Tensor:
    """Draw among each row's top-k candidates only: temperature, noise and top-p over [B, kmax], not [B, V].
    Temperature after top-k: dividing by a positive number is monotonic in floating point too, so the
    top k of logits / T are the top k of the logits, divided (the same values; only tied ones may come
    in another order, as topk orders ties arbitrarily anyway)."""
    vals, idx = top_k(logits, kmax)  # sorted, best first
    vals = vals / rows.temperature_col()
    k = rows.k_index(kmax)
    # ties with the k-th value stay in, as transformers' `scores < kth` rule keeps them (within kmax)
    vals = vals.masked_fill(vals < vals.gather(1, k), float("-inf"))
    if rows.top_p_on:
        # keep the best tokens until the probability mass before a token reaches top_p
        before = vals.softmax(dim=-1).cumsum(dim=-1) - vals.softmax(dim=-1)
        drop = before >= rows.top_p.view(-1, 1)
        drop[:, 0] = False
        vals = vals.masked_fill(drop, float("-inf"))
    noise = torch.empty_like(vals).exponential_(1, generator=generator)
    return idx.gather(1, (vals - noise.log()).argmax(dim=-1, keepdim=True)).squeeze(1)


def sample(logits: torch.Tensor, rows: SamplingRows, generator: torch.Generator | None = None) -> torch.Tensor:
    """Processed logits [B, V] -> tokens [B] (long), on the device.

    Gumbel-max: argmax(x - log E) with E ~ Exp(1) is a draw from softmax(x), like gpt-fast's
    argmax(probs / E), without the softmax and without a host sync.
    """
    logits = logits.float()
    if rows.all_greedy:
        return logits.argmax(dim=-1)
    vocab = logits.shape[-1]
    if rows.kmax is not None and 0 < rows.kmax < vocab:
        sampled = _sample_top_k(logits, rows, rows.kmax, generator)
    else:
        noise = torch.empty_like(logits).exponential_(1, generator=generator)
        sampled = (warp(logits, rows) - noise.log()).argmax(dim=-1)
    if not rows.any_greedy:
        return sampled
    return torch.where(rows.greedy, logits.argmax(dim=-1), sampled)
