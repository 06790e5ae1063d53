"""Small batches, serial or on the vocoder lane: one engine configuration per process, levels c=1 and c=16.

    python -m bench.vocoder_mode_bench --model-dir DIR --mode lane|auto|serial [--frames 100]

`lane`: the lane always (serial_vocoder_rows=0, as before); `auto`: the engine's measured choice for small
batches (the default); `serial`: no lane (pipeline off). One mode per process, since torch's thread count
is the process's; run the modes interleaved (a shared box drifts). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from bench.engine_runs import TEXTS

MODES = {"lane": {"serial_vocoder_rows": 0}, "auto": {}, "serial": {"pipeline": False}}


async def _level(engine, c: int) -> dict:
    from tts.engine import SamplingSettings, SynthesisRequest

    texts = [list(TEXTS.values())[i % 3] for i in range(c)]
    t0 = time.monotonic()
    firsts: list[float] = []
    audio = 0.0

    async def run(stream) -> None:
        nonlocal audio
        first = None
        async for chunk in stream:
            first = time.monotonic() - t0 if first is None else first
            audio += chunk.duration_s
        firsts.append(first)

    await asyncio.gather(
        *[
            run(engine.synthesize(SynthesisRequest(text=t, language="en", sampling=SamplingSettings(greedy=True))))
            for t in texts
        ]
    )
    return {
        "audio_x": round(audio / (time.monotonic() - t0), 2),
        "first_audio_p50_ms": round(sorted(firsts)[len(firsts) // 2] * 1e3, 1),
    }


async def _main(args) -> dict:
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    s = EngineSettings(
        model_dir=args.model_dir,
        device="cpu",
        dtype="float32",
        max_batch=16,
        max_queued=1000,
        frames_base=args.frames,
        frames_per_token=0,
        max_frames=args.frames,
        ignore_eos=True,
        max_seq_len=400 + args.frames,
        **MODES[args.mode],
    )
    engine = Qwen3Engine(s)
    await engine.start()
    try:
        await _level(engine, 1)  # warm-up
        out = {"mode": args.mode, "c1": await _level(engine, 1), "c16": await _level(engine, 16)}
    finally:
        await engine.close()
    out.update(
        threads_at_end=engine.cpu_threads,
        vocoder_waited=engine.counters["vocoder_waited"],
        vocoder_overlapped=engine.counters["vocoder_overlapped"],
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--mode", choices=sorted(MODES), required=True)
    p.add_argument("--frames", type=int, default=100)
    print(json.dumps(asyncio.run(_main(p.parse_args(argv)))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
