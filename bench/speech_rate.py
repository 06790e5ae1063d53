"""Time to first audio and audio-seconds per second of a streaming OpenAI-compatible speech server.

    python -m bench.speech_rate --url http://127.0.0.1:8091/v1 --voice vivian -n 5 --concurrency 1

Each request is `POST {url}/audio/speech` with streamed raw 16-bit PCM (vLLM-Omni's `stream: true`,
`stream_format: audio`, as voxgate's `engine.kind: openai-speech` sends it). TTFA is request sent → first audio
byte; the rate is audio seconds received per wall-clock second of the whole run (all requests together).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp

TEXT = "Hello, and thank you for calling. Your appointment is confirmed for Tuesday."


async def one(http: aiohttp.ClientSession, url: str, body: dict) -> tuple[float, int]:
    t0 = time.perf_counter()
    first = None
    size = 0
    async with http.post(f"{url}/audio/speech", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {await r.text()}")
        async for data in r.content.iter_any():
            if first is None:
                first = time.perf_counter() - t0
            size += len(data)
    return first or 0.0, size


async def run(args) -> None:
    body = {
        "input": args.text,
        "response_format": "pcm",
        "stream": True,
        "stream_format": "audio",
        "sample_rate": args.sample_rate,
        "language": args.language,
    }
    if args.voice:
        body["voice"] = args.voice
    sem = asyncio.Semaphore(args.concurrency)
    timeout = aiohttp.ClientTimeout(total=args.timeout)

    async def guarded(http):
        async with sem:
            return await one(http, args.url.rstrip("/"), body)

    async with aiohttp.ClientSession(timeout=timeout) as http:
        await one(http, args.url.rstrip("/"), body)  # warm-up, not counted
        t0 = time.perf_counter()
        results = await asyncio.gather(*(guarded(http) for _ in range(args.n)))
        wall = time.perf_counter() - t0
    ttfa = sorted(r[0] * 1000 for r in results)
    audio_s = sum(r[1] for r in results) / 2 / args.sample_rate
    print(f"requests {args.n}  concurrency {args.concurrency}  audio {audio_s:.1f} s  wall {wall:.1f} s")
    print(
        f"TTFA p50 {statistics.median(ttfa):.0f} ms  max {ttfa[-1]:.0f} ms  "
        f"audio-seconds per second {audio_s / wall:.2f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8091/v1")
    p.add_argument("--voice")
    p.add_argument("--language", default="English")
    p.add_argument("--text", default=TEXT)
    p.add_argument("--sample-rate", type=int, default=24000)
    p.add_argument("-n", type=int, default=5, help="requests counted (after one warm-up)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
