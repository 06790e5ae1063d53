"""The GPU check: one driver, phases with their own time budgets, a table row as each phase ends, JSON after
each phase.

    python -m bench.gpu_check --out DIR            # on a lent GPU machine (scripts/gpu_check.sh)
    python -m bench.gpu_check --smoke --out DIR    # tiny shapes on CPU: the driver's logic, end to end

Needs Python, torch (CUDA build), numpy, safetensors, tokenizers and this tree: nothing else, nothing
installed. Released shapes with random weights (no checkpoint, no internet), 1.7B first, then 0.6B:

(a) environment; the SDPA backend chosen per (batch bucket, length bucket) with every backend's time;
    the code predictor's lean steps against its module path;
(b) CUDA graphs against eager on identical inputs (greedy, buckets 1/8/64/384, 20 steps: codes equal,
    max hidden-state difference), and for every length bucket serving uses, the pinned/captured step's
    logits against the eager step's (torch's own kernel choice) on the device: a mismatch fails the
    phase. Which SDPA kernel ran for the talker's decode, from the profiler (op and kernel names),
    loudly when it is MATH;
(c) ms per step by batch bucket at a short and a long cache length (positions reset before every
    repetition, so each row is timed at the length its kv column names, with no capture inside the
    timed loop), prefill ms, vocoder ms by batch x packet for the backends this machine can run (the
    others are named with the reason);
(d) real syncs per step: the engine with its op watch, and the driver's own count
    (`torch.cuda.set_sync_debug_mode`) over the same run;
(e) Poisson arrivals holding 64/128/256/384 streams, stopping at the first level that fails (a stream
    falling behind real time, or first audio p95 over 250 ms).

Budget: `--budget` seconds in all (default 240, counted from the driver's start, imports included; the
script's hard kill is 45 s later), split per model and phase by `budget_plan`, model construction included;
each phase checks what it has left before its expensive part (an engine of 384 slots with its SDPA
timings and its talker and vocoder captures, a graph capture, a profiled step, a batch of timings) and
records `skipped` with the reason instead of overrunning. The 0.6B model runs only once the 1.7B rows are
done, on what is left. The TensorRT vocoder's engine build and the ONNX export of the vocoder take
minutes: they run only with `--tensorrt` / `--onnx`, as phases of their own with their own budget lines.

`--smoke --cuda-semantics` runs the smoke with SDPA answering as CUDA does (tts.qwen3.cuda_semantics:
the fused kernels' output layout and refusals, judged at bfloat16) and records which kernel each call
site could take (`cuda_semantics` in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time

_STARTED = time.monotonic()  # the budget counts from here: imports and start-up are spent time too
DEFAULT_BUDGET_S = 240.0
HARD_KILL_MARGIN_S = 45  # scripts/gpu_check.sh kills the driver this long after its budget (a hang only)
MODEL_SHARE = {"1.7b": 0.75, "0.6b": 0.25}
SECOND_MODEL_MIN_S = 40.0  # the 0.6B model runs on what the 1.7B left, when at least this much
# of each model's share: construction first, then the phases in order
PHASE_SHARE = {"load": 0.06, "a_env": 0.05, "b_graphs": 0.17, "c_timings": 0.17, "d_syncs": 0.09, "e_poisson": 0.46}
TENSORRT_BUDGET_S = 240.0  # --tensorrt: the vocoder engine build and its timings, on top of --budget
ONNX_BUDGET_S = 150.0  # --onnx: the vocoder's ONNX export (minutes at the released size) and its timings
# first guesses (s) of the expensive parts on a GPU, replaced by what this run measures
GUESS = {"capture_s": 1.0, "step_s": 0.05}
VOCODER_CAPTURE_S = 0.3  # one torch-vocoder graph (batch bucket x packet) captured at engine load
PROFILER_S = 3.0  # the profiler's start-up, first time in a process (CUPTI)
SDPA_SHAPE_S = 0.1  # choose(): every backend timed on one (batch, length) shape at engine load


def budget_plan(budget_s: float, sizes=("1.7b", "0.6b"), tensorrt: bool = False, onnx: bool = False) -> dict:
    """{model: {part: seconds}}: the run's budget split by MODEL_SHARE (renormalised over `sizes`) and
    PHASE_SHARE; with `tensorrt` / `onnx` a line of TENSORRT_BUDGET_S / ONNX_BUDGET_S on top."""
    total = sum(MODEL_SHARE.get(s, 0.5) for s in sizes)
    plan = {}
    for size in sizes:
        model_s = budget_s * MODEL_SHARE.get(size, 0.5) / total
        plan[size] = {part: round(model_s * share, 1) for part, share in PHASE_SHARE.items()}
    if tensorrt:
        plan["tensorrt"] = {"f_tensorrt": TENSORRT_BUDGET_S}
    if onnx:
        plan["onnxruntime"] = {"f_onnxruntime": ONNX_BUDGET_S}
    return plan


class Budget:
    def __init__(self, seconds: float, start: float | None = None):
        self.seconds = seconds
        self.end = (time.monotonic() if start is None else start) + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def affords(self, seconds: float) -> bool:
        return self.left() >= seconds


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _smoke_shapes() -> None:
    """--smoke: the released-shape constructors return tiny shapes of the same structure (CPU)."""
    import tempfile

    import tts.qwen3.codec as codec
    import tts.qwen3.config as config
    from tts.qwen3.tiny import tiny_config, write_codec, write_tokenizer

    d = tempfile.mkdtemp(prefix="voxgate_gpu_check_smoke_")
    st = write_codec(d, seed=0)
    ids = write_tokenizer(d)
    real = codec.CodecConfig
    tiny_codec = real.from_dir(os.path.join(d, "speech_tokenizer"))

    class TinyByDefault:  # CodecConfig() -> the tiny one; everything else as the real class
        def __call__(self, *args, **kwargs):
            return tiny_codec if not (args or kwargs) else real(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(real, name)

    config.released_config = lambda size, kind="custom_voice": tiny_config("1b7", kind, *st, text_ids=ids)
    codec.CodecConfig = TinyByDefault()


# ------------------------------------------------------------------ phases
def phase_env(ctx, budget: Budget) -> dict:
    import numpy
    import torch

    from tts.qwen3 import attention

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cuda": torch.version.cuda,
        "device": ctx.device_name,
    }
    if ctx.cuda:
        props = torch.cuda.get_device_properties(0)
        out.update(gpu_memory_gib=round(props.total_memory / 2**30, 1), capability=f"{props.major}.{props.minor}")
    shape = ctx.config.talker
    # every (batch, length) shape phases b and c run; those not timed within the budget keep torch's choice
    batches = sorted({*ctx.batches, *ctx.graph_buckets, *ctx.compare_batches})
    kv_lens = list(ctx.serving_kv_lens)
    picked, timings = attention.choose(
        shape, batches, kv_lens, ctx.dtype, ctx.device, deadline=time.monotonic() + budget.left() * 0.8
    )
    out["sdpa"] = [{"batch": b, "kv_len": L, "picked": picked[(b, L)], "ms": timings[(b, L)]} for b, L in picked]
    out["sdpa_note"] = None if ctx.cuda else "CPU: torch's own kernels, nothing to pin"
    ctx.sdpa = picked
    try:  # its failure loses its own row only, not the SDPA table above
        out["lean_predictor"] = _lean_check(ctx)
    except Exception as e:  # noqa: BLE001
        out["lean_predictor"] = {"error": f"{type(e).__name__}: {e}"}
    return out


def _lean_check(ctx, b: int = 8) -> dict:
    """The code predictor's lean steps (what the step runs) against its module path on this device and
    dtype: greedy codes of one frame for `b` random rows, and the first step's logits."""
    import torch

    from tts.qwen3.generate import predict_codes, prepare_caches
    from tts.qwen3.lean_predictor import lean_predictor
    from tts.qwen3.sampling import SamplingRows

    talker = ctx.model.talker
    prepare_caches(ctx.model, b, 64)
    g = torch.Generator(device="cpu").manual_seed(5)
    hidden = torch.randn(b, ctx.config.talker.hidden_size, generator=g).to(ctx.device, ctx.dtype)
    code0 = torch.randint(0, ctx.config.talker.code_predictor.vocab_size, (b,), generator=g).to(ctx.device)
    rows = SamplingRows.filled(b, ctx.device, greedy=True)
    with torch.inference_mode():
        lean = predict_codes(talker, hidden, code0, rows)
        module = predict_codes(talker, hidden, code0, rows, rows=torch.arange(b, device=ctx.device))
        embeds = torch.stack([hidden, talker.embed_codec(code0)], dim=1)
        first_lean = lean_predictor(talker.code_predictor).first(embeds).float()
        first_module = talker.code_predictor.step(embeds, 0, 0).float()
    return {
        "rows": b,
        "codes_equal": bool(torch.equal(lean, module)),
        "codes_differing": int((lean != module).sum()),
        "codes": lean.numel(),
        "first_step_max_logit_diff": float((first_lean - first_module).abs().max()),
    }


