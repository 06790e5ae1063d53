"""`voxgate bench`: measures Qwen3Engine (issue 4, item 7).

* stage table, one utterance at a time (short / medium / long):
  `Label Words Wall(ms) Audio(s) RTF Tok/s Mem(MB) Prefill Generate Decode` (+ TTFA with --streaming);
* concurrency sweep (`--concurrency 1,8,32`): audio x (audio seconds per wall second, all
  streams), RTF, TTFA p50/p95, whether every stream kept up with real time after its first
  packet, host syncs per frame;
* `--reference`: the official qwen-tts generate + decode on the same checkpoint at c=1 and
  c=16 (one static batch of 16), side by side with ours;
* `--json-output FILE`, `--trace FILE` (Chrome trace of the worker's spans);
* `--random-weights 0.6b|1.7b`: the released shapes with random weights, no checkpoint;
  `--frames N` fixes every utterance at N frames (EOS ignored).

Imports only torch, numpy, safetensors, tokenizers and our packages (runs on the bare GPU image);
`--reference` additionally needs qwen-tts.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import time


TEXTS = {
    "short": "Hello, how can I help you today?",
    "medium": "Thanks for calling. Your order shipped this morning and should arrive on Thursday before noon.",
    "long": ("I have checked your account and I can see two payments from last week. The first one went through "
             "on Monday, but the second one was declined by your bank, so I have put a hold on the order until "
             "we can confirm the card details with you."),
}
FRAME_S = 0.08


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _mem_mb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _settings(args, max_batch: int):
    import torch

    from tts.qwen3.engine import EngineSettings

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    s = EngineSettings(model_dir=args.model_dir, random_weights=args.random_weights, device=device, dtype=dtype,
                       max_batch=max_batch, max_queued=100_000)
    longest = max(len(t) for t in TEXTS.values())
    s.vocoder = getattr(args, "vocoder", None) or s.vocoder
    if args.frames:
        s.frames_base, s.frames_per_token, s.max_frames, s.ignore_eos = args.frames, 0.0, args.frames, True
        s.max_seq_len = longest + 64 + args.frames + 8  # a token per character at worst (tiny byte BPE)
    else:
        s.max_seq_len = longest + 64 + s.max_frames
        s.max_frames = min(s.max_frames, 400)
    return s


class _Run:
    """Timestamps of one stream, for TTFA, RTF and keeping up with real time."""

    def __init__(self, stream):
        self.stream = stream
        self.t0 = time.monotonic()
        self.arrivals: list[tuple[float, float]] = []  # (arrival time, audio seconds before this chunk)
        self.audio_s = 0.0
        self.t_end = None

    async def consume(self) -> None:
        async for chunk in self.stream:
            self.arrivals.append((time.monotonic(), self.audio_s))
            self.audio_s += chunk.duration_s
        self.t_end = time.monotonic()

    @property
    def ttfa_s(self) -> float:
        return self.arrivals[0][0] - self.t0 if self.arrivals else float("nan")

    def keeps_up(self, slack_s: float = 0.0) -> bool:
        """Every chunk after the first arrives before playout (started at the first chunk) needs it."""
        if not self.arrivals:
            return False
        start = self.arrivals[0][0]
        return all(t - start <= before + slack_s for t, before in self.arrivals[1:])


async def _run_level(engine, texts: list[str], sampling) -> dict:
    from tts.engine import SynthesisRequest

    c0, tm0 = dict(engine.counters), dict(engine.timings)
    t0 = time.monotonic()
    runs = [_Run(engine.synthesize(SynthesisRequest(text=t, voice="default", language="en", sampling=sampling,
                                                    deadline=time.monotonic() + 0.2))) for t in texts]
    await asyncio.gather(*[r.consume() for r in runs])
    wall = time.monotonic() - t0
    audio = sum(r.audio_s for r in runs)
    frames = engine.counters["frames"] - c0["frames"]
    watched = engine.counters["host_syncs"] is not None and c0["host_syncs"] is not None
    syncs = engine.counters["host_syncs"] - c0["host_syncs"] if watched else None
    steps = engine.counters["steps"] - c0["steps"]
    vcalls = engine.counters["vocoder_calls"] - c0["vocoder_calls"]
    ttfa = [r.ttfa_s * 1e3 for r in runs]
    return {
        "concurrency": len(texts), "audio_s": round(audio, 3), "wall_s": round(wall, 3),
        "audio_x": round(audio / wall, 3) if wall else None,
        "rtf": round(statistics.mean((r.t_end - r.t0) / r.audio_s for r in runs if r.audio_s), 4),
        "ttfa_p50_ms": round(_percentile(ttfa, 0.5), 1), "ttfa_p95_ms": round(_percentile(ttfa, 0.95), 1),
        "keeps_up": all(r.keeps_up() for r in runs), "streams_keeping_up": sum(r.keeps_up() for r in runs),
        "frames": frames, "steps": steps, "vocoder_calls": vcalls, "host_syncs": syncs,
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
    out = {k: r[k] for k in ("concurrency", "steps", "vocoder_calls", "host_syncs", "host_syncs_per_step",
                             "host_syncs_per_frame")}
    print(f"host syncs (watched, c={c}): {r['host_syncs']} over {r['steps']} steps and {r['vocoder_calls']} "
          f"vocoder calls = {r['host_syncs_per_step']} per step")
    return out


async def _stage_table(engine, sampling, streaming: bool) -> list[dict]:
    rows = []
    for label, text in TEXTS.items():
        t_before = dict(engine.timings)
        c_before = dict(engine.counters)
        r = (await _run_level(engine, [text], sampling))
        d = {k: engine.timings[k] - t_before[k] for k in engine.timings}
        frames = engine.counters["frames"] - c_before["frames"]
        rows.append({
            "label": label, "words": len(text.split()), "wall_ms": r["wall_s"] * 1e3, "audio_s": r["audio_s"],
            "rtf": r["rtf"], "tok_s": frames / d["step"] if d["step"] else float("nan"),
            "mem_mb": _mem_mb(engine.settings.device), "prefill_ms": d["prefill"] * 1e3,
            "generate_ms": d["step"] * 1e3, "decode_ms": d["vocoder"] * 1e3, "ttfa_ms": r["ttfa_p50_ms"],
        })
    return rows


def _print_stage_table(rows: list[dict], streaming: bool) -> None:
    head = f"{'Label':<8}{'Words':>6}{'Wall(ms)':>10}{'Audio(s)':>9}{'RTF':>8}{'Tok/s':>8}{'Mem(MB)':>9}" \
           f"{'Prefill':>9}{'Generate':>10}{'Decode':>9}" + (f"{'TTFA(ms)':>10}" if streaming else "")
    print(head)
    for r in rows:
        print(f"{r['label']:<8}{r['words']:>6}{r['wall_ms']:>10.1f}{r['audio_s']:>9.2f}{r['rtf']:>8.3f}{r['tok_s']:>8.1f}"
              f"{r['mem_mb']:>9.0f}{r['prefill_ms']:>9.1f}{r['generate_ms']:>10.1f}{r['decode_ms']:>9.1f}"
              + (f"{r['ttfa_ms']:>10.1f}" if streaming else ""))


def _print_levels(levels: list[dict], title: str) -> None:
    print(title)
    print(f"{'conc':>5}{'audio x':>9}{'RTF':>8}{'TTFA p50':>10}{'TTFA p95':>10}{'keeps up':>10}{'syncs/frame':>12}"
          f"{'batch':>7}")
    for r in levels:
        print(f"{r['concurrency']:>5}{r['audio_x']:>9.2f}{r['rtf']:>8.3f}{r['ttfa_p50_ms']:>10.1f}{r['ttfa_p95_ms']:>10.1f}"
              f"{str(r['keeps_up']) + ' ' + str(r['streams_keeping_up']):>10}"
              f"{(r['host_syncs_per_frame'] or 0):>12.3f}{(r['mean_batch'] or 0):>7.1f}")


def _write_trace(path: str, spans: list, t_origin: float) -> None:
    events = [{"name": name, "ph": "X", "ts": (t0 - t_origin) * 1e6, "dur": dur * 1e6, "pid": 1, "tid": 1, "args": args}
              for name, t0, dur, args in spans]
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
    t0 = time.monotonic()
    if model.model.tts_model_type == "custom_voice":
        wavs, sr = model.generate_custom_voice(text=texts, speaker=[speaker] * c, language=["English"] * c,
                                               max_new_tokens=max_frames + 1)
    else:
        wavs, sr = model.generate_voice_design(text=texts, instruct=["A calm voice."] * c, language=["English"] * c,
                                               max_new_tokens=max_frames + 1)
    wall = time.monotonic() - t0
    audio = sum(len(w) for w in wavs) / sr
    return {"concurrency": c, "audio_s": round(audio, 3), "wall_s": round(wall, 3), "audio_x": round(audio / wall, 3),
            "rtf": round(wall / (audio / c), 4) if audio else None,
            "ttfa_p50_ms": round(wall * 1e3, 1), "ttfa_p95_ms": round(wall * 1e3, 1)}


async def _compare(engine, reference, sampling, max_frames: int, repeats: int) -> tuple[list[dict], list[dict]]:
    """Ours and the official at c=1 and c=16, interleaved `repeats` times; the best run of each counts
    (a shared CPU box makes single runs noisy, and both sides get the same chances)."""
    ours, theirs = {}, {}
    for _ in range(repeats):
        for c in (1, 16):
            texts = [list(TEXTS.values())[i % 3] for i in range(c)]
            mine = await _run_level(engine, texts, sampling)
            ref = await asyncio.get_running_loop().run_in_executor(None, _reference_level, reference, c, max_frames)
            if c not in ours or mine["audio_x"] > ours[c]["audio_x"]:
                ours[c] = mine
            if c not in theirs or ref["audio_x"] > theirs[c]["audio_x"]:
                theirs[c] = ref
    return [ours[1], ours[16]], [theirs[1], theirs[16]]


async def _bench(args) -> dict:
    import torch

    from tts.engine import SamplingSettings
    from tts.qwen3.engine import Qwen3Engine

    levels = [int(x) for x in args.concurrency.split(",")] if args.concurrency else []
    if args.reference and not args.model_dir:
        raise SystemExit("--reference needs --model-dir (the official code loads the same checkpoint)")
    max_batch = args.max_batch or max([1] + levels + ([16] if args.reference else []))
    settings = _settings(args, max_batch)
    engine = Qwen3Engine(settings)
    t_load = time.monotonic()
    await engine.start()
    load_s = time.monotonic() - t_load
    src = args.model_dir or f"random {args.random_weights}"
    print(f"engine: {src} on {settings.device} {settings.dtype}, max_batch {max_batch}, "
          f"CUDA graphs {engine._batch.use_cuda_graphs}; loaded in {load_s:.1f} s")
    if args.trace:
        engine.enable_trace(stages=True)
    t_origin = time.perf_counter()
    sampling = SamplingSettings()
    result: dict = {"engine": {"source": src, "device": settings.device, "dtype": settings.dtype,
                               "max_batch": max_batch, "cuda_graphs": engine._batch.use_cuda_graphs,
                               "frames": args.frames, "load_s": round(load_s, 2)}}
    try:
        await _run_level(engine, [TEXTS["short"]], sampling)  # warm-up (allocator, kernels)
        rows = await _stage_table(engine, sampling, args.streaming)
        _print_stage_table(rows, args.streaming)
        result["stages"] = rows
        sweep = []
        for c in levels:
            texts = [list(TEXTS.values())[i % 3] for i in range(c)]
            sweep.append(await _run_level(engine, texts, sampling))
        if sweep:
            _print_levels(sweep, "ours (Qwen3Engine):")
        result["levels"] = sweep
        result["syncs"] = await _sync_probe(engine, sampling, min(levels or [4]))
        if args.reference:
            repeats = int(os.environ.get("VOXGATE_BENCH_REPEATS", "3"))
            reference = _load_reference(args.model_dir, settings.device)
            max_frames = args.frames or settings.max_frames
            ours, ref = await _compare(engine, reference, sampling, max_frames, repeats)
            _print_levels(ours, f"ours, best of {repeats} (interleaved with the official runs):")
            _print_levels([{**r, "keeps_up": "-", "streams_keeping_up": "", "host_syncs_per_frame": 0, "mean_batch": 0}
                           for r in ref], f"official qwen-tts, best of {repeats} (generate + decode, one static batch; "
                                          "TTFA = the whole batch):")
            ratios = {str(o["concurrency"]): round(o["audio_x"] / r["audio_x"], 2) for o, r in zip(ours, ref)}
            result["reference"] = {"ours": ours, "official": ref, "repeats": repeats,
                                   "audio_x_ratio_ours_over_official": ratios}
            print("audio x, ours / official: " + ", ".join(f"c={k}: {v}x" for k, v in ratios.items()))
    finally:
        await engine.close()
    if args.trace:
        _write_trace(args.trace, engine.trace, t_origin)
        print(f"trace: {args.trace} ({len(engine.trace)} spans)")
    if torch.cuda.is_available():
        result["engine"]["gpu"] = torch.cuda.get_device_name(0)
    return result


def bench_main(args) -> int:
    if args.model_dir and not os.path.isdir(args.model_dir):
        print(f"voxgate bench: no_model_dir: {args.model_dir} is not a directory", file=sys.stderr)
        return 2
    import torch

    if (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu":
        # Same thread count for ours and the official run; on a shared small box extra intra-op
        # threads spin against other processes and make both numbers noise.
        threads = int(os.environ.get("VOXGATE_BENCH_THREADS", "1"))
        torch.set_num_threads(threads)
        print(f"cpu: {threads} torch thread(s) (VOXGATE_BENCH_THREADS)")
    if getattr(args, "ref_audio", None):
        from bench.clone_bench import clone_bench

        result = asyncio.run(clone_bench(args))
    else:
        result = asyncio.run(_bench(args))
    if args.json_output:
        with open(args.json_output, "w") as f:
            json.dump(result, f, indent=2)
        print(f"json: {args.json_output}")
    return 0
