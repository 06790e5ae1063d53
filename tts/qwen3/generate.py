"""Step functions and the reference generation loop (one utterance, KV cache).

The step functions take a batch with per-row positions and cache rows, so the batched
engine schedules around these same functions:

* `prefill`: prompt embeddings -> last hidden state and codebook-0 logits;
* `predict_codes`: the code predictor's 2-token prefill + 14 steps -> a frame's 16 codes;
* `talker_step`: a frame's codes + its text-track embedding -> next hidden and logits;
* `decode_frame`: `predict_codes` + `talker_step` + codebook-0 processing and sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tts.qwen3.lean_predictor import lean_predictor
from tts.qwen3.model import Qwen3TTSModel, Talker
from tts.qwen3.prompt import Prompt
from tts.qwen3.sampling import SamplingRows, eos_mask, sample, talker_logits


def prepare_caches(model: Qwen3TTSModel, max_batch: int, max_seq_len: int) -> None:
    """The model's static caches, and the code predictor's lean plan over them, built now (eagerly: the
    plan's tables are kernels that must not run first inside a CUDA graph capture)."""
    model.setup_caches(max_batch, max_seq_len)
    lean_predictor(model.talker.code_predictor)


def prefill(
    talker: Talker, embeds: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompts [B, T, D] with real lengths [B] -> hidden, logits at each last real position.

    Padding writes cache columns past a prompt's end; decoding overwrites them before they are read.
    Attention reads the T columns being written only (a fresh sequence has nothing before them), causally
    and without a mask: every row starts at position 0.
    """
    b, t, _ = embeds.shape
    input_pos = torch.arange(t, device=embeds.device).expand(b, t)
    return talker(embeds, input_pos, rows, last=lengths - 1, kv_len=t, causal=True)


def predict_codes(
    talker: Talker,
    hidden: torch.Tensor,
    code0: torch.Tensor,
    rows_cfg: SamplingRows,
    generator: torch.Generator | None = None,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """hidden [B, D], codebook-0 tokens [B] -> all codes of the frame [B, G]."""
    cp = talker.code_predictor
    b = hidden.shape[0]
    g = cp.config.num_code_groups
    embeds = torch.stack([hidden, talker.embed_codec(code0)], dim=1)
    # every row is at the same predictor position: int positions (slices, no mask) unless rows are picked
    pos = (lambda p, t: p) if rows is None else (lambda p, t: torch.arange(p, p + t, device=hidden.device).expand(b, t))
    lean = lean_predictor(cp) if rows is None else None  # the same steps in fewer torch calls
    if lean is not None:
        codes = [code0, sample(lean.first(embeds), rows_cfg, generator)]
        for j in range(1, g - 1):
            codes.append(sample(lean.step(codes[-1], j), rows_cfg, generator))
        return torch.stack(codes, dim=1)
    codes = [code0, sample(cp.step(embeds, pos(0, 2), 0, rows), rows_cfg, generator)]
    tables = list(cp.model.codec_embedding)  # once: ModuleList indexing is slow next to these small steps
    for j in range(1, g - 1):
        e = tables[j - 1].forward(codes[-1]).unsqueeze(1)
        codes.append(sample(cp.step(e, pos(j + 1, 1), j, rows), rows_cfg, generator))
    return torch.stack(codes, dim=1)


def talker_step(
    talker: Talker,
    codes: torch.Tensor,
    text_embed: torch.Tensor,
    pos: torch.Tensor,
    rows: torch.Tensor | None = None,
    kv_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame codes [B, G] + text track [B, D] at positions pos [B] -> next hidden [B, D], logits [B, V].
    `kv_len`: cache columns attention reads (> every live row's position; default all)."""
    x = (talker.embed_frame(codes) + text_embed).unsqueeze(1)
    return talker(x, pos.view(-1, 1), rows, kv_len=kv_len)


@dataclass
class TalkerSampling:
    """Codebook-0 state per row: the settings and what the official processors need."""

    rows: SamplingRows  # with repetition_penalty
    seen: torch.Tensor  # [B, V] bool: codebook-0 tokens generated so far
    generated: torch.Tensor  # [B] long: how many codebook-0 tokens were sampled
    suppress: torch.Tensor  # [V] bool
    eos_id: int
    min_new_tokens: int = 2
    eos_col: torch.Tensor | None = None  # [V] bool `eos_mask`, built once (the batch's step passes it)
    eos_ok: torch.Tensor | None = None  # [B] bool: rows where end-of-speech may end the stream (turn mode holds it)
    active: torch.Tensor | None = None  # [B] bool: rows whose sampler state this token updates (others: paused)

    def next_token(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        eos = self.eos_id if self.eos_col is None else self.eos_col
        allowed = self.generated >= self.min_new_tokens
        if self.eos_ok is not None:
            allowed = allowed & self.eos_ok
        processed = talker_logits(logits, self.seen, self.rows.repetition_penalty, self.suppress, eos, allowed)
        tok = sample(processed, self.rows, generator)
        if self.active is None:
            self.seen.scatter_(1, tok.view(-1, 1), True)
            self.generated += 1
        else:
            self.seen |= torch.zeros_like(self.seen).scatter_(1, tok.view(-1, 1), True) & self.active.view(-1, 1)
            self.generated += self.active.long()
        return tok


def decode_frame(
    talker: Talker,
    hidden: torch.Tensor,
    code0: torch.Tensor,
    text_embed: torch.Tensor,
    pos: torch.Tensor,
    cb0: TalkerSampling,
    predictor_rows: SamplingRows,
    generator: torch.Generator | None = None,
    rows: torch.Tensor | None = None,
    kv_len: int | None = None,
    mark=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One frame for the batch: codes [B, G] of the current frame, next hidden, next codebook-0 token.

    `mark` (eager tracing): called with each stage's name as it ends ("code_predictor", "talker_step",
    "sampling"); None under graphs and in serving."""
    codes = predict_codes(talker, hidden, code0, predictor_rows, generator, rows)
    if mark is not None:
        mark("code_predictor")
    hidden, logits = talker_step(talker, codes, text_embed, pos, rows, kv_len)
    if mark is not None:
        mark("talker_step")
    tok = cb0.next_token(logits, generator)
    if mark is not None:
        mark("sampling")
    return codes, hidden, tok


# ---------------------------------------------------------------- reference loop
@dataclass
class GenerationSettings:
    greedy: bool = False
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_greedy: bool = False
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    min_new_tokens: int = 2
    max_frames: int = 2048
    seed: int | None = None
    record_logits: bool = False  # keep each step's raw codebook-0 logits (parity tests)


@dataclass
class GenerationResult:
    codes: torch.Tensor  # [frames, G] long (cpu)
    stopped_by_eos: bool
    prefill_s: float = 0.0
    decode_s: float = 0.0
    logits: list = field(default_factory=list)


def new_talker_sampling(model: Qwen3TTSModel, batch: int, s: GenerationSettings, device) -> TalkerSampling:
    cfg = model.config
    v = cfg.talker.vocab_size
    suppress = torch.zeros(v, dtype=torch.bool, device=device)
    suppress[cfg.suppressed_codec_ids] = True
    rows = SamplingRows.filled(
        batch,
        device,
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        greedy=s.greedy,
        repetition_penalty=1.0 if s.greedy else s.repetition_penalty,
    )
    return TalkerSampling(
        rows,
        torch.zeros(batch, v, dtype=torch.bool, device=device),
        torch.zeros(batch, dtype=torch.long, device=device),
        suppress,
        cfg.talker.codec_eos_token_id,
        s.min_new_tokens,
        eos_mask(v, cfg.talker.codec_eos_token_id, device),
    )


@torch.inference_mode()
def generate_codes(model: Qwen3TTSModel, prompt: Prompt, settings: GenerationSettings) -> GenerationResult:
    """One utterance: at most `max_frames` frames, ending at EOS. One host sync per frame (the EOS check).

    (Re)allocates the model's caches for one sequence when they are too small: do not share a model
    with a running engine.
    """
    import time

    talker = model.talker
    device = talker.codec_head.weight.device
    total = prompt.prefill.shape[0] + settings.max_frames + 1
    if talker.model.max_seq_len < total or talker.model.layers[0].self_attn.kv_cache is None:
        prepare_caches(model, 1, total)
    gen = None
    if settings.seed is not None:
        gen = torch.Generator(device=device).manual_seed(settings.seed)
    cb0 = new_talker_sampling(model, 1, settings, device)
    pred_rows = SamplingRows.filled(
        1,
        device,
        temperature=settings.subtalker_temperature,
        top_k=settings.subtalker_top_k,
        top_p=settings.subtalker_top_p,
        greedy=settings.subtalker_greedy,
    )
    t0 = time.perf_counter()
    length = prompt.prefill.shape[0]
    hidden, logits = prefill(talker, prompt.prefill.unsqueeze(0), torch.tensor([length], device=device))
    recorded = [logits.float().cpu()] if settings.record_logits else []
    tok = cb0.next_token(logits, gen)
    eos = talker.config.codec_eos_token_id
    n_text = prompt.trailing_text.shape[0]
    frames: list[torch.Tensor] = []
    stopped = False
    t1 = time.perf_counter()
    for step in range(settings.max_frames):
        if int(tok.item()) == eos:  # the one host sync per frame
            stopped = True
            break
        codes = predict_codes(talker, hidden, tok, pred_rows, gen)
        frames.append(codes)
        if step + 1 >= settings.max_frames:
            break
        text = prompt.trailing_text[step] if step < n_text else prompt.pad
        hidden, logits = talker_step(talker, codes, text.unsqueeze(0), torch.tensor([length + step], device=device))
        if settings.record_logits:
            recorded.append(logits.float().cpu())
        tok = cb0.next_token(logits, gen)
    t2 = time.perf_counter()
    g = talker.config.num_code_groups
    codes = torch.cat(frames).cpu() if frames else torch.zeros((0, g), dtype=torch.long)
    return GenerationResult(codes=codes, stopped_by_eos=stopped, prefill_s=t1 - t0, decode_s=t2 - t1, logits=recorded)