def _prompts(ctx, n: int, length: int):
    import torch

    from tts.qwen3.prompt import Prompt

    talker = ctx.model.talker
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, ctx.config.talker.text_vocab_size, (n, length), generator=g).to(ctx.device)
    with torch.inference_mode():
        pad = talker.embed_text(torch.tensor([ctx.config.tts_pad_token_id], device=ctx.device))[0]
        return [
            Prompt(
                prefill=talker.embed_text(ids[i]),
                trailing_text=pad.new_zeros((0, pad.shape[0])),
                pad=pad,
                text_tokens=length,
            )
            for i in range(n)
        ]


GREEDY_T = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True, repetition_penalty=1.0)
GREEDY_P = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True)
# pinned/captured logits may differ from eager ones by kernel rounding; a wrong mask, bucket or graph is O(1)
LOGIT_TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 2e-2}  # of the largest |logit|


def _release_all(batch, n: int) -> None:
    for s in range(n):
        batch.release(s)


def logits_agree(ref, got, tolerance: float, k: int = 5) -> dict:
    """Codebook-0 logits [B, V] of two runs of the same step: the largest difference relative to the largest
    |logit|, and whether each row's top-k set is the same up to near-ties (entries that swap across the k-th
    place within `tolerance`). Random bf16 weights put near-ties everywhere: a greedy argmax alone would call
    kernel rounding a mismatch, where a wrong mask, bucket or stale graph is off by O(1)."""

    scale = max(float(ref.abs().max()), 1e-12)
    rel = float((ref - got).abs().max()) / scale
    k = min(k, ref.shape[-1])
    top_ref, top_got = ref.topk(k, dim=-1), got.topk(k, dim=-1)
    swapped = 0
    for r in range(ref.shape[0]):
        differ = set(top_ref.indices[r].tolist()) ^ set(top_got.indices[r].tolist())
        if not differ:
            continue
        kth = float(top_ref.values[r, -1])
        near = all(abs(float(ref[r, i]) - kth) <= tolerance * scale for i in differ)
        swapped += 1 if near else 0
        if not near:
            return {"max_rel_logit_diff": rel, "topk_equal": False, "topk_near_ties": swapped}
    return {"max_rel_logit_diff": rel, "topk_equal": True, "topk_near_ties": swapped, "k": k}


def _first_divergence(c0, c1) -> int:
    """The first step whose codes differ in any row (codes [steps, B, G]), or the number of steps."""
    differ = (c0 != c1).any(-1).any(-1).nonzero()
    return int(differ[0]) if len(differ) else c0.shape[0]


