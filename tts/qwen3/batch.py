"""Device-side state of a continuous batch: fixed slots over static KV caches.

Each slot is one sequence at its own position. `admit` prefills new prompts into free
slots (batched, right-padded) and samples their first codebook-0 token; `step` runs
one frame for slots 0..n-1 with the same step functions as the reference loop
(`generate.decode_frame`) and leaves the frame's codes and the next tokens in one
output buffer, which the host reads with a single copy. Inactive slots inside the
bucket compute and are ignored; their positions stay put.

On CUDA, `step` for each batch bucket is captured once as a CUDA graph (the talker
step, the 15-step code predictor loop and sampling) and replayed.
"""

from __future__ import annotations

import torch

from tts.qwen3.generate import TalkerSampling, decode_frame, predict_codes, prefill, talker_step
from tts.qwen3.model import Qwen3TTSModel
from tts.qwen3.prompt import Prompt
from tts.qwen3.sampling import SamplingRows

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


class TalkerBatch:
    def __init__(self, model: Qwen3TTSModel, max_batch: int, max_seq_len: int, *, use_cuda_graphs: bool | None = None,
                 buckets: tuple[int, ...] = DEFAULT_BUCKETS, generator: torch.Generator | None = None):
        self.model = model
        talker = model.talker
        p = talker.codec_head.weight
        self.device, self.dtype = p.device, p.dtype
        cfg = model.config
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        self.groups = cfg.talker.num_code_groups
        model.setup_caches(max_batch, max_seq_len)
        d, dev, b = cfg.talker.hidden_size, self.device, max_batch
        self.hidden = torch.zeros(b, d, dtype=self.dtype, device=dev)
        self.code0 = torch.zeros(b, dtype=torch.long, device=dev)
        self.pos = torch.zeros(b, dtype=torch.long, device=dev)
        self.frame = torch.zeros(b, dtype=torch.long, device=dev)  # frames generated (text-track index)
        self.active = torch.zeros(b, dtype=torch.bool, device=dev)
        # Text track per frame: the non-streaming layout only ever adds tts_pad; streaming prompts keep
        # their remaining text here (rows of up to `trailing_capacity`).
        self.trailing_capacity = 1
        self.trailing = torch.zeros(b, 1, d, dtype=self.dtype, device=dev)
        self.trailing_len = torch.zeros(b, dtype=torch.long, device=dev)
        self.pad = torch.zeros(d, dtype=self.dtype, device=dev)
        v = cfg.talker.vocab_size
        suppress = torch.zeros(v, dtype=torch.bool, device=dev)
        suppress[cfg.suppressed_codec_ids] = True
        self.cb0 = TalkerSampling(SamplingRows.filled(b, dev, repetition_penalty=1.05),
                                  torch.zeros(b, v, dtype=torch.bool, device=dev),
                                  torch.zeros(b, dtype=torch.long, device=dev), suppress, cfg.talker.codec_eos_token_id)
        self.pred_rows = SamplingRows.filled(b, dev)
        self.out = torch.zeros(b, self.groups + 1, dtype=torch.long, device=dev)  # codes + next codebook-0 token
        self.generator = generator
        self.buckets = tuple(sorted({x for x in buckets if x < max_batch} | {max_batch}))
        self.use_cuda_graphs = (dev.type == "cuda") if use_cuda_graphs is None else use_cuda_graphs
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self.stage_marks = None  # eager tracing: called with a stage name after each stage
        self.last_launch_s = 0.0  # time spent issuing the last step (the rest of `step` is the host sync)

    # -- admission ------------------------------------------------------
    def ensure_trailing(self, length: int) -> None:
        if length > self.trailing_capacity:
            grown = torch.zeros(self.max_batch, length, self.trailing.shape[-1], dtype=self.dtype, device=self.device)
            grown[:, : self.trailing_capacity] = self.trailing
            self.trailing, self.trailing_capacity = grown, length
            self._graphs.clear()  # captured graphs read the old buffer

    @torch.inference_mode()
    def admit(self, slots: list[int], prompts: list[Prompt], talker_settings: list[dict], predictor_settings: list[dict],
              resumes: list | None = None) -> None:
        """Prefill `prompts` into `slots` and sample each one's first codebook-0 token (no host sync).

        A `resumes` entry (next codebook-0 token, codes [n, G] so far) marks a sequence coming back after
        preemption: its prompt already holds its n frames, and its sampler state is rebuilt from them.
        """
        dev = self.device
        idx = torch.tensor(slots, dtype=torch.long, device=dev)
        lengths = [p.prefill.shape[0] for p in prompts]
        t = max(lengths)
        embeds = torch.zeros(len(slots), t, self.hidden.shape[-1], dtype=self.dtype, device=dev)
        for i, p in enumerate(prompts):
            embeds[i, : lengths[i]] = p.prefill.to(self.dtype)
        self.ensure_trailing(max(p.trailing_text.shape[0] for p in prompts))
        keys = (self.cb0.rows.shape_key, self.pred_rows.shape_key)
        for slot, p, ts, ps in zip(slots, prompts, talker_settings, predictor_settings):
            self.cb0.rows.set_row(slot, **ts)
            self.pred_rows.set_row(slot, **ps)
            n = p.trailing_text.shape[0]
            if n:
                self.trailing[slot, :n] = p.trailing_text.to(self.dtype)
            self.trailing_len[slot] = n
        if (self.cb0.rows.shape_key, self.pred_rows.shape_key) != keys:
            self._graphs.clear()  # top-k / top-p shapes changed: recapture on next use
        self.pad.copy_(prompts[0].pad.to(self.dtype))
        self.cb0.seen[idx] = False
        self.cb0.generated[idx] = 0
        length_t = torch.tensor(lengths, dtype=torch.long, device=dev)
        hidden, logits = prefill(self.model.talker, embeds, length_t, rows=idx)
        sub = TalkerSampling(self.cb0.rows.index(idx), self.cb0.seen[idx], self.cb0.generated[idx], self.cb0.suppress,
                             self.cb0.eos_id, self.cb0.min_new_tokens)
        tok = sub.next_token(logits, self.generator)
        self.cb0.seen[idx] = sub.seen
        self.cb0.generated[idx] = sub.generated
        self.hidden[idx] = hidden
        self.code0[idx] = tok
        self.pos[idx] = length_t
        self.frame[idx] = 0
        for slot, resume in zip(slots, resumes or []):
            if resume is None:
                continue
            next_code0, codes = resume
            seen = torch.tensor(list(codes[:, 0]) + [next_code0], dtype=torch.long, device=dev)
            self.code0[slot] = next_code0
            self.cb0.seen[slot] = False
            self.cb0.seen[slot, seen] = True
            self.cb0.generated[slot] = len(codes) + 1
            self.frame[slot] = len(codes)
        self.active[idx] = True

    def release(self, slot: int) -> None:
        self.active[slot] = False

    # -- one frame --------------------------------------------------------
    def bucket_for(self, n_rows: int) -> int:
        for b in self.buckets:
            if b >= n_rows:
                return b
        return self.max_batch

    def _step_rows(self, n: int) -> None:
        """One frame for slots 0..n-1; results in self.out[:n]. Pure device work (graph-capturable)."""
        talker = self.model.talker
        d = self.hidden.shape[-1]
        frame = self.frame[:n]
        at = frame.clamp(max=self.trailing_capacity - 1).view(n, 1, 1).expand(n, 1, d)
        text = torch.where((frame < self.trailing_len[:n]).view(n, 1), self.trailing[:n].gather(1, at).squeeze(1),
                           self.pad.expand(n, d))
        cb0 = TalkerSampling(self.cb0.rows.slice(n), self.cb0.seen[:n], self.cb0.generated[:n], self.cb0.suppress,
                             self.cb0.eos_id, self.cb0.min_new_tokens)
        pos = self.pos[:n]
        gen = self.generator if not self.use_cuda_graphs else None
        if self.stage_marks is None:
            codes, hidden, tok = decode_frame(talker, self.hidden[:n], self.code0[:n], text, pos, cb0,
                                              self.pred_rows.slice(n), gen)
        else:  # eager, traced: the same three stages as decode_frame, timed one by one
            mark = self.stage_marks
            codes = predict_codes(talker, self.hidden[:n], self.code0[:n], self.pred_rows.slice(n), gen)
            mark("code_predictor")
            hidden, logits = talker_step(talker, codes, text, pos)
            mark("talker_step")
            tok = cb0.next_token(logits, gen)
            mark("sampling")
        act = self.active[:n]
        self.hidden[:n] = hidden
        self.code0[:n] = tok
        self.pos[:n] = torch.where(act, pos + 1, pos)
        self.frame[:n] = torch.where(act, frame + 1, frame)
        self.out[:n, : self.groups] = codes
        self.out[:n, self.groups] = tok

    @torch.inference_mode()
    def step(self, n_rows: int) -> torch.Tensor:
        """Run one frame for the smallest bucket covering slots 0..n_rows-1; returns out[:n] on the host
        (the step's one device->host copy): codes [n, G] and the next codebook-0 token [n]."""
        import time

        n = self.bucket_for(n_rows)
        t0 = time.perf_counter()
        if self.use_cuda_graphs:
            graph = self._graphs.get(n) or self._capture(n)
            graph.replay()
        else:
            self._step_rows(n)
        self.last_launch_s = time.perf_counter() - t0
        return self.out[:n_rows].cpu()

    def _capture(self, n: int) -> "torch.cuda.CUDAGraph":
        # Warm up on a side stream (allocator, kernels), then capture. Capturing runs the step once for
        # slots 0..n-1: snapshot and restore the state the step mutates so capture has no effect.
        saved = [t.clone() for t in self._mutable()]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self._step_rows(n)
        torch.cuda.current_stream().wait_stream(s)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._step_rows(n)
        for t, v in zip(self._mutable(), saved):
            t.copy_(v)
        self._graphs[n] = graph
        return graph

    def _mutable(self) -> list[torch.Tensor]:
        return [self.hidden, self.code0, self.pos, self.frame, self.cb0.seen, self.cb0.generated]

    def capture_all(self, max_rows: int | None = None) -> None:
        """Capture graphs for every bucket up front (start-up cost instead of first-request latency)."""
        if not self.use_cuda_graphs:
            return
        with torch.inference_mode():
            for b in self.buckets:
                if max_rows is not None and b > self.bucket_for(max_rows):
                    break
                if b not in self._graphs:
                    self._capture(b)
