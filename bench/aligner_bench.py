"""`voxgate bench --aligner-dir DIR`: what word timings from the aligner (tts/aligner) cost.

One engine, one run, the bench's texts at each `--concurrency` level (default 1,16), each level run with
the aligner off and then on (`engine.aligner_dir`'s WordLane on the same engine):
* the engine's audio x both ways (on: a stream ends once its words are in);
* words latency: from a stream's last audio chunk to its words (p50 / p95);
* the aligner alone on the audio the level made, as one batched pass of its c requests: ms per chunk
  (request) and ms per second of audio.
`--aligner-dir random:0.6b`: the released aligner's shapes with random weights (no checkpoint).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import numpy as np

from bench.engine_runs import TEXTS, _percentile, _settings


async def _level(engine, texts: list[str]) -> tuple[dict, list[tuple[np.ndarray, int, str]]]:
    from tts.engine import SamplingSettings, SynthesisRequest

    async def run(text):
        stream = engine.synthesize(
            SynthesisRequest(text=text, voice="default", language="en", sampling=SamplingSettings())
        )
        pieces, last_audio, words_at = [], None, None
        async for chunk in stream:
            if len(chunk.pcm):
                pieces.append(chunk.pcm)
                last_audio = time.monotonic()
            if chunk.words is not None:
                words_at = time.monotonic()
        pcm = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        return pcm, (words_at - last_audio) * 1e3 if words_at and last_audio else None

    t0 = time.monotonic()
    out = await asyncio.gather(*[run(t) for t in texts])
    wall = time.monotonic() - t0
    audio = sum(len(p) for p, _ in out) / engine.sample_rate
    lag = [ms for _, ms in out if ms is not None]
    row = {
        "concurrency": len(texts),
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "audio_x": round(audio / wall, 3),
        "words": len(lag),
        "words_after_audio_p50_ms": round(_percentile(lag, 0.5), 1) if lag else None,
        "words_after_audio_p95_ms": round(_percentile(lag, 0.95), 1) if lag else None,
    }
    return row, [(p, engine.sample_rate, t) for (p, _), t in zip(out, texts)]


def _aligner_alone(aligner, clips, repeats: int = 3) -> dict:
    clips = [c for c in clips if len(c[0]) >= 0.02 * c[1]]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        aligner.align(clips)
        best = min(best, time.perf_counter() - t0)
    audio = sum(len(p) / rate for p, rate, _ in clips)
    return {
        "clips": len(clips),
        "audio_s": round(audio, 3),
        "batch_ms": round(best * 1e3, 1),
        "ms_per_chunk": round(best * 1e3 / len(clips), 1),
        "ms_per_audio_s": round(best * 1e3 / audio, 1),
    }


def load_aligner(spec: str, device: str, dtype: str):
    if spec.startswith("random:"):
        from tts.aligner.tiny import random_released_aligner

        if spec != "random:0.6b":
            raise SystemExit("--aligner-dir random: only random:0.6b (the released shapes)")
        return random_released_aligner(device, dtype)
    from tts.aligner import ForcedAligner

    return ForcedAligner.from_dir(spec, device, dtype)


async def _bench(args) -> dict:
    from tts.aligner.lane import WordLane
    from tts.qwen3.engine import Qwen3Engine

    levels = [int(x) for x in args.concurrency.split(",")] if args.concurrency else [1, 16]
    settings = _settings(args, args.max_batch or max(levels))
    engine = Qwen3Engine(settings)
    await engine.start()
    aligner_dtype = "float32" if settings.device == "cpu" else settings.dtype
    aligner = load_aligner(args.aligner_dir, settings.device, aligner_dtype)
    lane = WordLane(aligner, engine.deliver, engine.sample_rate)
    src = args.model_dir or f"random {args.random_weights}"
    print(f"engine: {src} on {settings.device} {settings.dtype}; aligner: {args.aligner_dir} ({aligner_dtype})")
    result: dict = {"engine": src, "aligner": args.aligner_dir, "device": settings.device, "levels": []}
    try:
        await _level(engine, [TEXTS["short"]])  # warm-up
        for c in levels:
            texts = [list(TEXTS.values())[i % 3] for i in range(c)]
            engine.lane.align_words(None)
            off, clips = await _level(engine, texts)
            engine.lane.align_words(lane)
            on, _ = await _level(engine, texts)
            engine.lane.align_words(None)
            alone = _aligner_alone(aligner, clips)
            row = {"concurrency": c, "off": off, "on": on, "aligner": alone}
            result["levels"].append(row)
            print(
                f"c={c}: audio x off {off['audio_x']}, on {on['audio_x']}; words after audio p50 "
                f"{on['words_after_audio_p50_ms']} ms, p95 {on['words_after_audio_p95_ms']} ms; aligner alone "
                f"{alone['ms_per_chunk']} ms/chunk, {alone['ms_per_audio_s']} ms per s of audio "
                f"({alone['clips']} chunks, {alone['audio_s']} s, one pass {alone['batch_ms']} ms)"
            )
            if args.json_output:
                with open(args.json_output, "w") as f:
                    json.dump(result, f, indent=2)
    finally:
        await engine.close()
        lane.shutdown()
    result["mean_audio_x_ratio_on_over_off"] = round(
        statistics.mean(r["on"]["audio_x"] / r["off"]["audio_x"] for r in result["levels"]), 3
    )
    return result


def aligner_bench_main(args) -> int:
    asyncio.run(_bench(args))
    return 0
