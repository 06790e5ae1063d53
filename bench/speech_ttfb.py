"""Time to first byte of POST /v1/audio/speech, per response format, against a running gateway or an in-process one.

    python -m bench.speech_ttfb --config configs/simulated.yaml --formats pcm,wav,opus,mp3,flac,aac -n 20
    python -m bench.speech_ttfb --gateway http://127.0.0.1:8080 --api-key KEY -n 20 --concurrency 8

TTFB is request sent → first body byte received (the status line waits for the first
audio); `total` is request sent → last byte. Requests run `--concurrency` at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp

DEFAULT_TEXT = "Hello, and thank you for calling. Your appointment is confirmed for Tuesday at three in the afternoon."


async def one(http: aiohttp.ClientSession, url: str, fmt: str, text: str, headers: dict) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    first = None
    size = 0
    async with http.post(
        url, json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": fmt}, headers=headers
    ) as r:
        if r.status != 200:
            raise RuntimeError(f"{fmt}: HTTP {r.status}: {await r.text()}")
        async for data in r.content.iter_any():
            if first is None:
                first = time.perf_counter() - t0
            size += len(data)
    return first or 0.0, time.perf_counter() - t0, size


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def run(args) -> None:
    gateway = None
    base = args.gateway
    if base is None:
        from gateway.app import Gateway
        from gateway.config import load_config

        gateway = Gateway(load_config(args.config))
        await gateway.start(host="127.0.0.1", port=0)
        base = f"http://127.0.0.1:{gateway.port}"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    url = base.rstrip("/") + "/v1/audio/speech"
    try:
        async with aiohttp.ClientSession() as http:
            await one(http, url, "pcm", "Warm up.", headers)
            print(f"{'format':7} {'n':>4} {'ttfb p50':>9} {'ttfb p95':>9} {'total p50':>10} {'bytes':>8}")
            for fmt in args.formats.split(","):
                sem = asyncio.Semaphore(args.concurrency)

                async def limited():
                    async with sem:
                        return await one(http, url, fmt, args.text, headers)

                results = await asyncio.gather(*(limited() for _ in range(args.n)))
                ttfb = [r[0] * 1000 for r in results]
                total = [r[1] * 1000 for r in results]
                print(
                    f"{fmt:7} {args.n:>4} {statistics.median(ttfb):>7.1f}ms {pct(ttfb, 0.95):>7.1f}ms {statistics.median(total):>8.1f}ms "
                    f"{int(statistics.median([r[2] for r in results])):>8}"
                )
    finally:
        if gateway is not None:
            await gateway.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gateway", help="base URL of a running gateway (default: start one in-process from --config)")
    p.add_argument("--config", default="configs/simulated.yaml")
    p.add_argument("--api-key")
    p.add_argument("--formats", default="pcm,wav,opus,mp3,flac,aac")
    p.add_argument("-n", type=int, default=10, help="requests per format")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--text", default=DEFAULT_TEXT)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
