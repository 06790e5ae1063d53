"""`voxgate bench`: measures Qwen3Engine (issue 4, item 7).

* stage table, one utterance at a time (short / medium / long):
  `Label Words Wall(ms) Audio(s) RTF Tok/s Mem(MB) Prefill Generate Decode` (+ TTFA with --streaming);
* concurrency sweep (`--concurrency 1,8,32`): audio x (audio seconds per wall second, all
  streams), RTF, TTFA p50/p95, whether every stream kept up with real time after its first
  packet, host syncs per frame;
* `--reference`: the official qwen-tts generate + decode on the same checkpoint at c=1 and
  c=16 (one static batch of 16), side by side with ours;
* `--reference-threads 1,2`: the official run at each torch thread count; its best counts (ours runs
  as it ships: the engine picks its CPU threads);
* `--arrivals poisson --rate 2,4,8 --duration S`: requests arrive as a Poisson process with mixed text
  lengths, one level per rate, stopping at the first level that fails (first audio p95 over
  `--slo-first-audio-ms` or a stream falling behind real time); per level first audio p50/p95/p99,
  step time p50/p99 per (batch, length) bucket, vocoder and prefill shares of the wall time, the
  share of streams keeping up, peak memory;
* `--arrivals burst --burst 32 --background 8`: how long a burst of new calls holds the running
  streams, with the prefill budget off (every request prefilled at once, as before) and on;
* `--json-output FILE` (rewritten after every level, so a timeout keeps what ran), `--trace FILE`
  (Chrome trace of the worker's spans);
* `--random-weights 0.6b|1.7b`: the released shapes with random weights, no checkpoint;
  `--frames N` fixes every utterance at N frames (EOS ignored).

Imports only torch, numpy, safetensors, tokenizers and our packages (runs on the bare GPU image);
`--reference` additionally needs qwen-tts.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import time


from bench.engine_runs import MIXED_TEXTS, TEXTS, _mem_mb, _percentile, _Run, _settings


async def _run_level(engine, texts: list[str], sampling) -> dict:
    from tts.engine import SynthesisRequest

    c0, tm0 = dict(engine.counters), dict(engine.timings)
    cpu0 = time.process_time()
    t0 = time.monotonic()
    runs = [
        _Run(
            engine.synthesize(
                SynthesisRequest(
                    text=t, voice="default", language="en", sampling=sampling, deadline=time.monotonic() + 0.2
                )
            )
        )
        for t in texts
    ]
    await asyncio.gather(*[r.consume() for r in runs])
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    audio = sum(r.audio_s for r in runs)
    frames = engine.counters["frames"] - c0["frames"]
    watched = engine.counters["host_syncs"] is not None and c0["host_syncs"] is not None
    syncs = engine.counters["host_syncs"] - c0["host_syncs"] if watched else None
    steps = engine.counters["steps"] - c0["steps"]
    vcalls = engine.counters["vocoder_calls"] - c0["vocoder_calls"]
    ttfa = [r.ttfa_s * 1e3 for r in runs]
    return {
        "concurrency": len(texts),
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "audio_x": round(audio / wall, 3) if wall else None,
        "cpu_s": round(cpu, 3),
        "audio_per_cpu_s": round(audio / cpu, 3) if cpu else None,
        "rtf": round(statistics.mean((r.t_end - r.t0) / r.audio_s for r in runs if r.audio_s), 4),
        "ttfa_p50_ms": round(_percentile(ttfa, 0.5), 1),
        "ttfa_p95_ms": round(_percentile(ttfa, 0.95), 1),
        "keeps_up": all(r.keeps_up() for r in runs),
        "streams_keeping_up": sum(r.keeps_up() for r in runs),
        "frames": frames,
        "steps": steps,
        "vocoder_calls": vcalls,
        "host_syncs": syncs,
        "host_syncs_per_frame": round(syncs / frames, 4) if frames and watched else None,
        "host_syncs_per_step": round(syncs / steps, 3) if steps and watched else None,
        "mean_batch": round(frames / steps, 2) if steps else None,
        **{f"{k}_s": round(engine.timings[k] - tm0[k], 3) for k in engine.timings},
    }


async def _sync_probe(engine, sampling, c: int) -> dict:
    """One level with the sync watch on (every op of the worker and the vocoder lane watched; slower, so
    apart from the timed levels): what really made the host wait, per step."""
    engine.watch_syncs(True)
    try:
        texts = [list(TEXTS.values())[i % 3] for i in range(c)]
        r = await _run_level(engine, texts, sampling)
    finally:
        engine.watch_syncs(False)
    out = {
        k: r[k]
        for k in ("concurrency", "steps", "vocoder_calls", "host_syncs", "host_syncs_per_step", "host_syncs_per_frame")
    }
    print(
        f"host syncs (watched, c={c}): {r['host_syncs']} over {r['steps']} steps and {r['vocoder_calls']} "
        f"vocoder calls = {r['host_syncs_per_step']} per step"
    )
    return out


async def _stage_table(engine, sampling, streaming: bool) -> list[dict]:
    rows = []
    for label, text in TEXTS.items():
        t_before = dict(engine.timings)
        c_before = dict(engine.counters)
        r = await _run_level(engine, [text], sampling)
        d = {k: engine.timings[k] - t_before[k] for k in engine.timings}
        frames = engine.counters["frames"] - c_before["frames"]
        rows.append(
            {
                "label": label,
                "words": len(text.split()),
                "wall_ms": r["wall_s"] * 1e3,
                "audio_s": r["audio_s"],
                "rtf": r["rtf"],
                "tok_s": frames / d["step"] if d["step"] else float("nan"),
                "mem_mb": _mem_mb(engine.settings.device),
                "prefill_ms": d["prefill"] * 1e3,
                "generate_ms": d["step"] * 1e3,
                "decode_ms": d["vocoder"] * 1e3,
                "ttfa_ms": r["ttfa_p50_ms"],
            }
        )
    return rows


def _print_stage_table(rows: list[dict], streaming: bool) -> None:
    head = (
        f"{'Label':<8}{'Words':>6}{'Wall(ms)':>10}{'Audio(s)':>9}{'RTF':>8}{'Tok/s':>8}{'Mem(MB)':>9}"
        f"{'Prefill':>9}{'Generate':>10}{'Decode':>9}" + (f"{'TTFA(ms)':>10}" if streaming else "")
    )
    print(head)
    for r in rows:
        print(
            f"{r['label']:<8}{r['words']:>6}{r['wall_ms']:>10.1f}{r['audio_s']:>9.2f}{r['rtf']:>8.3f}{r['tok_s']:>8.1f}"
            f"{r['mem_mb']:>9.0f}{r['prefill_ms']:>9.1f}{r['generate_ms']:>10.1f}{r['decode_ms']:>9.1f}"
            + (f"{r['ttfa_ms']:>10.1f}" if streaming else "")
        )


def _print_levels(levels: list[dict], title: str) -> None:
    print(title)
    print(
        f"{'conc':>5}{'audio x':>9}{'RTF':>8}{'TTFA p50':>10}{'TTFA p95':>10}{'keeps up':>10}{'syncs/frame':>12}"
        f"{'batch':>7}"
    )
    for r in levels:
        print(
            f"{r['concurrency']:>5}{r['audio_x']:>9.2f}{r['rtf']:>8.3f}{r['ttfa_p50_ms']:>10.1f}{r['ttfa_p95_ms']:>10.1f}"
            f"{str(r['keeps_up']) + ' ' + str(r['streams_keeping_up']):>10}"
            f"{(r['host_syncs_per_frame'] or 0):>12.3f}{(r['mean_batch'] or 0):>7.1f}"
        )


def _write_trace(path: str, spans: list, t_origin: float) -> None:
    events = [
        {"name": name, "ph": "X", "ts": (t0 - t_origin) * 1e6, "dur": dur * 1e6, "pid": 1, "tid": 1, "args": args}
        for name, t0, dur, args in spans
    ]
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def _load_reference(model_dir: str, device: str):
    import warnings

    import torch

    warnings.simplefilter("ignore")
    from qwen_tts import Qwen3TTSModel

    model = Qwen3TTSModel.from_pretrained(model_dir, dtype=torch.float32)  # device_map would need accelerate
    if device != "cpu":
        model.model.to(device)
        model.device = torch.device(device)
    return model


def _reference_level(model, c: int, max_frames: int) -> dict:
    """The official qwen-tts: generate + decode of c texts as one static batch."""
    texts = [list(TEXTS.values())[i % 3] for i in range(c)]
    speaker = sorted(model.get_supported_speakers() or [""])[0] or None
    cpu0 = time.process_time()
    t0 = time.monotonic()
    if model.model.tts_model_type == "custom_voice":
        wavs, sr = model.generate_custom_voice(
            text=texts, speaker=[speaker] * c, language=["English"] * c, max_new_tokens=max_frames + 1
        )
    else:
        wavs, sr = model.generate_voice_design(
            text=texts, instruct=["A calm voice."] * c, language=["English"] * c, max_new_tokens=max_frames + 1
        )
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    audio = sum(len(w) for w in wavs) / sr
    return {
        "concurrency": c,
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "audio_x": round(audio / wall, 3),
        "cpu_s": round(cpu, 3),
        "audio_per_cpu_s": round(audio / cpu, 3) if cpu else None,
        "rtf": round(wall / (audio / c), 4) if audio else None,
        "ttfa_p50_ms": round(wall * 1e3, 1),
        "ttfa_p95_ms": round(wall * 1e3, 1),
    }


def _official_at(model, c: int, max_frames: int, threads: int) -> dict:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return {**_reference_level(model, c, max_frames), "threads": threads}
    finally:
        torch.set_num_threads(before)


async def _compare(
    engine, reference, sampling, max_frames: int, repeats: int, threads: list[int]
) -> tuple[list[dict], list[dict], list[dict]]:
    """Ours and the official at c=1 and c=16, interleaved `repeats` times (the official once per thread
    count each time); the best run of each side counts (a shared CPU box makes single runs noisy, and
    both sides get the same chances). Returns (ours, official best, every official run)."""
    loop = asyncio.get_running_loop()
    ours, theirs, runs = {}, {}, []
    for _ in range(repeats):
        for c in (1, 16):
            texts = [list(TEXTS.values())[i % 3] for i in range(c)]
            mine = await _run_level(engine, texts, sampling)
            if c not in ours or mine["audio_x"] > ours[c]["audio_x"]:
                ours[c] = mine
            for t in threads:
                ref = await loop.run_in_executor(None, _official_at, reference, c, max_frames, t)
                runs.append(ref)
                if c not in theirs or ref["audio_x"] > theirs[c]["audio_x"]:
                    theirs[c] = ref
    return [ours[1], ours[16]], [theirs[1], theirs[16]], runs


# ------------------------------------------------------------------ arrivals
def _step_stats(steps: list) -> dict:
    by: dict[str, list[float]] = {}
    for bucket, kv_len, dt, _ in steps:
        by.setdefault(f"{bucket}x{kv_len}", []).append(dt * 1e3)
    return {
        k: {"steps": len(v), "p50_ms": round(_percentile(v, 0.5), 2), "p99_ms": round(_percentile(v, 0.99), 2)}
        for k, v in sorted(by.items(), key=lambda kv: [int(x) for x in kv[0].split("x")])
    }


def _peak_mem_mb(device: str) -> float:
    return round(_mem_mb(device), 1)


async def _arrival_level(engine, sampling, arrivals: list[tuple[float, str]], slo_ms: float) -> dict:
    """Submit each (offset s, text) at its time; wait for every stream; the level's numbers."""
    from tts.engine import SynthesisRequest

    if engine.step_times is None:
        engine.step_times = []
    i0 = len(engine.step_times)
    tm0 = dict(engine.timings)
    t0 = time.monotonic()
    runs: list[_Run] = []
    tasks = []
    for offset, text in arrivals:
        delay = t0 + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        r = _Run(
            engine.synthesize(
                SynthesisRequest(
                    text=text, voice="default", language="en", sampling=sampling, deadline=time.monotonic() + 0.2
                )
            )
        )
        runs.append(r)
        tasks.append(asyncio.ensure_future(r.consume()))
    await asyncio.gather(*tasks)
    wall = time.monotonic() - t0
    ttfa = [r.ttfa_s * 1e3 for r in runs]
    keeping = sum(r.keeps_up() for r in runs)
    audio = sum(r.audio_s for r in runs)
    d = {k: engine.timings[k] - tm0[k] for k in engine.timings}
    out = {
        "requests": len(runs),
        "wall_s": round(wall, 3),
        "audio_s": round(audio, 3),
        "audio_x": round(audio / wall, 3) if wall else None,
        "first_audio_p50_ms": round(_percentile(ttfa, 0.5), 1),
        "first_audio_p95_ms": round(_percentile(ttfa, 0.95), 1),
        "first_audio_p99_ms": round(_percentile(ttfa, 0.99), 1),
        "keeping_up_share": round(keeping / len(runs), 4) if runs else None,
        "vocoder_share": round(d["vocoder"] / wall, 4),
        "prefill_share": round(d["prefill"] / wall, 4),
        "talker_share": round(d["step"] / wall, 4),
        "step_ms": _step_stats(engine.step_times[i0:]),
        "peak_mem_mb": _peak_mem_mb(engine.settings.device),
    }
    out["passed"] = bool(runs) and keeping == len(runs) and out["first_audio_p95_ms"] <= slo_ms
    return out


