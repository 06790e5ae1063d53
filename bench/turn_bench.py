"""`voxgate bench --turn-mode --llm-rate N`: turn mode against sentence mode on the same agent turns,
fed word by word at an LLM's rate, one turn at a time, on one Qwen3 engine.

Per turn and mode: first audio from the first token, the audible pauses a caller's playback would
have (audio played as it arrives, in order, from the first packet on), their total length, the
engine's turn pauses (steps it waited for text), the requests it took and the audio length.
Sentence mode cuts with the gateway's own chunker (its config defaults) and submits each chunk as
it is cut; turn mode opens one turn and appends each word.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

TURNS = [
    "Thanks for calling. I can see your order from Tuesday, and it left our warehouse this morning.",
    "Your new plan starts on the first of next month. Until then, nothing changes on your bill, "
    "and you keep every minute you have left.",
    "Sure, let me check that for you. The earliest slot I have is Thursday at ten, or Friday after lunch.",
]


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"\s*\S+", text)


def _playback(pieces: list[tuple[float, float]], min_gap_s: float = 0.02) -> tuple[int, float]:
    """pieces: (arrival s, duration s) in play order -> (audible gaps, their total seconds)."""
    if not pieces:
        return 0, 0.0
    clock, gaps, total = pieces[0][0], 0, 0.0
    for arrival, dur in pieces:
        if arrival > clock + 1e-9:
            wait = arrival - clock
            if wait >= min_gap_s:
                gaps, total = gaps + 1, total + wait
            clock = arrival
        clock += dur
    return gaps, total


async def _turn_mode(engine, text, rate, request_kw):
    from tts import SynthesisRequest

    stream = engine.open_turn(SynthesisRequest(text="", **request_kw))
    t0 = time.monotonic()

    async def feed():
        for i, w in enumerate(_words(text)):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            stream.append(w)
        stream.finish()

    feeder = asyncio.ensure_future(feed())
    pieces = []
    async for chunk in stream:
        if len(chunk.pcm):
            pieces.append((time.monotonic() - t0, len(chunk.pcm) / 24000))
    await feeder
    return pieces, 1


async def _sentence_mode(engine, text, rate, request_kw):
    from gateway.config import ChunkerConfig
    from gateway.core.chunker import Chunker
    from tts import SynthesisRequest

    c = ChunkerConfig()
    chunker = Chunker(c.first_chunk_words, c.max_chunk_chars, c.min_chunk_chars, min_first_chars=c.min_first_chars)
    t0 = time.monotonic()
    streams, collected = [], []

    async def collect(stream, out):
        async for chunk in stream:
            if len(chunk.pcm):
                out.append((time.monotonic() - t0, len(chunk.pcm) / 24000))

    def submit(chunks):
        for chunk in chunks:
            out: list = []
            collected.append(out)
            streams.append(
                asyncio.ensure_future(collect(engine.synthesize(SynthesisRequest(text=chunk, **request_kw)), out))
            )

    words = _words(text)
    for i, w in enumerate(words):
        await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        submit(chunker.push(w))
    submit(chunker.flush())
    await asyncio.gather(*streams)
    return [p for out in collected for p in out], len(collected)


async def _run(engine, rate: float, repeats: int, turns: list[str] = TURNS) -> dict:
    from tts import SamplingSettings

    request_kw = dict(voice="default", language="en", sampling=SamplingSettings(seed=0))
    rows = {"sentence": [], "turn": []}
    for _ in range(repeats):
        for text in turns:
            for mode in ("sentence", "turn"):  # interleaved: the shared box's drift hits both
                pauses0 = engine.counters.get("turn_pauses", 0)
                run = _turn_mode if mode == "turn" else _sentence_mode
                pieces, requests = await run(engine, text, rate, request_kw)
                gaps, gap_s = _playback(pieces)
                rows[mode].append(
                    {
                        "first_audio_ms": round(pieces[0][0] * 1000, 1) if pieces else None,
                        "gaps": gaps,
                        "gap_s": round(gap_s, 3),
                        "audio_s": round(sum(d for _, d in pieces), 2),
                        "engine_pauses": engine.counters.get("turn_pauses", 0) - pauses0,
                        "requests": requests,
                    }
                )
    return rows


def _summary(rows: list[dict]) -> dict:
    import statistics

    firsts = [r["first_audio_ms"] for r in rows if r["first_audio_ms"] is not None]
    n = len(rows)
    return {
        "turns": n,
        "first_audio_ms_p50": round(statistics.median(firsts), 1) if firsts else None,
        "first_audio_ms_max": max(firsts) if firsts else None,
        "gaps_per_turn": round(sum(r["gaps"] for r in rows) / n, 2),
        "gap_s_per_turn": round(sum(r["gap_s"] for r in rows) / n, 3),
        "engine_pauses_per_turn": round(sum(r["engine_pauses"] for r in rows) / n, 2),
        "requests_per_turn": round(sum(r["requests"] for r in rows) / n, 2),
        "audio_s_per_turn": round(sum(r["audio_s"] for r in rows) / n, 2),
    }


def turn_bench_main(args) -> int:
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    if not args.model_dir:
        print("voxgate bench: bad_args: --turn-mode needs --model-dir (a checkpoint with a tokenizer)", file=sys.stderr)
        return 2
    rate = args.llm_rate
    if not rate or rate <= 0:
        print("voxgate bench: bad_args: --llm-rate must be a positive number of tokens per second", file=sys.stderr)
        return 2
    device = args.device or "cpu"
    s = EngineSettings(
        model_dir=args.model_dir,
        device=device,
        dtype=args.dtype or ("float32" if device == "cpu" else "bfloat16"),
        max_batch=args.max_batch or 8,
        max_seq_len=1024,
        vocoder=args.vocoder,
    )
    if args.turn_frames_per_token:  # random tiny weights never end by EOS: their lengths are the caps
        s.frames_base, s.frames_per_token = 4, float(args.turn_frames_per_token)
    engine = Qwen3Engine(s)

    async def main():
        await engine.start()
        try:
            turns = getattr(args, "turn_texts", None) or TURNS
            await _run(engine, rate, 1, turns[:1])  # warm-up (first prompts, allocations)
            return await _run(engine, rate, args.turn_repeats, turns)
        finally:
            await engine.close()

    rows = asyncio.run(main())
    out = {
        "llm_rate": rate,
        "device": device,
        "frames_per_token": s.frames_per_token,
        "frames_base": s.frames_base,
        "sentence": _summary(rows["sentence"]),
        "turn": _summary(rows["turn"]),
        "rows": rows,
    }
    print(f"LLM at {rate:g} tokens/s (a word each), {len(TURNS)} turns x {args.turn_repeats}, one at a time, {device}")
    print(
        "| mode | first audio p50 / max (ms, from the first token) | audible pauses / turn | pause s / turn "
        "| engine waits / turn | requests / turn | audio s / turn |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode in ("sentence", "turn"):
        m = out[mode]
        print(
            f"| {mode} | {m['first_audio_ms_p50']} / {m['first_audio_ms_max']} | {m['gaps_per_turn']} | "
            f"{m['gap_s_per_turn']} | {m['engine_pauses_per_turn']} | {m['requests_per_turn']} | {m['audio_s_per_turn']} |"
        )
    if args.json_output:
        with open(args.json_output, "w") as f:
            json.dump(out, f, indent=1)
    if getattr(args, "plot", None):
        from bench import plots

        plots.write_plot(
            "turn_mode", out, args.plot, plots.command_line(argv=getattr(args, "argv", None)), label=f"{rate:g} words/s"
        )
    return 0
