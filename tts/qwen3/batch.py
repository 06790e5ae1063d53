"""Device-side state of a continuous batch: fixed slots over static KV caches.

Each slot is one sequence at its own position. `admit` prefills new prompts into free
slots (batched, right-padded) and samples their first codebook-0 token; `step` runs
one frame for slots 0..n-1 with the same step functions as the reference loop
(`generate.decode_frame`) and leaves the frame's codes and the next tokens in one
output buffer, which the host reads with a single copy. Inactive slots inside the
bucket compute and are ignored; their positions stay put.

Attention reads only the cache columns live rows can use: the host knows every slot's position, so
each step picks the smallest length bucket above the longest live one (`kv_len`). On CUDA, `step`
for each (batch bucket, length bucket) is captured once as a CUDA graph (the talker step, the
15-step code predictor loop and sampling), all at start, on the stream the warm-up ran on, and
replayed. Graphs run one sampling layout that serves every request's settings (see
`SamplingRows.general`), so no request re-captures in traffic.

The step's results go to a host buffer with one non-blocking copy; `read` is the one wait.
Admission and release write no Python scalar into a device element or through a tensor index (on CUDA
both copy the scalar from the host with a stream sync): per-row values travel in one staged, non-blocking
copy (`tts.qwen3.staging`), constants go in by `index_fill_` / `narrow().fill_()` (a kernel argument).

Graphs read the text-track buffer by address, so under graphs it never grows once a graph exists:
`reserve_trailing` sizes it for the longest text the engine reads before `capture_all`, and a longer
prompt keeps what fits (no recapture in traffic). Captures run inside `capture_gate.capture()`; the
engine's other threads that touch CUDA (the vocoder lane, voice cloning) run inside `use()`, so
nothing else calls into CUDA while a stream is capturing (tts.qwen3.gate).
"""

from __future__ import annotations

import logging

import torch

from tts.qwen3.attention import refused, talker_pinned
from tts.qwen3.gate import CaptureGate
from tts.qwen3.generate import TalkerSampling, decode_frame, prefill, prepare_caches
from tts.qwen3.model import Qwen3TTSModel
from tts.qwen3.prompt import Prompt
from tts.qwen3.sampling import SamplingRows, eos_mask
from tts.qwen3.staging import Staged
from tts.qwen3.transfers import host_buffer

log = logging.getLogger("voxgate.qwen3")

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512)
KV_BUCKET = 128  # cache columns are read in multiples of this (and the longest bucket: max_seq_len)
PREFILL_BUCKET = 16  # prompt lengths are padded to a multiple of this (fewer shapes: kernels, SDPA plans)


def kv_buckets(max_seq_len: int, step: int = KV_BUCKET) -> tuple[int, ...]:
    """Length buckets: multiples of `step` below max_seq_len, then max_seq_len."""
    return tuple(range(step, max_seq_len, step)) + (max_seq_len,)