def phase_graphs(ctx, budget: Budget) -> dict:
    """Graphs vs eager over `ctx.steps` greedy frames per batch bucket; then for every serving length
    bucket the pinned/captured step against torch's own eager step, and which SDPA kernel ran."""
    import torch

    rows, buckets = [], []
    batch = _serving_batch(ctx)
    for b in ctx.graph_buckets:
        need = 2 * ctx.steps * ctx.step_s + ctx.capture_s
        if not budget.affords(need):
            rows.append({"batch": b, "skipped": f"time budget spent ({budget.left():.0f} s left, needs ~{need:.0f} s)"})
            continue
        prompts = _prompts(ctx, b, 48)
        runs = {}
        for mode in ("eager", "graphs") if ctx.cuda else ("eager", "eager, full columns"):
            batch.use_cuda_graphs = mode == "graphs"
            batch.kv_buckets = (ctx.serving_seq,) if mode == "eager, full columns" else ctx.serving_kv_lens
            batch.admit(list(range(b)), prompts, [GREEDY_T] * b, [GREEDY_P] * b)
            codes, hidden, logits = [], [], []
            captures, t0 = batch.captures, time.monotonic()
            for _ in range(ctx.steps):
                codes.append(batch.step(b)[:, : batch.groups].clone())
                hidden.append(batch.hidden[:b].float().cpu())
                with torch.inference_mode():
                    logits.append(ctx.model.talker.codec_head(batch.hidden[:b]).float().cpu())
            _learn(ctx, batch, captures, t0, ctx.steps)
            runs[mode] = (torch.stack(codes), torch.stack(hidden), logits)
            _release_all(batch, b)
        (c0, h0, l0), (c1, h1, l1) = runs.values()
        # steps before the first differing frame had the same inputs in both runs: their logits must agree;
        # after it the runs are on different paths (a near-tie flipped on random bf16 weights)
        first = _first_divergence(c0, c1)
        tol = LOGIT_TOLERANCE.get(ctx.dtype_name, 1e-4)
        agree = [logits_agree(a, g, tol) for a, g in zip(l0[:first], l1[:first])]
        row = {
            "batch": b,
            "steps": ctx.steps,
            "compared": list(runs),
            "codes_equal": bool(torch.equal(c0, c1)),
            "frames_differing": int((c0 != c1).any(-1).sum()),
            "first_differing_step": None if first == ctx.steps else first,
            "max_hidden_diff": float((h0 - h1).abs().max()),
            "max_rel_logit_diff_before": max((a["max_rel_logit_diff"] for a in agree), default=None),
            "tolerance": tol,
        }
        row["ok"] = row["codes_equal"] or (
            first > 0 and all(a["topk_equal"] and a["max_rel_logit_diff"] <= tol for a in agree)
        )
        rows.append(row)
    batch.use_cuda_graphs, batch.kv_buckets = ctx.cuda, ctx.serving_kv_lens
    lens = ctx.serving_kv_lens
    for b in ctx.compare_batches:
        # the whole-vocabulary sampling layout has graphs of its own: at the shortest and longest lengths
        for kv_len, wide in [(L, False) for L in lens] + [(L, True) for L in sorted({lens[0], lens[-1]})]:
            need = ctx.capture_s + 4 * ctx.step_s + (PROFILER_S if not ctx.profiled else 0.0)
            if not budget.affords(need):
                buckets.append(
                    {
                        "batch": b,
                        "kv_len": kv_len,
                        "wide": wide,
                        "skipped": f"time budget spent ({budget.left():.0f} s left, needs ~{need:.0f} s)",
                    }
                )
                continue
            buckets.append(_pinned_vs_eager(ctx, batch, b, kv_len, wide))
    compared = [x for x in buckets if "ok" in x]
    need = ctx.step_s + (PROFILER_S if not ctx.profiled else 0.0)
    predictor = _predictor_kernels(ctx, batch, min(ctx.compare_batches)) if budget.affords(need) else None
    out = {
        "rows": rows,
        "buckets": buckets,
        "predictor_sdpa_ran": predictor,
        "note": None
        if ctx.cuda
        else "CPU: no graphs; eager live-length vs full-column attention, and the "
        "MATH backend pinned against torch's own choice per length bucket",
        "sdpa_ran": sorted({k for x in compared for k in x["sdpa_ran"]}),
        "math_ran": [(x["batch"], x["kv_len"]) for x in compared if "MATH" in x["sdpa_ran"]],
    }
    bad = [x for x in compared if not x["ok"]]
    if bad:
        out["failed"] = "pinned/captured logits differ from eager at " + ", ".join(
            f"batch {x['batch']} kv {x['kv_len']}{' wide' if x['wide'] else ''} ({x['max_rel_logit_diff']:.2e}"
            f"{'' if x['topk_equal'] else ', top-k sets differ'})"
            for x in bad
        )
    bad_rows = [x for x in rows if "ok" in x and not x["ok"]]
    if bad_rows:
        out["failed"] = "; ".join(
            filter(None, [out.get("failed"), "graphs and eager diverge before a near-tie at batch "])
        ) + ", ".join(str(x["batch"]) for x in bad_rows)
    return out


def _serving_batch(ctx):
    """The TalkerBatch phases (b) and (c) share (its captured graphs too): every batch they run, serving's
    default cache length and length buckets, the SDPA backends phase (a) picked."""
    from tts.qwen3.batch import TalkerBatch

    if ctx.batch is None:
        ctx.batch = TalkerBatch(
            ctx.model,
            max(ctx.batches + ctx.graph_buckets + ctx.compare_batches),
            ctx.serving_seq,
            use_cuda_graphs=ctx.cuda,
            kv_step=ctx.serving_kv,
        )
        ctx.batch.sdpa_backends = dict(ctx.sdpa)
    return ctx.batch


def _predictor_kernels(ctx, batch, b: int) -> list[str]:
    """The SDPA backends the code predictor's steps run on (torch's choice: causal, GQA, no mask), profiled
    on one eager frame of `b` rows; loud when MATH."""
    import torch

    from tts.qwen3.attention import kernels_that_ran
    from tts.qwen3.generate import predict_codes

    talker = ctx.model.talker
    with torch.inference_mode():
        rows = batch.pred_rows.slice(b)
        ran = kernels_that_ran(lambda: predict_codes(talker, batch.hidden[:b], batch.code0[:b], rows))
    ctx.profiled = True
    if ran["math"]:
        print(f"!! gpu_check: the code predictor's attention ran on SDPA MATH at batch {b}", flush=True)
    return ran["backends"]


def _learn(ctx, batch, captures_before: int, t0: float, steps: int) -> None:
    """What the last run of steps cost: the seconds per capture (or per step) later phases estimate with."""
    spent, captured = time.monotonic() - t0, batch.captures - captures_before
    if captured:
        ctx.capture_s = max(ctx.capture_s_seen, spent / captured)
        ctx.capture_s_seen = ctx.capture_s
    elif steps:
        ctx.step_s = max(ctx.step_s_seen, spent / steps)
        ctx.step_s_seen = ctx.step_s