def poisson_arrivals(rate: float, duration: float, seed: int) -> list[tuple[float, str]]:
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append((t, rng.choice(MIXED_TEXTS)))


async def _poisson(engine, sampling, args, write) -> list[dict]:
    levels = []
    for rate in [float(x) for x in args.rate.split(",")]:
        arrivals = poisson_arrivals(rate, args.duration, args.seed)
        r = {"rate": rate, **await _arrival_level(engine, sampling, arrivals, args.slo_first_audio_ms)}
        levels.append(r)
        print(
            f"poisson {rate:g}/s: {r['requests']} requests, first audio p50/p95/p99 {r['first_audio_p50_ms']}/"
            f"{r['first_audio_p95_ms']}/{r['first_audio_p99_ms']} ms, keeping up {r['keeping_up_share']:.0%}, "
            f"audio x {r['audio_x']}, vocoder {r['vocoder_share']:.0%} prefill {r['prefill_share']:.0%} of wall, "
            f"peak {r['peak_mem_mb']} MB -> {'pass' if r['passed'] else 'FAIL'}"
        )
        write(levels)
        if not r["passed"]:
            break
    return levels


async def _burst_once(engine, sampling, args, budget: int) -> dict:
    """`background` streams running, then `burst` requests at once: the longest gap between two steps
    while the burst is admitted (running streams get no frame in it) against the steady step time."""
    from tts.engine import SynthesisRequest

    engine.settings.prefill_budget_tokens = budget
    if engine.step_times is None:
        engine.step_times = []
    long_text = TEXTS["long"]

    def req(text):
        return SynthesisRequest(
            text=text, voice="default", language="en", sampling=sampling, deadline=time.monotonic() + 0.2
        )

    bg = [_Run(engine.synthesize(req(long_text))) for _ in range(args.background)]
    bg_tasks = [asyncio.ensure_future(r.consume()) for r in bg]
    while any(not r.arrivals for r in bg):  # every background stream playing
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.2)
    i0, p0 = len(engine.step_times), len(engine.prefill_times)
    t_burst = time.perf_counter()
    burst = [_Run(engine.synthesize(req(MIXED_TEXTS[i % len(MIXED_TEXTS)]))) for i in range(args.burst)]
    await asyncio.gather(*[r.consume() for r in burst])
    i1 = len(engine.step_times)
    for r in bg:
        r.stream.cancel()
    await asyncio.gather(*bg_tasks, return_exceptions=True)
    steady = statistics.median([x[2] for x in engine.step_times[max(0, i0 - 20) : i0]] or [0.0])
    ends = [t_burst] + [x[3] for x in engine.step_times[i0:i1]]
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    first = [r.ttfa_s * 1e3 for r in burst]
    prefills = engine.prefill_times[p0:]
    return {
        "prefill_budget_tokens": budget,
        "burst": args.burst,
        "background": args.background,
        "steady_step_ms": round(steady * 1e3, 2),
        "longest_gap_ms": round(max(gaps) * 1e3, 2) if gaps else None,
        "admissions": len(prefills),
        "largest_admission": max((n for n, *_ in prefills), default=0),
        "longest_prefill_ms": round(max((dt for _, _, dt, _ in prefills), default=0.0) * 1e3, 2),
        "largest_prefill_positions": max((t for _, t, _, _ in prefills), default=0),
        "burst_first_audio_p50_ms": round(_percentile(first, 0.5), 1),
        "burst_first_audio_max_ms": round(max(first), 1) if first else None,
    }


