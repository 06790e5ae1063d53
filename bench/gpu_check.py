"""The GPU check: one driver, phases with their own time budgets, JSON after each phase, one table.

    python -m bench.gpu_check --out DIR            # on a lent GPU machine (scripts/gpu_check.sh)
    python -m bench.gpu_check --smoke --out DIR    # tiny shapes on CPU: the driver's logic, end to end

Needs Python 3.12, torch (CUDA build), numpy, safetensors, tokenizers and this tree — nothing else.
Released shapes with random weights (no checkpoint, no internet), 1.7B first, then 0.6B:

(a) environment; the SDPA backend chosen per (batch bucket, length bucket) with every backend's time;
(b) CUDA graphs against eager on identical inputs, greedy, buckets 1/8/64/384, 20 steps: codes equal,
    max hidden-state difference (bf16);
(c) ms per step by batch bucket at a short and a long cache length, prefill ms, vocoder ms by batch x
    packet (engineer 12's `bench.gpu_vocoder.run` when importable: every backend; else torch eager);
(d) real syncs per step: the engine with its op watch, and the driver's own count
    (`torch.cuda.set_sync_debug_mode`) over the same run;
(e) Poisson arrivals holding 64/128/256/320/384 streams, stopping at the first level that fails
    (a stream falling behind real time, or first audio p95 over 250 ms).

Total budget 8 minutes by default (`--budget`); a phase out of time records `skipped` and why.
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

PHASE_SHARE = {"a": 0.05, "b": 0.12, "c": 0.18, "d": 0.08, "e": 0.57}  # of each model's budget
MODEL_SHARE = {"1.7b": 0.6, "0.6b": 0.4}


class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


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

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
           "cuda": torch.version.cuda, "device": ctx.device_name}
    if ctx.cuda:
        props = torch.cuda.get_device_properties(0)
        out.update(gpu_memory_gib=round(props.total_memory / 2**30, 1), capability=f"{props.major}.{props.minor}")
    shape = ctx.config.talker
    # the shapes not timed within the phase's budget keep torch's choice (and say so)
    picked, timings = attention.choose(shape, ctx.batches, ctx.kv_lens, ctx.dtype, ctx.device,
                                       deadline=time.monotonic() + budget.left())
    out["sdpa"] = [{"batch": b, "kv_len": L, "picked": picked[(b, L)], "ms": timings[(b, L)]} for b, L in picked]
    out["sdpa_note"] = None if ctx.cuda else "CPU: torch's own kernels, nothing to pin"
    ctx.sdpa = picked
    out["lean_predictor"] = _lean_check(ctx)
    return out


def _lean_check(ctx, b: int = 8) -> dict:
    """The code predictor's lean steps (what the step runs) against its module path on this device and
    dtype: greedy codes of one frame for `b` random rows, and the first step's logits."""
    import torch

    from tts.qwen3.generate import predict_codes
    from tts.qwen3.lean_predictor import lean_predictor
    from tts.qwen3.sampling import SamplingRows

    talker = ctx.model.talker
    ctx.model.setup_caches(b, 64)
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
    return {"rows": b, "codes_equal": bool(torch.equal(lean, module)),
            "codes_differing": int((lean != module).sum()), "codes": lean.numel(),
            "first_step_max_logit_diff": float((first_lean - first_module).abs().max())}


def _prompts(ctx, n: int, length: int):
    import torch

    from tts.qwen3.prompt import Prompt

    talker = ctx.model.talker
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, ctx.config.talker.text_vocab_size, (n, length), generator=g).to(ctx.device)
    with torch.inference_mode():
        pad = talker.embed_text(torch.tensor([ctx.config.tts_pad_token_id], device=ctx.device))[0]
        return [Prompt(prefill=talker.embed_text(ids[i]), trailing_text=pad.new_zeros((0, pad.shape[0])), pad=pad,
                       text_tokens=length) for i in range(n)]


GREEDY_T = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True, repetition_penalty=1.0)
GREEDY_P = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True)