def _pinned_vs_eager(ctx, batch, b: int, kv_len: int, wide: bool = False) -> dict:
    """One step of `b` rows whose live lengths spread up to `kv_len`: eager with torch's own kernels (the
    reference) against the step serving runs (CUDA: the graph captured under the pinned backend; CPU: MATH
    pinned, a stand-in), same state before each; logits of codebook 0 compared. Then the talker's decode
    alone as serving runs it (under the pin on CUDA), profiled: which SDPA backend and kernels ran."""
    import torch

    from tts.qwen3.attention import kernels_that_ran, talker_pinned
    from tts.qwen3.generate import talker_step

    talker = ctx.model.talker
    batch.admit(list(range(b)), _prompts(ctx, b, 16), [GREEDY_T] * b, [GREEDY_P] * b)
    pos = [(kv_len - 1) * (s + 1) // b for s in range(b)]  # per-row live lengths, the longest in this bucket
    for s, p in enumerate(pos):
        batch.host_pos[s] = p
    batch.pos[:b].copy_(torch.tensor(pos, device=ctx.device))
    saved = [t.clone() for t in batch._mutable()]

    def restore():
        for t, v in zip(batch._mutable(), saved):
            t.copy_(v)

    with torch.inference_mode():
        batch._step_rows(b, kv_len, wide)
        ref, ref_tok = talker.codec_head(batch.hidden[:b]).float(), batch.code0[:b].clone()
        restore()
        if ctx.cuda:
            captures, t0 = batch.captures, time.monotonic()
            graph = batch._graphs.get((b, kv_len, wide)) or batch._capture_gated(b, kv_len, wide)
            _learn(ctx, batch, captures, t0, 0)
            stream = batch._stream
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                graph.replay()
            torch.cuda.synchronize()
            backend, served = batch.sdpa_backends.get((b, kv_len)), "captured graph"
        else:
            backend, served = "MATH", "eager, MATH pinned"
            with talker_pinned(talker, backend):
                batch._step_rows(b, kv_len, wide)
        got, got_tok = talker.codec_head(batch.hidden[:b]).float(), batch.code0[:b].clone()
        restore()
        codes = batch.out[:b, : batch.groups].clone()
        text = batch.pad.expand(b, -1)
        serving_pin = backend if ctx.cuda else None  # CPU serving pins nothing (MATH above is a stand-in)
        with talker_pinned(talker, serving_pin):
            ran = kernels_that_ran(lambda: talker_step(talker, codes, text, batch.pos[:b], kv_len=kv_len))
        ctx.profiled = True
        restore()
    _release_all(batch, b)
    tol = LOGIT_TOLERANCE.get(ctx.dtype_name, 1e-4)
    agree = logits_agree(ref.cpu(), got.cpu(), tol)
    row = {
        "batch": b,
        "kv_len": kv_len,
        "wide": wide,
        "served": served,
        "pinned": backend,
        "max_logit_diff": float((ref - got).abs().max()),
        **agree,
        "tolerance": tol,
        "tokens_equal": bool(torch.equal(ref_tok, got_tok)),  # information: a near-tie may flip a token
        "sdpa_ran": ran["backends"],
        "kernels": ran["kernels"],
    }
    row["ok"] = agree["max_rel_logit_diff"] <= tol and agree["topk_equal"]
    if ran["math"]:
        print(
            f"!! gpu_check: the talker's decode attention ran on SDPA MATH at batch {b}, kv {kv_len} "
            f"(pinned {serving_pin}): no fused kernel took it",
            flush=True,
        )
    return row


def phase_timings(ctx, budget: Budget) -> dict:
    """Step ms at a short and a long cache length: before every repetition each row's position is set back
    so the step reads the length bucket its row names (a step advances positions; left alone they would
    drift into the next bucket and capture a new graph inside the timed loop)."""

    out: dict = {"step_ms": [], "prefill_ms": [], "vocoder": []}
    batch = _serving_batch(ctx)  # phase (b)'s, with the graphs it captured
    _release_all(batch, batch.max_batch)  # whatever phase (b) left, had it stopped half way
    steps_budget = Budget(budget.left() * 0.6)
    for b in ctx.batches:
        need = 2 * (ctx.capture_s + (ctx.reps + 1) * ctx.step_s * 1.5)
        if not steps_budget.affords(need):
            out["step_ms"].append(
                {"batch": b, "skipped": f"time budget spent ({steps_budget.left():.0f} s left, needs ~{need:.0f} s)"}
            )
            continue
        prompts = _prompts(ctx, b, 32)
        t0 = time.perf_counter()
        batch.admit(list(range(b)), prompts, [GREEDY_T] * b, [GREEDY_P] * b)
        _sync(ctx.device)
        out["prefill_ms"].append({"batch": b, "prompt": 32, "ms": round((time.perf_counter() - t0) * 1e3, 2)})
        for label, length in (("short", ctx.serving_kv), ("long", ctx.serving_seq)):

            def at_length(batch=batch):  # every row at position length - 2: the step reads `length` columns
                for s in range(b):
                    batch.host_pos[s] = length - 2
                batch.pos[:b].fill_(length - 2)

            at_length()
            captures, t0 = batch.captures, time.monotonic()
            batch.step(b)  # capture / warm at this length
            _learn(ctx, batch, captures, t0, 1)
            captures = batch.captures
            times, kv_lens = [], set()
            for _ in range(ctx.reps):
                at_length()
                t0 = time.perf_counter()
                batch.step(b)
                times.append(time.perf_counter() - t0)
                kv_lens.add(batch.last_kv_len)
            ctx.step_s = max(ctx.step_s_seen, statistics.median(times))
            ctx.step_s_seen = ctx.step_s
            timed = sorted(kv_lens)
            out["step_ms"].append(
                {
                    "batch": b,
                    "cache": label,
                    "kv_len": timed[0] if len(timed) == 1 else timed,
                    "kv_lens_timed": timed,
                    "captures_in_timed_loop": batch.captures - captures,
                    "p50_ms": round(statistics.median(times) * 1e3, 3),
                    "min_ms": round(min(times) * 1e3, 3),
                }
            )
        _release_all(batch, b)
    del batch
    release_caches(ctx)  # the KV cache of every slot at every serving length: freed before the engines
    run, out["vocoder_not_exercised"] = vocoder_backends(ctx)
    out["vocoder"] = _vocoder_timings(ctx, budget, run)
    return out


def release_caches(ctx) -> None:
    """Drop the serving batch and the model's static caches (the batch's KV cache lives on in the layers, and
    the code predictor's lean plan views it): the engines of (d) and (e) allocate their own."""
    import torch

    ctx.batch = None
    talker = ctx.model.talker
    for dec in (talker.model, talker.code_predictor.model):
        for layer in dec.layers:
            layer.self_attn.kv_cache = None
    talker.code_predictor.__dict__.pop("_lean", None)
    if ctx.cuda:
        torch.cuda.empty_cache()


def vocoder_backends(ctx) -> tuple[tuple[str, ...], dict]:
    """(the vocoder backends this run times, {backend it cannot exercise: why})."""
    from tts.qwen3.codec.vocoder import onnxruntime_available, tensorrt_available

    run, why_not = ["torch-eager"], {}
    if ctx.cuda:
        run.append("torch-graphs")
    else:
        why_not["torch-graphs"] = "CPU: no CUDA graphs"
    ort = onnxruntime_available(ctx.device)
    if ort is not None:
        why_not["onnxruntime"] = ort
    elif not ctx.cuda:
        why_not["onnxruntime"] = "CPU smoke: the GPU run times it where onnxruntime-gpu is installed"
    elif not ctx.onnx:
        why_not["onnxruntime"] = "its ONNX export takes minutes: --onnx runs it with a budget line of its own"
    else:
        why_not["onnxruntime"] = "timed in phase f_onnxruntime (its own budget)"
    trt = tensorrt_available(ctx.device)
    if trt is not None:
        why_not["tensorrt"] = trt
    elif not ctx.tensorrt:
        why_not["tensorrt"] = "its engine build takes minutes: --tensorrt runs it with a budget line of its own"
    else:
        why_not["tensorrt"] = "timed in phase f_tensorrt (its own budget)"
    return tuple(run), why_not


def _vocoder_timings(ctx, budget: Budget, backends) -> list[dict]:
    try:
        from bench.gpu_vocoder import run as vocoder_run  # every backend side by side
    except ImportError:
        vocoder_run = None
    left = max(5.0, budget.left() - 2)
    if vocoder_run is not None:
        try:
            rows = vocoder_run(
                budget_s=left,
                batches=ctx.voc_batches,
                packets=(1, 4),
                backends=backends,
                device="cuda" if ctx.cuda else "cpu",
                shape="released" if not ctx.smoke else "tiny",
            )
        except Exception as e:  # noqa: BLE001 - the step timings this phase measured before must survive
            return [{"source": "bench.gpu_vocoder", "error": f"{type(e).__name__}: {e}"}]
        return [{"source": "bench.gpu_vocoder", **r} for r in rows]
    import numpy as np
    import torch

    codec, rows = ctx.codec, []
    for b in ctx.voc_batches:
        for packet in (1, 4):
            if budget.left() <= 0:
                rows.append({"batch": b, "packet": packet, "skipped": "time budget spent"})
                continue
            state = codec.new_state(b)
            codes = torch.from_numpy(np.random.default_rng(0).integers(0, 2048, (b, packet, 16))).to(ctx.device)
            codec.decode_step(codes, state)
            _sync(ctx.device)
            times = []
            for _ in range(ctx.reps):
                t0 = time.perf_counter()
                codec.decode_step(codes, state)
                _sync(ctx.device)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            rows.append(
                {
                    "source": "torch eager (this driver)",
                    "batch": b,
                    "packet": packet,
                    "ms_per_step": round(med * 1e3, 3),
                    "audio_x": round(b * packet * 0.08 / med, 1),
                }
            )
    return rows


def phase_vocoder_extra(ctx, budget: Budget, backend: str) -> dict:
    """--tensorrt / --onnx only: that vocoder's engine build or export and its timings, on a budget line of
    its own."""
    from bench.gpu_vocoder import run as vocoder_run

    return {
        "vocoder": vocoder_run(
            budget_s=max(5.0, budget.left() - 2),
            batches=ctx.voc_batches,
            packets=(1, 4),
            backends=(backend,),
            device="cuda" if ctx.cuda else "cpu",
            shape="released" if not ctx.smoke else "tiny",
        )
    }


def _engine_captures(ctx, max_batch: int) -> int:
    """Graphs an engine of `max_batch` slots captures at load (batch buckets x length buckets x 2 layouts)."""
    from tts.qwen3.batch import DEFAULT_BUCKETS, kv_buckets

    if not ctx.cuda:
        return 0
    buckets = {x for x in DEFAULT_BUCKETS if x < max_batch} | {max_batch}
    return len(buckets) * len(kv_buckets(ctx.engine_seq, ctx.engine_kv)) * 2


def _engine_load_s(ctx, max_batch: int) -> float:
    """Estimated seconds to load an engine: its SDPA timings (`choose`, one per (batch, length) shape: half
    its talker captures), its talker captures at the capture time measured so far, and its torch vocoder's
    captures (one per batch bucket x packet length)."""
    from tts.qwen3.jobs import EngineSettings

    captures = _engine_captures(ctx, max_batch)
    vocoder = 0
    if ctx.cuda:
        buckets = len({1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch} | {max_batch})
        vocoder = buckets * len({1, *EngineSettings().packet_ramp})
    return 5.0 + captures * ctx.capture_s + captures / 2 * SDPA_SHAPE_S + vocoder * VOCODER_CAPTURE_S


def _engine(ctx, max_batch: int, watch: bool = False):
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    s = EngineSettings(
        random_weights=ctx.size,
        device=str(ctx.device),
        dtype=ctx.dtype_name,
        max_batch=max_batch,
        max_queued=100_000,
        max_seq_len=ctx.engine_seq,
        frames_base=ctx.frames,
        frames_per_token=0.0,
        max_frames=ctx.frames,
        ignore_eos=True,
        watch_syncs=watch,
        kv_bucket=ctx.engine_kv,
        vocoder="tensorrt" if ctx.tensorrt and ctx.cuda else "torch",
    )  # no TensorRT build unasked
    return Qwen3Engine(s, checkpoint=ctx.ckpt)


async def _streams(engine, n: int, sampling) -> list:
    from bench.engine_runs import MIXED_TEXTS, _Run
    from tts.engine import SynthesisRequest

    runs = [
        _Run(
            engine.synthesize(
                SynthesisRequest(
                    text=MIXED_TEXTS[i % len(MIXED_TEXTS)],
                    voice="default",
                    sampling=sampling,
                    deadline=time.monotonic() + 0.2,
                )
            )
        )
        for i in range(n)
    ]
    await asyncio.gather(*[r.consume() for r in runs])
    return runs


def phase_syncs(ctx, budget: Budget) -> dict:
    from tts.engine import SamplingSettings

    need = _engine_load_s(ctx, 16)
    if not budget.affords(need):
        return {"skipped": f"time budget spent ({budget.left():.0f} s left, a 16-slot engine needs ~{need:.0f} s)"}

    async def go():
        eng = _engine(ctx, 16, watch=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, eng.load)
        eng.start_sync(loop)
        try:
            await _streams(eng, 4, SamplingSettings())  # warm
            c0 = dict(eng.counters)
            if ctx.cuda:
                from tts.qwen3.syncs import cuda_sync_warnings

                with cuda_sync_warnings() as seen:
                    await _streams(eng, 16, SamplingSettings())
            else:
                seen = None
                await _streams(eng, 16, SamplingSettings())
        finally:
            await eng.close()
        c = eng.counters
        steps, calls = c["steps"] - c0["steps"], c["vocoder_calls"] - c0["vocoder_calls"]
        syncs = c["host_syncs"] - c0["host_syncs"]
        return {
            "steps": steps,
            "vocoder_calls": calls,
            "watched_syncs": syncs,
            "watched_per_step": round(syncs / steps, 3) if steps else None,
            "loop_syncs_per_step": round((syncs - calls) / steps, 3) if steps else None,
            "driver_reported_syncs": None if seen is None else len(seen),
            "driver_note": None if ctx.cuda else "CPU: set_sync_debug_mode needs CUDA",
        }

    return asyncio.run(go())


def phase_poisson(ctx, budget: Budget) -> dict:
    from bench.engine_bench import MIXED_TEXTS, _arrival_level, poisson_arrivals
    from tts.engine import SamplingSettings

    max_batch = max(ctx.levels)
    audio_s = ctx.frames * 0.08
    per_level = ctx.arrival_s + audio_s + 5
    need = _engine_load_s(ctx, max_batch) + per_level
    if not budget.affords(need):
        return {
            "levels": [],
            "skipped": f"time budget spent ({budget.left():.0f} s left; a {max_batch}-slot engine "
            f"and one level need ~{need:.0f} s)",
        }

    async def go():
        eng = _engine(ctx, max_batch)
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        await loop.run_in_executor(None, eng.load)
        load_s = round(time.monotonic() - t0, 1)
        eng.start_sync(loop)
        rows = []
        try:
            for n in ctx.levels:
                if budget.left() < per_level:
                    rows.append(
                        {
                            "streams": n,
                            "skipped": f"time budget spent ({budget.left():.0f} s left, "
                            f"a level needs about {per_level:.0f} s)",
                        }
                    )
                    break
                rate = n / audio_s  # each request plays `audio_s`: n of them talking at once on average
                # a draw with no arrival in a short window would measure nothing: at least one request
                arrivals = poisson_arrivals(rate, ctx.arrival_s, seed=n) or [(0.0, MIXED_TEXTS[0])]
                r = await _arrival_level(eng, SamplingSettings(), arrivals, 250.0)
                rows.append(
                    {
                        "streams": n,
                        "rate": round(rate, 2),
                        **{k: v for k, v in r.items() if k != "step_ms"},
                        "step_ms": r["step_ms"],
                    }
                )
                ctx.write_partial(rows)
                if not r["passed"]:
                    break
        finally:
            await eng.close()
        return {
            "levels": rows,
            "frames_per_request": ctx.frames,
            "arrival_s": ctx.arrival_s,
            "engine_load_s": load_s,
            "memory": {k: v for k, v in eng.memory.items()},
        }

    return asyncio.run(go())


# ------------------------------------------------------------------ driver
class Ctx:
    pass


def _context(size: str, smoke: bool, tensorrt: bool = False, onnx: bool = False):
    import torch

    from tts.qwen3.batch import kv_buckets
    from tts.qwen3.checkpoint import Checkpoint
    from tts.qwen3.engine import EngineSettings

    ctx = Ctx()
    ctx.size, ctx.smoke, ctx.tensorrt, ctx.onnx = size, smoke, tensorrt, onnx
    ctx.cuda = torch.cuda.is_available() and not smoke
    torch.manual_seed(0)  # graphs sample from the device's default generator: the same draws each run
    ctx.device = torch.device("cuda" if ctx.cuda else "cpu")
    ctx.device_name = torch.cuda.get_device_name(0) if ctx.cuda else f"cpu ({os.cpu_count()} cores)"
    ctx.dtype_name = "bfloat16" if ctx.cuda else "float32"
    ctx.dtype = getattr(torch, ctx.dtype_name)
    ctx.ckpt = Checkpoint.random(size, str(ctx.device), ctx.dtype_name, seed=0)
    ctx.model, ctx.config, ctx.codec = ctx.ckpt.model, ctx.ckpt.config, ctx.ckpt.codec
    if smoke:
        ctx.batches, ctx.graph_buckets, ctx.compare_batches, ctx.voc_batches = (1, 4), (1, 4), (4,), (1, 2)
        ctx.serving_seq, ctx.serving_kv = 128, 32
        ctx.steps, ctx.reps, ctx.frames, ctx.engine_seq, ctx.engine_kv = 4, 3, 6, 128, 64
        ctx.levels, ctx.arrival_s = (2,), 0.5
    else:
        serving = EngineSettings()  # the length buckets serving uses by default
        ctx.batches, ctx.graph_buckets, ctx.compare_batches = (1, 8, 64, 128, 256, 384), (1, 8, 64, 384), (8, 384)
        ctx.voc_batches = (1, 64, 256, 384)
        ctx.serving_seq, ctx.serving_kv = serving.max_seq_len, serving.kv_bucket
        ctx.steps, ctx.reps, ctx.frames, ctx.engine_seq, ctx.engine_kv = 20, 10, 60, 256, 256
        ctx.levels, ctx.arrival_s = (64, 128, 256, 384), 6.0
    ctx.serving_kv_lens = kv_buckets(ctx.serving_seq, ctx.serving_kv)
    ctx.capture_s, ctx.step_s = GUESS["capture_s"], GUESS["step_s"]  # replaced by what this run measures
    ctx.capture_s_seen = ctx.step_s_seen = 0.0
    ctx.sdpa, ctx.batch, ctx.profiled = {}, None, False
    return ctx


PHASES = (
    ("a_env", phase_env),
    ("b_graphs", phase_graphs),
    ("c_timings", phase_timings),
    ("d_syncs", phase_syncs),
    ("e_poisson", phase_poisson),
)


def _status(r) -> str:
    if not isinstance(r, dict):
        return "ok"
    if "error" in r:
        return "ERROR"
    if "failed" in r:
        return "FAILED"
    if "skipped" in r:
        return "skipped"
    return "ok"


def _summary(key: str, r: dict) -> str:
    """A few words per phase for the row printed as it ends."""
    if "error" in r:
        return r["error"][:100]
    if "failed" in r:
        return r["failed"][:140]
    if "skipped" in r:
        return r["skipped"]
    if key == "a_env":
        picked = [x["picked"] for x in r.get("sdpa", []) if x["picked"]]
        return (
            f"{r.get('device')}; SDPA pinned for {len(picked)} shapes; lean == module: "
            f"{r.get('lean_predictor', {}).get('codes_equal')}"
        )
    if key == "b_graphs":
        g = [x for x in r["rows"] if "ok" in x]
        p = [x for x in r["buckets"] if "ok" in x]
        loud = f"; !! MATH ran at {r['math_ran']}" if r["math_ran"] else ""
        return (
            f"graphs=eager {sum(x['ok'] for x in g)}/{len(g)}, pinned=eager {sum(x['ok'] for x in p)}/"
            f"{len(p)} length buckets, SDPA ran: {', '.join(r['sdpa_ran']) or '-'}{loud}"
        )
    if key == "c_timings":
        steps = [f"b{x['batch']} {x['cache']} kv{x['kv_len']} {x['p50_ms']} ms" for x in r["step_ms"] if "p50_ms" in x]
        return "; ".join(steps[:4]) + ("; ..." if len(steps) > 4 else "")
    if key == "d_syncs":
        return f"syncs/step {r.get('watched_per_step')} (loop {r.get('loop_syncs_per_step')})"
    if key == "e_poisson":
        done = [x for x in r.get("levels", []) if "passed" in x]
        return (
            ", ".join(
                f"{x['streams']} streams: {'pass' if x['passed'] else 'FAIL'} ({x['requests']} requests)" for x in done
            )
            or "no level ran"
        )
    return ""


def _print_row(size: str, key: str, budget_s: float, gpu_s: float, used_s: float, status: str, summary: str) -> None:
    print(f"{size:<6}{key:<12}{budget_s:>8.1f}{gpu_s:>8.1f}{used_s:>8.1f}  {status:<8}{summary}", flush=True)


def run(
    out_dir: str,
    budget_s: float = DEFAULT_BUDGET_S,
    smoke: bool = False,
    sizes=("1.7b", "0.6b"),
    tensorrt: bool = False,
    onnx: bool = False,
    cuda_semantics: bool = False,
    started: float | None = None,
) -> dict:
    """`started` (time.monotonic()): when the budget began (main: the driver's start, imports included)."""
    import torch

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "gpu_check.json")
    plan = budget_plan(budget_s, sizes, tensorrt, onnx)
    gpu_plan = budget_plan(DEFAULT_BUDGET_S, sizes, tensorrt, onnx)  # what the default GPU run gives each part
    result: dict = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "smoke": smoke,
        "budget_s": budget_s,
        "plan_s": plan,
        "gpu_plan_s": gpu_plan,
        "models": {},
    }

    def write():
        with open(path, "w") as f:
            json.dump(result, f, indent=2, default=str)

    if cuda_semantics and not smoke:
        result["error"] = "--cuda-semantics stands CUDA's rules in on CPU: it goes with --smoke"
        write()
        return result
    if smoke:
        _smoke_shapes()
    elif not torch.cuda.is_available():
        result["error"] = "no CUDA device (use --smoke to check the driver's logic on CPU)"
        write()
        return result
    semantics = None
    if cuda_semantics:
        from tts.qwen3.cuda_semantics import CudaSdpa

        semantics = CudaSdpa(torch.bfloat16).install()  # judged at the GPU's dtype
    try:
        _run_models(result, write, plan, gpu_plan, Budget(budget_s, started), smoke, sizes, tensorrt, onnx)
    finally:
        if semantics is not None:
            semantics.uninstall()
            result["cuda_semantics"] = semantics.summary()
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    write()
    return result