async def _bursts(engine, sampling, args, write) -> list[dict]:
    default = engine.settings.prefill_budget_tokens
    out = []
    modes = (("unbudgeted (before)", 10**9), ("budgeted (after)", default))
    for label, budget in modes + modes:  # interleaved twice: a shared box drifts
        r = {"mode": label, **await _burst_once(engine, sampling, args, budget)}
        out.append(r)
        print(
            f"burst of {r['burst']} over {r['background']} running, {label}: {r['admissions']} admissions, the "
            f"largest {r['largest_admission']} requests / {r['largest_prefill_positions']} positions in "
            f"{r['longest_prefill_ms']} ms; running streams held up to "
            f"{r['longest_gap_ms']} ms (steady step {r['steady_step_ms']} ms); the burst's first audio p50 "
            f"{r['burst_first_audio_p50_ms']} ms, max {r['burst_first_audio_max_ms']} ms"
        )
        write(out)
    engine.settings.prefill_budget_tokens = default
    return out


async def _bench(args) -> dict:
    import torch

    from tts.engine import SamplingSettings
    from tts.qwen3.engine import Qwen3Engine

    levels = [int(x) for x in args.concurrency.split(",")] if args.concurrency else []
    if args.reference and not args.model_dir:
        raise SystemExit("--reference needs --model-dir (the official code loads the same checkpoint)")
    arrivals = getattr(args, "arrivals", None)
    need = 64 if arrivals == "poisson" else (args.burst + args.background if arrivals == "burst" else 1)
    max_batch = args.max_batch or max([need] + levels + ([16] if args.reference else []))
    settings = _settings(args, max_batch)
    engine = Qwen3Engine(settings)
    t_load = time.monotonic()
    await engine.start()
    load_s = time.monotonic() - t_load
    src = args.model_dir or f"random {args.random_weights}"
    print(
        f"engine: {src} on {settings.device} {settings.dtype}, max_batch {max_batch}, "
        f"CUDA graphs {engine._batch.use_cuda_graphs}; loaded in {load_s:.1f} s"
    )
    if args.trace:
        engine.enable_trace(stages=True)
    t_origin = time.perf_counter()
    sampling = SamplingSettings()
    result: dict = {
        "engine": {
            "source": src,
            "device": settings.device,
            "dtype": settings.dtype,
            "max_batch": max_batch,
            "cuda_graphs": engine._batch.use_cuda_graphs,
            "pipeline": settings.pipeline,
            "frames": args.frames,
            "load_s": round(load_s, 2),
            "memory": engine.memory,
        }
    }

    def write(key, value):  # after every level: a timeout keeps what ran
        result[key] = value
        if args.json_output:
            with open(args.json_output, "w") as f:
                json.dump(result, f, indent=2)

    try:
        await _run_level(engine, [TEXTS["short"]], sampling)  # warm-up (allocator, kernels)
        rows = await _stage_table(engine, sampling, args.streaming)
        _print_stage_table(rows, args.streaming)
        write("stages", rows)
        sweep = []
        for c in levels:
            texts = [list(TEXTS.values())[i % 3] for i in range(c)]
            sweep.append(await _run_level(engine, texts, sampling))
            write("levels", sweep)
        if sweep:
            _print_levels(sweep, "ours (Qwen3Engine):")
        result["levels"] = sweep
        if arrivals == "poisson":
            await _poisson(engine, sampling, args, lambda v: write("poisson", v))
        elif arrivals == "burst":
            await _bursts(engine, sampling, args, lambda v: write("burst", v))
        write("syncs", await _sync_probe(engine, sampling, min(levels or [4])))
        if args.reference:
            repeats = int(os.environ.get("VOXGATE_BENCH_REPEATS", "3"))
            reference = _load_reference(args.model_dir, settings.device)
            max_frames = args.frames or settings.max_frames
            threads = [int(x) for x in str(getattr(args, "reference_threads", "1")).split(",")]
            ours, ref, every = await _compare(engine, reference, sampling, max_frames, repeats, threads)
            _print_levels(ours, f"ours, best of {repeats} (interleaved with the official runs):")
            _print_levels(
                [
                    {**r, "keeps_up": "-", "streams_keeping_up": "", "host_syncs_per_frame": 0, "mean_batch": 0}
                    for r in ref
                ],
                f"official qwen-tts, best of {repeats} (generate + decode, one static batch; TTFA = the whole batch):",
            )
            ratios = {str(o["concurrency"]): round(o["audio_x"] / r["audio_x"], 2) for o, r in zip(ours, ref)}
            # audio per CPU second (all threads of the process): steadier than wall time on a shared box
            cpu_ratios = {
                str(o["concurrency"]): round(o["audio_per_cpu_s"] / r["audio_per_cpu_s"], 2)
                for o, r in zip(ours, ref)
                if o.get("audio_per_cpu_s") and r.get("audio_per_cpu_s")
            }
            write(
                "reference",
                {
                    "ours": ours,
                    "official": ref,
                    "official_runs": every,
                    "repeats": repeats,
                    "official_threads_tried": threads,
                    "ours_threads": engine.cpu_threads,
                    "audio_x_ratio_ours_over_official": ratios,
                    "audio_per_cpu_s_ratio_ours_over_official": cpu_ratios,
                },
            )
            print(
                "audio per CPU second, ours / official: "
                + ", ".join(f"c={k}: {v}x" for k, v in cpu_ratios.items())
                + f" (ours {', '.join(str(o['audio_per_cpu_s']) for o in ours)}; official "
                f"{', '.join(str(r['audio_per_cpu_s']) for r in ref)})"
            )
            print("official best thread counts: " + ", ".join(f"c={r['concurrency']}: {r['threads']}" for r in ref))
            print("audio x, ours / official: " + ", ".join(f"c={k}: {v}x" for k, v in ratios.items()))
    finally:
        await engine.close()
    if args.trace:
        _write_trace(args.trace, engine.trace, t_origin)
        print(f"trace: {args.trace} ({len(engine.trace)} spans)")
    if torch.cuda.is_available():
        result["engine"]["gpu"] = torch.cuda.get_device_name(0)
    return result