def phase_graphs(ctx, budget: Budget) -> dict:
    """Graphs vs eager: the same batch object, the same prompts, prefilled afresh for each run."""
    import torch

    from tts.qwen3.batch import TalkerBatch

    rows = []
    batch = TalkerBatch(ctx.model, max(ctx.graph_buckets), 256, use_cuda_graphs=ctx.cuda, kv_step=128)
    batch.sdpa_backends = ctx.sdpa
    for b in ctx.graph_buckets:
        if budget.left() <= 0:
            rows.append({"batch": b, "skipped": "time budget spent"})
            continue
        prompts = _prompts(ctx, b, 48)
        runs = {}
        for mode in ("eager", "graphs") if ctx.cuda else ("eager", "eager, full columns"):
            batch.use_cuda_graphs = mode == "graphs"
            batch.kv_buckets = (256,) if mode == "eager, full columns" else (128, 256)
            batch.admit(list(range(b)), prompts, [GREEDY_T] * b, [GREEDY_P] * b)
            codes, hidden = [], []
            for _ in range(ctx.steps):
                codes.append(batch.step(b)[:, : batch.groups].clone())
                hidden.append(batch.hidden[:b].float().cpu())
            runs[mode] = (torch.stack(codes), torch.stack(hidden))
            for s in range(b):
                batch.release(s)
        (c0, h0), (c1, h1) = runs.values()
        rows.append({"batch": b, "steps": ctx.steps, "compared": list(runs), "codes_equal": bool(torch.equal(c0, c1)),
                     "frames_differing": int((c0 != c1).any(-1).sum()), "max_hidden_diff": float((h0 - h1).abs().max())})
    batch.use_cuda_graphs = ctx.cuda
    del batch
    if ctx.cuda:
        torch.cuda.empty_cache()
    return {"rows": rows, "note": None if ctx.cuda else "CPU: no graphs; eager live-length vs full-column attention"}