def _run_models(result, write, plan, gpu_plan, total: Budget, smoke, sizes, tensorrt, onnx) -> None:
    import torch

    extras = [("f_tensorrt", "tensorrt")] if tensorrt else []
    extras += [("f_onnxruntime", "onnxruntime")] if onnx else []
    print(f"{'model':<6}{'phase':<12}{'budget':>8}{'GPU':>8}{'used s':>8}  {'status':<8}summary", flush=True)
    for i, size in enumerate(sizes):
        parts = plan[size]
        res = result["models"][size] = {"phase_budget_s": {}, "gpu_phase_budget_s": gpu_plan[size]}
        # the first model has its share; a later one runs on what is left, when enough is
        left = total.left() - sum(sum(plan[s].values()) for s in sizes[i + 1 :]) if i == 0 else total.left()
        if i > 0 and left < SECOND_MODEL_MIN_S:
            res["skipped"] = f"time budget spent ({left:.0f} s left, {size} needs at least {SECOND_MODEL_MIN_S:.0f} s)"
            _print_row(size, "load", left, gpu_plan[size]["load"], 0.0, "skipped", res["skipped"])
            write()
            continue
        model_budget = Budget(max(0.0, left))
        t0 = time.monotonic()
        if model_budget.left() < parts["load"]:
            res["skipped"] = f"time budget spent ({model_budget.left():.0f} s left)"
            _print_row(size, "load", model_budget.left(), gpu_plan[size]["load"], 0.0, "skipped", res["skipped"])
            write()
            continue
        try:
            ctx = _context(size, smoke, tensorrt and i == 0, onnx and i == 0)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: record it, go on to the next model
            res["error"] = f"{type(e).__name__}: {e}"
            _print_row(
                size, "load", parts["load"], gpu_plan[size]["load"], time.monotonic() - t0, "ERROR", res["error"]
            )
            write()
            continue
        ctx.write_partial = lambda rows, res=res: (res.__setitem__("e_poisson_partial", rows), write())
        res["load_s"] = round(time.monotonic() - t0, 1)
        _print_row(size, "load", parts["load"], gpu_plan[size]["load"], res["load_s"], "ok", ctx.device_name)
        keys = [k for k, _ in PHASES]
        for i, (key, fn) in enumerate(PHASES):
            # this phase's share of what the model has left (time saved earlier goes to later phases)
            rest = sum(parts[k] for k in keys[i:])
            b = Budget(max(0.0, model_budget.left() * parts[key] / rest))
            res["phase_budget_s"][key] = round(b.seconds, 1)
            t_phase = time.monotonic()
            try:
                res[key] = fn(ctx, b)
            except Exception as e:  # noqa: BLE001 - one phase failing must not lose the others
                import traceback

                res[key] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
            res[key + "_s"] = round(time.monotonic() - t_phase, 1)
            if key == "c_timings":  # the engines of (d) and (e) need its memory, whatever (c) left
                release_caches(ctx)
            write()
            _print_row(
                size, key, b.seconds, gpu_plan[size][key], res[key + "_s"], _status(res[key]), _summary(key, res[key])
            )
        for key, backend in extras:  # once per run: the vocoder is the same for both sizes
            b = Budget(plan[backend][key])
            t_phase = time.monotonic()
            try:
                res[key] = phase_vocoder_extra(ctx, b, backend)
            except Exception as e:  # noqa: BLE001
                res[key] = {"error": f"{type(e).__name__}: {e}"}
            res[key + "_s"] = round(time.monotonic() - t_phase, 1)
            write()
            _print_row(size, key, b.seconds, gpu_plan[backend][key], res[key + "_s"], _status(res[key]), "")
        extras = []
        del ctx
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def failures(result: dict) -> list[str]:
    """'model/phase: why' for every phase that failed or raised."""
    out = []
    for size, r in result.get("models", {}).items():
        for key, v in r.items():
            if isinstance(v, dict) and ("failed" in v or "error" in v):
                out.append(f"{size}/{key}: {(v.get('failed') or v.get('error'))[:200]}")
        if "error" in r:
            out.append(f"{size}: {r['error'][:200]}")
    return out