def _under_cuda_semantics(args) -> dict:
    """--cuda-semantics: the bench with SDPA answering as CUDA's kernels do (their output layout and refusals,
    judged at bfloat16) and the request path's host<->device traffic counted (tts.qwen3.cuda_semantics);
    which kernel each call site took and the traffic are printed and kept in the result."""
    import torch

    from tts.qwen3.cuda_semantics import cuda_semantics

    if torch.cuda.is_available() and args.device != "cpu":
        raise SystemExit("--cuda-semantics stands CUDA's rules in on CPU: use it with --device cpu")
    args.device = "cpu"
    if not getattr(args, "vocoder", None):  # CPU's default, ONNX Runtime, reads host arrays by design
        args.vocoder = "torch"
    with cuda_semantics(torch.bfloat16) as (sdpa, moves):
        result = asyncio.run(_bench(args))
    hits, sent, planned = moves.take()
    result["cuda_semantics"] = {
        **sdpa.summary(),
        "transfers": {"synchronous_or_reads": hits[:50], "staged_sends_by_file": dict(sent), "planned": planned},
    }
    for site, kernels in sorted(sdpa.sites().items()):
        print(f"cuda semantics: {site}: " + ", ".join(f"{k} x{n}" for k, n in kernels.items()))
    print(
        f"cuda semantics: {len(hits)} synchronous copies or device reads in the watched threads"
        + (f" (first: {hits[0]})" if hits else "")
        + f"; staged sends {dict(sent)}; planned copies {planned}"
        + ("; MATH only at " + ", ".join(sdpa.math_only()) if sdpa.math_only() else "")
    )
    return result