class TalkerBatch:
    def __init__(
        self,
        model: Qwen3TTSModel,
        max_batch: int,
        max_seq_len: int,
        *,
        use_cuda_graphs: bool | None = None,
        buckets: tuple[int, ...] = DEFAULT_BUCKETS,
        generator: torch.Generator | None = None,
        kv_step: int = KV_BUCKET,
        live_lengths: bool = True,
    ):
        self.model = model
        talker = model.talker
        p = talker.codec_head.weight
        self.device, self.dtype = p.device, p.dtype
        cfg = model.config
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        self.groups = cfg.talker.num_code_groups
        prepare_caches(model, max_batch, max_seq_len)
        d, dev, b = cfg.talker.hidden_size, self.device, max_batch
        self.hidden = torch.zeros(b, d, dtype=self.dtype, device=dev)
        self.code0 = torch.zeros(b, dtype=torch.long, device=dev)
        self.pos = torch.zeros(b, dtype=torch.long, device=dev)
        self.frame = torch.zeros(b, dtype=torch.long, device=dev)  # frames generated (text-track index)
        self.active = torch.zeros(b, dtype=torch.bool, device=dev)
        # Text track per frame: the non-streaming layout only ever adds tts_pad; streaming prompts keep
        # their remaining text here (rows of up to `trailing_capacity`; see `reserve_trailing`).
        self.trailing_capacity = 1
        self.trailing = torch.zeros(b, 1, d, dtype=self.dtype, device=dev)
        self.trailing_len = torch.zeros(b, dtype=torch.long, device=dev)
        self.eos_at = torch.zeros(b, dtype=torch.long, device=dev)  # frame from which EOS may end a row (turn mode)
        self.pad = torch.zeros(d, dtype=self.dtype, device=dev)
        v = cfg.talker.vocab_size
        suppress = torch.zeros(v, dtype=torch.bool, device=dev)
        suppress[cfg.suppressed_codec_ids] = True
        self.use_cuda_graphs = (dev.type == "cuda") if use_cuda_graphs is None else use_cuda_graphs
        # one layout for every request under graphs; eager picks the cheapest layout for the rows it has
        general = self.use_cuda_graphs
        self.cb0 = TalkerSampling(
            SamplingRows.filled(b, dev, repetition_penalty=1.05, general=general),
            torch.zeros(b, v, dtype=torch.bool, device=dev),
            torch.zeros(b, dtype=torch.long, device=dev),
            suppress,
            cfg.talker.codec_eos_token_id,
            eos_col=eos_mask(v, cfg.talker.codec_eos_token_id, dev),
        )
        self.pred_rows = SamplingRows.filled(b, dev, general=general)
        self.out = torch.zeros(b, self.groups + 1, dtype=torch.long, device=dev)  # codes + next codebook-0 token
        cuda = dev.type == "cuda"
        self.host_out = host_buffer(torch.zeros(b, self.groups + 1, dtype=torch.long, pin_memory=cuda))
        self._out_ready = None  # CUDA event after the host copy of the last step
        self.generator = generator
        self.buckets = tuple(sorted({x for x in buckets if x < max_batch} | {max_batch}))
        self.kv_buckets = kv_buckets(max_seq_len, kv_step) if live_lengths else (max_seq_len,)
        # host mirror of each slot's position (the next cache column it writes) and of `active`
        self.host_pos = [0] * max_batch
        self.host_active = [False] * max_batch
        self.host_wide = [False] * max_batch  # the row needs the whole-vocabulary sampling layout
        self._graphs: dict[tuple[int, int, bool], torch.cuda.CUDAGraph] = {}  # (batch, kv_len, wide)
        self.capture_gate = CaptureGate()  # a capture is exclusive of the engine's other CUDA threads
        self.captures = 0  # graphs captured so far (a capture in traffic is a multi-second stall)
        self._pool = None
        self._stream = None  # CUDA: the stream warm-up and capture run on, and replays go to
        self.sdpa_backends: dict = {}  # (batch bucket, kv bucket) -> backend pinned at capture (CUDA)
        self.prefill_backend = None  # the prefill's pinned backends (CUDA: attention.prefill_backend)
        self.last_kv_len = 0
        self.stage_marks = None  # eager tracing: called with a stage name after each stage
        self.last_launch_s = 0.0  # time spent issuing the last step (the rest of `step` is the host sync)

    # -- admission ------------------------------------------------------
    def reserve_trailing(self, length: int) -> None:
        """Room for `length` text-track rows per slot. Under graphs, call it before any capture (the
        engine: the longest text a request can read, `min(max_frames, max_seq_len)`)."""
        if length <= self.trailing_capacity:
            return
        if self._graphs:
            raise RuntimeError("the text track cannot grow under captured graphs: reserve it before capture_all()")
        grown = torch.zeros(self.max_batch, length, self.trailing.shape[-1], dtype=self.dtype, device=self.device)
        grown[:, : self.trailing_capacity] = self.trailing
        self.trailing, self.trailing_capacity = grown, length

    def _text_rows(self, n: int) -> int:
        """How many of a prompt's n text-track rows the batch holds: eager grows to fit; with graphs the
        buffer is fixed and rows past it are dropped (frames that far are never generated: see above)."""
        if n > self.trailing_capacity and not self._graphs:
            self.reserve_trailing(n)
        return min(n, self.trailing_capacity)

    @torch.inference_mode()
    def admit(
        self,
        slots: list[int],
        prompts: list[Prompt],
        talker_settings: list[dict],
        predictor_settings: list[dict],
        resumes: list | None = None,
    ) -> None:
        """Prefill `prompts` into `slots` and sample each one's first codebook-0 token (no host sync).

        A `resumes` entry (next codebook-0 token, codes [n, G] so far) marks a sequence coming back after
        preemption: its prompt already holds its n frames, and its sampler state is rebuilt from them.
        """
        dev = self.device
        lengths = [p.prefill.shape[0] for p in prompts]
        t = min(-(-max(lengths) // PREFILL_BUCKET) * PREFILL_BUCKET, self.max_seq_len)
        embeds = torch.zeros(len(slots), t, self.hidden.shape[-1], dtype=self.dtype, device=dev)
        for i, p in enumerate(prompts):
            embeds[i, : lengths[i]] = p.prefill.to(self.dtype)
        texts = [self._text_rows(p.trailing_text.shape[0]) for p in prompts]
        keys = (self.cb0.rows.shape_key, self.pred_rows.shape_key)
        # every per-row host value of this admission, in one staged copy
        staged = Staged()
        at_slots, at_lengths, at_texts = staged.add(slots), staged.add(lengths), staged.add(texts)
        at_cb0 = [staged.add(c) for c in self.cb0.rows.columns(talker_settings)]
        at_pred = [staged.add(c) for c in self.pred_rows.columns(predictor_settings)]
        back = [(slot, r) for slot, r in zip(slots, resumes or []) if r is not None]
        if back:  # resumed rows: next codebook-0 token, tokens generated, frames; the tokens seen so far
            at_code0 = staged.add(int(r[0]) for _, r in back)
            at_gen = staged.add(len(r[1]) + 1 for _, r in back)
            at_frame = staged.add(len(r[1]) for _, r in back)
            at_rslots = staged.add(slot for slot, _ in back)
            seen_pairs = [(slot, int(tok)) for slot, (nxt, codes) in back for tok in [*codes[:, 0], nxt]]
            at_seen_rows = staged.add(slot for slot, _ in seen_pairs)
            at_seen_toks = staged.add(tok for _, tok in seen_pairs)
        vals = staged.send(dev)
        idx, length_t = vals[at_slots].long(), vals[at_lengths].long()
        self.cb0.rows.write(idx, torch.stack([vals[c] for c in at_cb0]))
        self.pred_rows.write(idx, torch.stack([vals[c] for c in at_pred]))
        for ts, ps in zip(talker_settings, predictor_settings):
            self.cb0.rows.note(**ts)
            self.pred_rows.note(**ps)
        for slot, p, n in zip(slots, prompts, texts):
            if n:
                self.trailing[slot, :n] = p.trailing_text[:n].to(self.dtype)
        self.trailing_len.index_copy_(0, idx, vals[at_texts].long())
        if (self.cb0.rows.shape_key, self.pred_rows.shape_key) != keys and self._graphs:
            raise RuntimeError("sampling layout changed under captured graphs")  # `general` rows never change
        self.pad.copy_(prompts[0].pad.to(self.dtype))
        # index_fill_ passes the value as a kernel argument: `t[idx] = 0` would copy it from the host (a sync)
        self.cb0.seen.index_fill_(0, idx, False)
        self.cb0.generated.index_fill_(0, idx, 0)
        self.eos_at.index_fill_(0, idx, 0)
        with talker_pinned(self.model.talker, self.prefill_backend):
            hidden, logits = prefill(self.model.talker, embeds, length_t, rows=idx)
        sub = TalkerSampling(
            self.cb0.rows.index(idx),
            self.cb0.seen[idx],
            self.cb0.generated[idx],
            self.cb0.suppress,
            self.cb0.eos_id,
            self.cb0.min_new_tokens,
            self.cb0.eos_col,
        )
        tok = sub.next_token(logits, self.generator)
        self.cb0.seen.index_copy_(0, idx, sub.seen)
        self.cb0.generated.index_copy_(0, idx, sub.generated)
        self.hidden.index_copy_(0, idx, hidden)
        self.code0.index_copy_(0, idx, tok)
        self.pos.index_copy_(0, idx, length_t)
        self.frame.index_fill_(0, idx, 0)
        if back:  # a resumed row's sampler state, rebuilt from its codes
            ridx = vals[at_rslots].long()
            self.code0.index_copy_(0, ridx, vals[at_code0].long())
            self.cb0.generated.index_copy_(0, ridx, vals[at_gen].long())
            self.frame.index_copy_(0, ridx, vals[at_frame].long())
            self.cb0.seen.index_fill_(0, ridx, False)
            seen_rows = vals[at_seen_rows].long()
            self.cb0.seen.index_put_(
                (seen_rows, vals[at_seen_toks].long()), torch.ones_like(seen_rows, dtype=torch.bool)
            )  # values made on the device
        self.active.index_fill_(0, idx, True)
        for slot, n, ts, ps in zip(slots, lengths, talker_settings, predictor_settings):
            self.host_pos[slot], self.host_active[slot] = n, True
            self.host_wide[slot] = self.cb0.rows.needs_wide(ts["top_k"]) or self.pred_rows.needs_wide(ps["top_k"])

    # -- turn mode: a row's text track grows, the row pauses while its next text row is missing
    def set_active(self, slot: int, on: bool) -> None:
        self.active.narrow(0, slot, 1).fill_(on)
        self.host_active[slot] = on

    def set_eos_at(self, slot: int, frame: int) -> None:
        self.eos_at.narrow(0, slot, 1).fill_(frame)

    @torch.inference_mode()
    def write_text(self, slot: int, start: int, rows: torch.Tensor) -> None:
        """Text-track rows [k, D] at start..start+k-1 of `slot` (the caller keeps within `trailing_capacity`
        under graphs; eager grows)."""
        end = start + rows.shape[0]
        if end > self.trailing_capacity and not self._graphs:
            self.reserve_trailing(end)
        if end > self.trailing_capacity:
            raise RuntimeError(f"text track full ({self.trailing_capacity} rows)")
        self.trailing[slot, start:end] = rows.to(self.dtype)
        self.trailing_len.narrow(0, slot, 1).fill_(end)

    def release(self, slot: int) -> None:
        self.active.narrow(0, slot, 1).fill_(False)  # a device fill: `active[slot] = False` copies from the host
        self.host_active[slot] = False

    def kv_len_for(self, n: int) -> int:
        """Smallest length bucket covering the positions live rows of 0..n-1 attend to this step."""
        need = max((self.host_pos[s] + 1 for s in range(n) if self.host_active[s]), default=1)
        for b in self.kv_buckets:
            if b >= need:
                return b
        return self.max_seq_len

    @torch.inference_mode()
    def move(self, src: int, dst: int) -> None:
        """Move the sequence in slot `src` to the free slot `dst` (compaction: live rows at the bottom,
        so the batch bucket follows the number of live streams). Device copies only, no sync."""
        for dec in (self.model.talker.model,):
            for layer in dec.layers:
                kv = layer.self_attn.kv_cache
                kv.k_cache[dst].copy_(kv.k_cache[src])
                kv.v_cache[dst].copy_(kv.v_cache[src])
        for t in (
            self.hidden,
            self.code0,
            self.pos,
            self.frame,
            self.active,
            self.trailing,
            self.trailing_len,
            self.eos_at,
            self.cb0.seen,
            self.cb0.generated,
            *self.cb0.rows.tensors(),
            *self.pred_rows.tensors(),
        ):
            t[dst].copy_(t[src])
        self.active.narrow(0, src, 1).fill_(False)
        self.host_pos[dst], self.host_active[dst] = self.host_pos[src], self.host_active[src]
        self.host_wide[dst] = self.host_wide[src]
        self.host_active[src] = False

    # -- one frame --------------------------------------------------------
    def bucket_for(self, n_rows: int) -> int:
        for b in self.buckets:
            if b >= n_rows:
                return b
        return self.max_batch

    def _step_rows(self, n: int, kv_len: int | None = None, wide: bool = False) -> None:
        """One frame for slots 0..n-1; results in self.out[:n]. Pure device work (graph-capturable)."""
        talker = self.model.talker
        d = self.hidden.shape[-1]
        frame = self.frame[:n]
        at = frame.clamp(max=self.trailing_capacity - 1).view(n, 1, 1).expand(n, 1, d)
        text = torch.where(
            (frame < self.trailing_len[:n]).view(n, 1),
            self.trailing[:n].gather(1, at).squeeze(1),
            self.pad.expand(n, d),
        )
        rows0, rows_p = self.cb0.rows.slice(n), self.pred_rows.slice(n)
        if wide:
            rows0, rows_p = rows0.wide(), rows_p.wide()
        act = self.active[:n]
        cb0 = TalkerSampling(
            rows0,
            self.cb0.seen[:n],
            self.cb0.generated[:n],
            self.cb0.suppress,
            self.cb0.eos_id,
            self.cb0.min_new_tokens,
            self.cb0.eos_col,
            eos_ok=frame >= self.eos_at[:n],
            active=act,
        )
        pos = self.pos[:n]
        gen = self.generator if not self.use_cuda_graphs else None
        codes, hidden, tok = decode_frame(
            talker, self.hidden[:n], self.code0[:n], text, pos, cb0, rows_p, gen, kv_len=kv_len, mark=self.stage_marks
        )  # marks: eager tracing only
        # an inactive row (released, or a turn paused for its text) keeps its state for when it resumes
        self.hidden[:n] = torch.where(act.view(n, 1), hidden, self.hidden[:n])
        self.code0[:n] = torch.where(act, tok, self.code0[:n])
        self.pos[:n] = torch.where(act, pos + 1, pos)
        self.frame[:n] = torch.where(act, frame + 1, frame)
        self.out[:n, : self.groups] = codes
        self.out[:n, self.groups] = tok

    @torch.inference_mode()
    def launch(self, n_rows: int) -> int:
        """Issue one frame for the smallest bucket covering slots 0..n_rows-1 and a non-blocking copy of
        its results to the host; returns the bucket. `read` waits for them."""
        import time

        n = self.bucket_for(n_rows)
        kv_len = self.kv_len_for(n)
        wide = any(self.host_wide[s] and self.host_active[s] for s in range(n))
        self.last_kv_len = kv_len
        t0 = time.perf_counter()
        if self.use_cuda_graphs:
            graph = self._graphs.get((n, kv_len, wide)) or self._capture_gated(n, kv_len, wide)
            main = torch.cuda.current_stream()
            self._stream.wait_stream(main)  # admissions (prefill) ran on the main stream
            with torch.cuda.stream(self._stream):
                graph.replay()
                self.host_out[:n].copy_(self.out[:n], non_blocking=True)
                self._out_ready = torch.cuda.Event()
                self._out_ready.record()
            main.wait_stream(self._stream)  # the next admission writes what this step reads
        else:
            self._step_rows(n, kv_len, wide)
            self.host_out[:n].copy_(self.out[:n], non_blocking=self.device.type == "cuda")
            if self.device.type == "cuda":
                self._out_ready = torch.cuda.Event()
                self._out_ready.record()
        for s in range(n):
            if self.host_active[s]:
                self.host_pos[s] += 1
        self.last_launch_s = time.perf_counter() - t0
        return n

    def read(self, n_rows: int):
        """Wait for the last launched step (the step's one host sync) -> its codes and next codebook-0
        tokens for slots 0..n_rows-1 as a host array [n, G + 1] (valid until the next launch)."""
        from tts.qwen3.syncs import wait_for

        wait_for(self._out_ready)
        return self.host_out[:n_rows].numpy()

    def step(self, n_rows: int) -> torch.Tensor:
        """launch + read: out[:n_rows] on the host (codes [n, G] and the next codebook-0 token [n])."""
        self.launch(n_rows)
        return torch.from_numpy(self.read(n_rows).copy())

    def _capture_gated(self, n: int, kv_len: int, wide: bool = False) -> "torch.cuda.CUDAGraph":
        """A graph missing at launch (benches that capture some buckets only): captured now, gated."""
        with self.capture_gate.capture():
            return self._capture(n, kv_len, wide)

    def _capture(self, n: int, kv_len: int, wide: bool = False) -> "torch.cuda.CUDAGraph":
        # Warm up on the capture stream (allocator, kernels, SDPA plans), then capture on that same
        # stream. Capturing runs the step once for slots 0..n-1: snapshot and restore the state the step
        # mutates so capture has no effect.
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        saved = [t.clone() for t in self._mutable()]
        s = self._stream
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            backend = self._warm_up(n, kv_len, wide)
            s.synchronize()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, stream=s), talker_pinned(self.model.talker, backend):
                self._step_rows(n, kv_len, wide)
            for t, v in zip(self._mutable(), saved):
                t.copy_(v)
        s.synchronize()
        self._graphs[(n, kv_len, wide)] = graph
        self.captures += 1
        return graph

    def _warm_up(self, n: int, kv_len: int, wide: bool) -> str | None:
        """Two eager steps (allocator, kernels, SDPA plans) with the talker's attention under the backend
        chosen for this shape (tts.qwen3.attention); returns the backend to capture under. One that
        refuses the step's real tensors is dropped for torch's own choice here, before the capture,
        where a refusal could not be undone. The step's state changes: the caller restores it."""
        backend = self.sdpa_backends.get((n, kv_len))
        if backend is not None:
            try:
                with talker_pinned(self.model.talker, backend):
                    for _ in range(2):
                        self._step_rows(n, kv_len, wide)
                return backend
            except RuntimeError as e:  # "No available kernel" for these views / this mask
                if not refused(e):
                    raise  # a bug in the step, not the backend's refusal
                log.warning(
                    "SDPA %s refuses the step at batch %d, kv_len %d (%s): torch's choice instead",
                    backend,
                    n,
                    kv_len,
                    (str(e).splitlines() or [""])[0][:200],
                )
                self.sdpa_backends[(n, kv_len)] = None
        for _ in range(2):
            self._step_rows(n, kv_len, wide)
        return None

    def _mutable(self) -> list[torch.Tensor]:
        return [self.hidden, self.code0, self.pos, self.frame, self.cb0.seen, self.cb0.generated]

    def capture_all(self, max_rows: int | None = None) -> int:
        """Capture graphs for every (batch bucket, length bucket) up front (start-up cost instead of
        first-request latency); returns how many exist."""
        if not self.use_cuda_graphs:
            return 0
        with torch.inference_mode(), self.capture_gate.capture():
            for b in self.buckets:
                if max_rows is not None and b > self.bucket_for(max_rows):
                    break
                for kv_len in self.kv_buckets:
                    for wide in (False, True):
                        if (b, kv_len, wide) not in self._graphs:
                            self._capture(b, kv_len, wide)
        return len(self._graphs)