def table(result: dict) -> str:
    """The ten-second read: per model, graphs == eager, pinned == eager, SDPA kernel, step ms, syncs per
    step, highest Poisson level."""
    lines = [
        f"{'model':<6}{'graphs=eager':>13}{'pinned=eager':>13}{'sdpa ran':>22}{'step ms b1/b64/b384 short':>27}"
        f"{'syncs/step':>11}{'loop':>6}{'best level':>11}{'FA p95 ms':>10}{'keeps up':>9}"
    ]
    for size, r in result.get("models", {}).items():
        if "error" in r or "skipped" in r:
            lines.append(f"{size:<6} {r.get('error') or r.get('skipped')}")
            continue
        gb = r.get("b_graphs", {})
        g = [x for x in gb.get("rows", []) if "ok" in x]
        eq = f"{sum(x['ok'] for x in g)}/{len(g)}" if g else "-"
        p = [x for x in gb.get("buckets", []) if "ok" in x]
        peq = f"{sum(x['ok'] for x in p)}/{len(p)}" if p else "-"
        ran = ",".join(x.replace("_ATTENTION", "") for x in gb.get("sdpa_ran", [])) or "-"
        if gb.get("math_ran"):
            ran = "!! " + ran
        steps = {
            x["batch"]: x["p50_ms"]
            for x in r.get("c_timings", {}).get("step_ms", [])
            if x.get("cache") == "short" and "p50_ms" in x
        }
        st = "/".join(f"{steps[b]:.1f}" if b in steps else "-" for b in (1, 64, 384))
        d = r.get("d_syncs", {})
        levels = [x for x in r.get("e_poisson", {}).get("levels", []) if "passed" in x]
        passed = [x for x in levels if x["passed"]]
        best = passed[-1] if passed else None
        last = levels[-1] if levels else {}
        lines.append(
            f"{size:<6}{eq:>13}{peq:>13}{ran[:21]:>22}{st:>27}{str(d.get('watched_per_step', '-')):>11}"
            f"{str(d.get('loop_syncs_per_step', '-')):>6}{(best['streams'] if best else 0):>11}"
            f"{str((best or last).get('first_audio_p95_ms', '-')):>10}"
            f"{str((best or last).get('keeping_up_share', '-')):>9}"
        )
        not_run = r.get("c_timings", {}).get("vocoder_not_exercised") or {}
        for backend, why in not_run.items():
            lines.append(f"{'':<6} vocoder {backend} not exercised: {why}")
    for f in failures(result):
        lines.append(f"FAILED {f} (see gpu_check.json)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="voxgate GPU check (one driver, a row per phase, JSON after each)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/voxgate_gpu_check"))
    ap.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for everything, model construction included (default {DEFAULT_BUDGET_S:.0f})",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on CPU: checks the driver, measures nothing")
    ap.add_argument("--sizes", default="1.7b,0.6b")
    ap.add_argument(
        "--tensorrt",
        action="store_true",
        help=f"also build and time the TensorRT vocoder ({TENSORRT_BUDGET_S:.0f} s more, its own line)",
    )
    ap.add_argument(
        "--onnx",
        action="store_true",
        help=f"also export and time the ONNX Runtime vocoder ({ONNX_BUDGET_S:.0f} s more, its own line)",
    )
    ap.add_argument(
        "--cuda-semantics",
        action="store_true",
        help="with --smoke: SDPA answers in CUDA's layouts and refuses what CUDA refuses (tts.qwen3.cuda_semantics)",
    )
    args = ap.parse_args(argv)
    result = run(
        args.out,
        args.budget,
        args.smoke,
        tuple(args.sizes.split(",")),
        args.tensorrt,
        args.onnx,
        args.cuda_semantics,
        started=_STARTED,
    )
    if "error" in result:
        print(f"gpu_check: {result['error']}", file=sys.stderr)
        return 2
    print(
        f"gpu_check: {result['started']} .. {result.get('finished')}, "
        f"{result['models'].get('1.7b', {}).get('a_env', {}).get('device', '')}; JSON: "
        f"{os.path.join(args.out, 'gpu_check.json')}"
    )
    print(table(result))
    return 1 if failures(result) else 0


if __name__ == "__main__":
    raise SystemExit(main())