def bench_main(args) -> int:
    if args.model_dir and not os.path.isdir(args.model_dir):
        print(f"voxgate bench: no_model_dir: {args.model_dir} is not a directory", file=sys.stderr)
        return 2
    import torch

    if (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu" and os.environ.get(
        "VOXGATE_BENCH_THREADS"
    ):
        # ours runs with the threads the engine picks (as it ships) unless this says otherwise
        threads = int(os.environ["VOXGATE_BENCH_THREADS"])
        torch.set_num_threads(threads)
        print(f"cpu: {threads} torch thread(s) (VOXGATE_BENCH_THREADS)")
    if getattr(args, "ref_audio", None):
        from bench.clone_bench import clone_bench

        result = asyncio.run(clone_bench(args))
    elif getattr(args, "remote", False):
        from bench.remote_bench import remote_bench

        result = asyncio.run(remote_bench(args))
    elif getattr(args, "cuda_semantics", False):
        result = _under_cuda_semantics(args)
    else:
        result = asyncio.run(_bench(args))
    if args.json_output:
        with open(args.json_output, "w") as f:
            json.dump(result, f, indent=2)
        print(f"json: {args.json_output}")
    if getattr(args, "plot", None) and "reference" in result:
        from bench import plots

        plots.write_plot("reference", result, args.plot, plots.command_line(argv=getattr(args, "argv", None)))
    return 0