def phase_timings(ctx, budget: Budget) -> dict:
    import torch

    from tts.qwen3.batch import TalkerBatch

    out: dict = {"step_ms": [], "prefill_ms": [], "vocoder": []}
    max_b = max(ctx.batches)
    batch = TalkerBatch(ctx.model, max_b, ctx.long_len, use_cuda_graphs=ctx.cuda, kv_step=ctx.long_len // 4)
    batch.sdpa_backends = ctx.sdpa
    share = budget.left() * 0.6
    t_end = time.monotonic() + share
    for b in ctx.batches:
        if time.monotonic() > t_end:
            out["step_ms"].append({"batch": b, "skipped": "time budget spent"})
            continue
        prompts = _prompts(ctx, b, 32)
        t0 = time.perf_counter()
        batch.admit(list(range(b)), prompts, [GREEDY_T] * b, [GREEDY_P] * b)
        _sync(ctx.device)
        out["prefill_ms"].append({"batch": b, "prompt": 32, "ms": round((time.perf_counter() - t0) * 1e3, 2)})
        for label, length in (("short", ctx.long_len // 4), ("long", ctx.long_len)):
            for s in range(b):  # the host's view of the positions picks the length bucket
                batch.host_pos[s] = length - 2
            batch.step(b)  # capture / warm
            times = []
            for _ in range(ctx.reps):
                t0 = time.perf_counter()
                batch.step(b)
                times.append(time.perf_counter() - t0)
            out["step_ms"].append({"batch": b, "cache": label, "kv_len": batch.last_kv_len,
                                   "p50_ms": round(statistics.median(times) * 1e3, 3),
                                   "min_ms": round(min(times) * 1e3, 3)})
        for s in range(b):
            batch.release(s)
    del batch
    if ctx.cuda:
        torch.cuda.empty_cache()
    out["vocoder"] = _vocoder_timings(ctx, budget)
    return out


def _vocoder_timings(ctx, budget: Budget) -> list[dict]:
    try:
        from bench.gpu_vocoder import run as vocoder_run  # engineer 12's: every backend side by side
    except ImportError:
        vocoder_run = None
    left = max(5.0, budget.left() - 2)
    if vocoder_run is not None:
        try:
            rows = vocoder_run(budget_s=left, batches=ctx.voc_batches, packets=(1, 4),
                               device="cuda" if ctx.cuda else "cpu", shape="released" if not ctx.smoke else "tiny",
                               **({} if ctx.cuda else {"backends": ("torch-eager",)}))
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
            rows.append({"source": "torch eager (this driver)", "batch": b, "packet": packet,
                         "ms_per_step": round(med * 1e3, 3), "audio_x": round(b * packet * 0.08 / med, 1)})
    return rows


def _engine(ctx, max_batch: int, watch: bool = False):
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    s = EngineSettings(random_weights=ctx.size, device=str(ctx.device), dtype=ctx.dtype_name, max_batch=max_batch,
                       max_queued=100_000, max_seq_len=ctx.engine_seq, frames_base=ctx.frames, frames_per_token=0.0,
                       max_frames=ctx.frames, ignore_eos=True, watch_syncs=watch, kv_bucket=ctx.engine_seq // 2)
    return Qwen3Engine(s, checkpoint=ctx.ckpt)


async def _streams(engine, n: int, sampling) -> list:
    from bench.engine_runs import MIXED_TEXTS, _Run
    from tts.engine import SynthesisRequest

    runs = [_Run(engine.synthesize(SynthesisRequest(text=MIXED_TEXTS[i % len(MIXED_TEXTS)], voice="default",
                                                    sampling=sampling, deadline=time.monotonic() + 0.2)))
            for i in range(n)]
    await asyncio.gather(*[r.consume() for r in runs])
    return runs


def phase_syncs(ctx, budget: Budget) -> dict:
    from tts.engine import SamplingSettings

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
        return {"steps": steps, "vocoder_calls": calls, "watched_syncs": syncs,
                "watched_per_step": round(syncs / steps, 3) if steps else None,
                "loop_syncs_per_step": round((syncs - calls) / steps, 3) if steps else None,
                "driver_reported_syncs": None if seen is None else len(seen),
                "driver_note": None if ctx.cuda else "CPU: set_sync_debug_mode needs CUDA"}

    return asyncio.run(go())


def phase_poisson(ctx, budget: Budget) -> dict:
    from bench.engine_bench import _arrival_level, poisson_arrivals
    from tts.engine import SamplingSettings

    async def go():
        eng = _engine(ctx, max(ctx.levels))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, eng.load)
        eng.start_sync(loop)
        rows = []
        audio_s = ctx.frames * 0.08
        try:
            for n in ctx.levels:
                per_level = ctx.arrival_s + audio_s + 5
                if budget.left() < per_level:
                    rows.append({"streams": n, "skipped": f"time budget spent ({budget.left():.0f} s left, "
                                                          f"a level needs about {per_level:.0f} s)"})
                    break
                rate = n / audio_s  # each request plays `audio_s`: n of them talking at once on average
                arrivals = poisson_arrivals(rate, ctx.arrival_s, seed=n)
                r = await _arrival_level(eng, SamplingSettings(), arrivals, 250.0)
                rows.append({"streams": n, "rate": round(rate, 2), **{k: v for k, v in r.items() if k != "step_ms"},
                             "step_ms": r["step_ms"]})
                ctx.write_partial(rows)
                if not r["passed"]:
                    break
        finally:
            await eng.close()
        return {"levels": rows, "frames_per_request": ctx.frames, "arrival_s": ctx.arrival_s,
                "memory": {k: v for k, v in eng.memory.items()}}

    return asyncio.run(go())


# ------------------------------------------------------------------ driver
class Ctx:
    pass


def _context(size: str, smoke: bool):
    import torch

    from tts.qwen3.checkpoint import Checkpoint

    ctx = Ctx()
    ctx.size, ctx.smoke = size, smoke
    ctx.cuda = torch.cuda.is_available() and not smoke
    ctx.device = torch.device("cuda" if ctx.cuda else "cpu")
    ctx.device_name = torch.cuda.get_device_name(0) if ctx.cuda else f"cpu ({os.cpu_count()} cores)"
    ctx.dtype_name = "bfloat16" if ctx.cuda else "float32"
    ctx.dtype = getattr(torch, ctx.dtype_name)
    ctx.ckpt = Checkpoint.random(size, str(ctx.device), ctx.dtype_name, seed=0)
    ctx.model, ctx.config, ctx.codec = ctx.ckpt.model, ctx.ckpt.config, ctx.ckpt.codec
    if smoke:
        ctx.batches, ctx.kv_lens, ctx.graph_buckets, ctx.voc_batches = (1, 4), (64, 128), (1, 4), (1, 2)
        ctx.steps, ctx.reps, ctx.long_len, ctx.frames, ctx.engine_seq = 4, 2, 128, 6, 128
        ctx.levels, ctx.arrival_s = (2,), 0.5
    else:
        ctx.batches, ctx.kv_lens = (1, 8, 64, 128, 256, 384), (256, 1024)
        ctx.graph_buckets, ctx.voc_batches = (1, 8, 64, 384), (1, 64, 256, 384)
        ctx.steps, ctx.reps, ctx.long_len, ctx.frames, ctx.engine_seq = 20, 10, 1024, 100, 512
        ctx.levels, ctx.arrival_s = (64, 128, 256, 320, 384), 12.0
    ctx.sdpa = {}
    return ctx


def run(out_dir: str, budget_s: float = 480.0, smoke: bool = False, sizes=("1.7b", "0.6b")) -> dict:
    import torch

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "gpu_check.json")
    result: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "smoke": smoke, "models": {}}

    def write():
        with open(path, "w") as f:
            json.dump(result, f, indent=2, default=str)

    if smoke:
        _smoke_shapes()
    elif not torch.cuda.is_available():
        result["error"] = "no CUDA device (use --smoke to check the driver's logic on CPU)"
        write()
        return result
    total = Budget(budget_s)
    for size in sizes:
        model_budget = min(total.left(), budget_s * MODEL_SHARE.get(size, 0.5))
        if model_budget <= 10:
            result["models"][size] = {"skipped": "time budget spent"}
            write()
            continue
        t_model = time.monotonic()
        res = result["models"][size] = {}
        try:
            ctx = _context(size, smoke)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: record it, go on to the next model
            res["error"] = f"{type(e).__name__}: {e}"
            write()
            continue
        ctx.write_partial = lambda rows, res=res: (res.__setitem__("e_poisson_partial", rows), write())
        res["load_s"] = round(time.monotonic() - t_model, 1)
        phases = [("a_env", "a", lambda b: phase_env(ctx, b)), ("b_graphs", "b", lambda b: phase_graphs(ctx, b)),
                  ("c_timings", "c", lambda b: phase_timings(ctx, b)), ("d_syncs", "d", lambda b: phase_syncs(ctx, b)),
                  ("e_poisson", "e", lambda b: phase_poisson(ctx, b))]
        for key, letter, fn in phases:
            left_for_model = model_budget - (time.monotonic() - t_model)
            b = Budget(min(left_for_model, model_budget * PHASE_SHARE[letter] if letter != "e" else left_for_model))
            t0 = time.monotonic()
            try:
                res[key] = fn(b)
            except Exception as e:  # noqa: BLE001 - one phase failing must not lose the others
                import traceback

                res[key] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
            res[key + "_s"] = round(time.monotonic() - t0, 1)
            write()
        del ctx
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    write()
    return result


def table(result: dict) -> str:
    """The ten-second read: per model, graphs == eager, step ms, syncs per step, highest Poisson level."""
    lines = [f"{'model':<6}{'graphs=eager':>13}{'max dh':>9}{'step ms b1/b64/b384 short':>27}{'syncs/step':>11}"
             f"{'loop':>6}{'best level':>11}{'FA p95 ms':>10}{'keeps up':>9}"]
    for size, r in result.get("models", {}).items():
        if "error" in r or "skipped" in r:
            lines.append(f"{size:<6} {r.get('error') or r.get('skipped')}")
            continue
        g = [x for x in r.get("b_graphs", {}).get("rows", []) if "codes_equal" in x]
        eq = f"{sum(x['codes_equal'] for x in g)}/{len(g)}" if g else "-"
        dh = f"{max(x['max_hidden_diff'] for x in g):.1e}" if g else "-"
        steps = {x["batch"]: x["p50_ms"] for x in r.get("c_timings", {}).get("step_ms", [])
                 if x.get("cache") == "short"}
        st = "/".join(f"{steps[b]:.1f}" if b in steps else "-" for b in (1, 64, 384))
        d = r.get("d_syncs", {})
        levels = [x for x in r.get("e_poisson", {}).get("levels", []) if "passed" in x]
        passed = [x for x in levels if x["passed"]]
        best = passed[-1] if passed else None
        last = levels[-1] if levels else {}
        lines.append(f"{size:<6}{eq:>13}{dh:>9}{st:>27}{str(d.get('watched_per_step', '-')):>11}"
                     f"{str(d.get('loop_syncs_per_step', '-')):>6}{(best['streams'] if best else 0):>11}"
                     f"{str((best or last).get('first_audio_p95_ms', '-')):>10}"
                     f"{str((best or last).get('keeping_up_share', '-')):>9}")
        errors = [k for k, v in r.items() if isinstance(v, dict) and "error" in v]
        if errors:
            lines.append(f"{'':<6} phases with errors: {', '.join(errors)} (see gpu_check.json)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="voxgate GPU check (one driver, JSON after each phase)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/voxgate_gpu_check"))
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for everything (default 8 minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on CPU: checks the driver, measures nothing")
    ap.add_argument("--sizes", default="1.7b,0.6b")
    args = ap.parse_args(argv)
    result = run(args.out, args.budget, args.smoke, tuple(args.sizes.split(",")))
    if "error" in result:
        print(f"gpu_check: {result['error']}", file=sys.stderr)
        return 2
    print(f"gpu_check: {result['started']} .. {result.get('finished')}, "
          f"{result['models'].get('1.7b', {}).get('a_env', {}).get('device', '')}; JSON: "
          f"{os.path.join(args.out, 'gpu_check.json')}")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
