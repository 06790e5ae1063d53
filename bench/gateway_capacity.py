"""How many paced sessions one gateway process holds before its own pacing slips.

Starts `voxgate serve` as a subprocess with the SimulatedEngine at RTF 0.1 per
stream and a shared capacity far above the load (so the engine is never the
bottleneck), drives N native-protocol sessions from this process (each speaks
a turn of ~5 s, pauses 1 s like a caller, repeats), and reads the server's own
numbers from /metrics: how late each 20 ms clock tick ran (p50/p99, from the
histogram), ticks dropped after stalls, and underruns. A level "holds" when the
tick lateness p99 stays within one frame (20 ms) and there are no underruns.

    python -m bench.gateway_capacity --levels 50,100,200,300 --window 15
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import websockets

from bench.loadtest.servers import cpu_seconds, free_port

TURN_TEXTS = [
    "Thank you for calling, your order has shipped and should arrive on Tuesday.",
    "I can help with that, could you please confirm the last four digits of the card?",
    "Your appointment is booked for ten thirty tomorrow morning at the main office.",
    "The balance on your account is forty two dollars and fifteen cents as of today.",
]

CONFIG = """
server: {{host: 127.0.0.1, port: {port}, max_sessions: 5000, limits: {{idle_timeout_s: 600}}}}
engine: {{kind: simulated}}
simulated: {{first_packet_ms: 60, capacity_x: 100000, ms_per_char: 70, stream_rtf: 0.1, max_queued: 100000}}
playout: {{prebuffer_ms: 60}}
"""


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_values(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def lateness_quantiles(before: str, after: str) -> tuple[float, float, float, int]:
    """p50, p99 (ms, bucket-interpolated), share of ticks later than 20 ms, and tick count over the window."""
    b = metric_values(before, "voxgate_clock_lateness_seconds_bucket")
    a = metric_values(after, "voxgate_clock_lateness_seconds_bucket")
    buckets = []
    for key, value in a.items():
        le = re.search(r'le="([^"]+)"', key).group(1)
        buckets.append((float("inf") if le == "+Inf" else float(le), value - b.get(key, 0.0)))
    buckets.sort()
    total = buckets[-1][1]
    if total <= 0:
        return float("nan"), float("nan"), float("nan"), 0

    def q(p: float) -> float:
        target, prev_le, prev_n = p * total, 0.0, 0.0
        for le, n in buckets:
            if n >= target:
                if le == float("inf"):
                    return prev_le * 1000
                frac = (target - prev_n) / max(n - prev_n, 1e-9)
                return (prev_le + frac * (le - prev_le)) * 1000
            prev_le, prev_n = le, n
        return prev_le * 1000

    over_20 = total - dict(buckets)[0.02]
    return q(0.5), q(0.99), over_20 / total, int(total)


def counter_sum(text: str, name: str, label_filter: str = "") -> float:
    return sum(v for k, v in metric_values(text, name).items() if not k.startswith(name + "_created") and label_filter in k)


async def caller(url: str, stop: asyncio.Event, stats: dict, rng: random.Random) -> None:
    async with websockets.connect(url, max_size=None, compression=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "output": {"encoding": "mulaw", "sample_rate": 8000}}))
        await asyncio.sleep(rng.random())  # spread the turn starts
        n = 0
        while not stop.is_set():
            n += 1
            await ws.send(json.dumps({"type": "text", "turn_id": f"t{n}", "text": rng.choice(TURN_TEXTS), "final": True}))
            while True:
                msg = await ws.recv()
                if isinstance(msg, bytes):
                    stats["frames"] += 1
                    continue
                m = json.loads(msg)
                if m["type"] == "turn.done":
                    stats["turns"] += 1
                    break
                if m["type"] == "error":
                    stats["errors"] += 1
            await asyncio.sleep(1.0)
        await ws.send(json.dumps({"type": "session.end"}))


async def run_level(port: int, pid: int, n: int, window: float, warmup: float) -> dict:
    url = f"ws://127.0.0.1:{port}/v1/ws"
    stop = asyncio.Event()
    stats = {"frames": 0, "turns": 0, "errors": 0}
    rng = random.Random(n)
    tasks = []
    for _ in range(n):
        tasks.append(asyncio.create_task(caller(url, stop, stats, rng)))
        await asyncio.sleep(0.005)
    await asyncio.sleep(warmup)
    before, f0, t0, c0 = scrape(port), stats["frames"], time.monotonic(), cpu_seconds(pid)
    await asyncio.sleep(window)
    after, f1, t1, c1 = scrape(port), stats["frames"], time.monotonic(), cpu_seconds(pid)
    stop.set()
    await asyncio.wait(tasks, timeout=15)
    p50, p99, over, ticks = lateness_quantiles(before, after)
    underruns = counter_sum(after, "voxgate_underruns_total") - counter_sum(before, "voxgate_underruns_total")
    # engine/text: audio came late; clock: our own clock stalled (a skipped tick is a gap at every talking call);
    # network: the client read too slowly and frames were skipped
    by_cause: dict[str, int] = {}
    b = metric_values(before, "voxgate_underruns_total")
    for key, value in metric_values(after, "voxgate_underruns_total").items():
        cause = re.search(r'cause="([^"]*)"', key)
        if cause and not key.startswith("voxgate_underruns_total_created") and value - b.get(key, 0.0):
            by_cause[cause.group(1)] = by_cause.get(cause.group(1), 0) + int(value - b.get(key, 0.0))
    skipped = counter_sum(after, "voxgate_clock_skipped_ticks_total") - counter_sum(before, "voxgate_clock_skipped_ticks_total")
    dropped = counter_sum(after, "voxgate_frames_dropped_total") - counter_sum(before, "voxgate_frames_dropped_total")
    return {
        "sessions": n,
        "ticks": ticks,
        "lateness_p50_ms": round(p50, 2),
        "lateness_p99_ms": round(p99, 2),
        "ticks_over_20ms_pct": round(100 * over, 3),
        "skipped_ticks": int(skipped),
        "underruns": int(underruns),
        "underruns_by_cause": by_cause,
        "frames_dropped": int(dropped),
        "frames_per_s_received": round((f1 - f0) / (t1 - t0), 1),
        "server_cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 1),
        "server_cpu_us_per_frame": round(1e6 * (c1 - c0) / max(f1 - f0, 1), 1),
        "errors": stats["errors"],
        "holds": p99 <= 20.0 and underruns == 0 and skipped == 0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="50,100,200,300")
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--json-output")
    args = ap.parse_args(argv)
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG.format(port=port))
        cfg_path = f.name
    server = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", cfg_path, "--log-level", "WARNING"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        rows = []
        print(f"{'sessions':>8} {'late p50':>9} {'late p99':>9} {'>20ms %':>8} {'skipped':>8} {'underruns':>9} {'dropped':>8} {'frames/s':>9} {'cpu %':>6} {'us/frame':>8} {'holds':>6}", flush=True)
        for level in [int(x) for x in args.levels.split(",")]:
            row = asyncio.run(run_level(port, server.pid, level, args.window, args.warmup))
            rows.append(row)
            print(f"{row['sessions']:>8} {row['lateness_p50_ms']:>9} {row['lateness_p99_ms']:>9} {row['ticks_over_20ms_pct']:>8} "
                  f"{row['skipped_ticks']:>8} {row['underruns']:>9} {row['frames_dropped']:>8} {row['frames_per_s_received']:>9} {row['server_cpu_pct']:>6} {row['server_cpu_us_per_frame']:>8} {str(row['holds']):>6}", flush=True)
            time.sleep(2)
        for row in rows:
            if row["underruns_by_cause"]:
                print(f"underruns at {row['sessions']} by cause: " + ", ".join(f"{k} {v}" for k, v in row["underruns_by_cause"].items()))
        held = [r["sessions"] for r in rows if r["holds"]]
        print(f"holds up to {max(held) if held else 0} paced sessions (cpu count {os.cpu_count()})")
        if args.json_output:
            with open(args.json_output, "w") as f:
                json.dump({"levels": rows, "cpu_count": os.cpu_count()}, f, indent=2)
    finally:
        server.terminate()
        server.wait(timeout=30)
        os.unlink(cfg_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
