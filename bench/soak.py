"""Soak: N paced calls on the SimulatedEngine for T minutes; nothing may grow with the calls served.

    python -m bench.soak --calls 300 --minutes 30 --out soak-300x30

Starts `voxgate serve` as its own process and drives N native-WS callers
(μ-law 8 kHz) from this one. Each caller plays turns (agent text, listens to
the paced audio, pauses like a caller) and now and then barges in
(`interrupt` mid-turn), hangs up mid-turn (drops the socket) or ends the
session cleanly, and reconnects. Every `--every` seconds it samples the
server's /metrics: resident memory, open fds, asyncio tasks, threads,
sessions, engine requests (active + queued), GC pauses (count, time and the
longest in the interval) and shared-clock lateness (p99 in the interval).

At the end every caller hangs up; once the sessions have drained, the last
sample must be back at the first one's (taken before any call): sessions 0,
engine requests 0, tasks and fds at their baseline. Memory is reported as
growth (start → end, and the slope over the second half of the run: a leak
keeps growing, warm-up does not). Writes `soak.json` (samples, totals,
verdict) and `soak.png` (matplotlib, the `soak` extra) or `soak.svg`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

import websockets

from bench.fuzz.server import GatewayProcess, histogram_quantile

TEXTS = [
    "Thank you for calling, your order has shipped and should arrive on Tuesday.",
    "I can help with that, could you please confirm the last four digits of the card?",
    "Your appointment is booked for ten thirty tomorrow morning at the main office.",
    "The balance on your account is forty two dollars and fifteen cents as of today.",
]

SERIES = (
    "rss_mb",
    "open_fds",
    "asyncio_tasks",
    "threads",
    "sessions",
    "engine_requests",
    "gc_pauses",
    "gc_longest_ms",
    "clock_p99_ms",
)


UNDERRUN_CAUSES = ("engine", "text", "clock", "network")


def _value(text: str, name: str, label: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def sample(gw: GatewayProcess, prev: str | None, t0: float, clients: dict) -> tuple[dict | None, str | None]:
    """One row from /metrics; (None, prev) when the scrape failed (a loaded machine can time it out)."""
    text = gw.metrics()
    if "voxgate_sessions_active" not in text:
        return None, prev
    gc_count = _value(text, "voxgate_gc_collections_total")
    row = {
        "t_s": round(time.monotonic() - t0, 1),
        "rss_mb": round(_value(text, "voxgate_process_resident_bytes") / 2**20, 1),
        "open_fds": int(_value(text, "voxgate_process_open_fds")),
        "asyncio_tasks": int(_value(text, "voxgate_asyncio_tasks")),
        "threads": int(_value(text, "voxgate_threads")),
        "sessions": int(_value(text, "voxgate_sessions_active")),
        "engine_requests": int(
            _value(text, "voxgate_engine_active_requests") + _value(text, "voxgate_engine_queue_depth")
        ),
        "gc_total": int(gc_count),
        "gc_pauses": int(gc_count - (_value(prev, "voxgate_gc_collections_total") if prev else 0)),
        "gc_pause_s_total": round(_value(text, "voxgate_gc_pause_seconds_total"), 4),
        "gc_longest_ms": round(1000 * _value(text, "voxgate_gc_pause_longest_seconds"), 2),
        "clock_p99_ms": round(1000 * histogram_quantile(prev, text, "voxgate_clock_lateness_seconds", 0.99), 2)
        if prev
        else None,
        "underruns_total": int(_value(text, "voxgate_underruns_total")),
        "audible_total": int(_value(text, "voxgate_underruns_total", 'kind="audible"')),
        # engine/text: audio came late; clock: our clock stalled (a gap at every talking call); network: a slow reader
        "underruns_by_cause": {
            c: int(n) for c in UNDERRUN_CAUSES if (n := _value(text, "voxgate_underruns_total", f'cause="{c}"'))
        },
        "errors_total": int(_value(text, "voxgate_errors_total")),
        **{f"client_{k}": v for k, v in clients.items()},
    }
    return row, text


async def caller(
    url: str, stop: asyncio.Event, stats: dict, rng: random.Random, p_barge: float, p_hangup: float, p_end: float
) -> None:
    """One caller, reconnecting until `stop`: turns, barge-ins, hang-ups, clean ends."""
    await asyncio.sleep(rng.random() * 3)  # spread the starts
    while not stop.is_set():
        try:
            async with websockets.connect(url, max_size=None, compression=None, open_timeout=20) as ws:
                stats["connects"] += 1
                await ws.send(
                    json.dumps({"type": "session.start", "output": {"encoding": "mulaw", "sample_rate": 8000}})
                )
                n = 0
                while not stop.is_set():
                    n += 1
                    await ws.send(
                        json.dumps({"type": "text", "turn_id": f"t{n}", "text": rng.choice(TEXTS), "final": True})
                    )
                    roll = rng.random()
                    cut_after = rng.uniform(0.5, 2.5) if roll < p_barge + p_hangup else None
                    started = time.monotonic()
                    while True:
                        timeout = None if cut_after is None else max(0.01, started + cut_after - time.monotonic())
                        try:
                            msg = await asyncio.wait_for(ws.recv(), timeout)
                        except asyncio.TimeoutError:
                            break
                        if isinstance(msg, bytes):
                            stats["frames"] += 1
                            continue
                        m = json.loads(msg)
                        if m["type"] == "turn.done":
                            stats["turns"] += 1
                            break
                        if m["type"] == "error":
                            stats["errors"] += 1
                    if cut_after is not None and roll < p_barge:
                        stats["barge_ins"] += 1
                        await ws.send(json.dumps({"type": "interrupt"}))
                    elif cut_after is not None:
                        stats["hangups"] += 1
                        ws.transport.abort()
                        break  # a caller who hangs up mid-turn: the socket just goes
                    if rng.random() < p_end:
                        stats["clean_ends"] += 1
                        await ws.send(json.dumps({"type": "session.end"}))
                        break
                    await asyncio.sleep(rng.uniform(0.5, 1.5))
        except (OSError, asyncio.TimeoutError, websockets.ConnectionClosed, websockets.InvalidHandshake) as exc:
            stats["connection_failures"] += 1
            stats["last_failure"] = f"{type(exc).__name__}: {exc}"[:200]
        if not stop.is_set():
            stats["reconnects"] += 1
            await asyncio.sleep(rng.uniform(0.2, 1.0))


async def drive(
    gw: GatewayProcess,
    calls: int,
    seconds: float,
    every: float,
    seed: int,
    p_barge: float,
    p_hangup: float,
    p_end: float,
    on_sample=None,
) -> dict:
    stats = dict.fromkeys(
        [
            "connects",
            "reconnects",
            "turns",
            "frames",
            "barge_ins",
            "hangups",
            "clean_ends",
            "errors",
            "connection_failures",
            "failed_scrapes",
        ],
        0,
    )
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    base, prev = await loop.run_in_executor(None, sample, gw, None, t0, dict(stats))
    assert base is not None, "the gateway's /metrics could not be read"
    samples = [dict(base, phase="baseline")]
    stop = asyncio.Event()
    rng = random.Random(seed)
    tasks = [
        asyncio.create_task(
            caller(gw.ws + "/v1/ws", stop, stats, random.Random(rng.random()), p_barge, p_hangup, p_end)
        )
        for _ in range(calls)
    ]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(min(every, max(0.0, end - time.monotonic())))
        row, prev = await loop.run_in_executor(None, sample, gw, prev, t0, dict(stats))
        if row is None:
            stats["failed_scrapes"] += 1
            continue
        samples.append(dict(row, phase="calls"))
        if on_sample:
            on_sample(row)
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    for task in tasks:
        task.cancel()
    # Drain: every caller has gone; wait for the server's sessions and engine requests to reach zero.
    drain_deadline = time.monotonic() + 30
    while True:
        row, prev = await loop.run_in_executor(None, sample, gw, prev, t0, dict(stats))
        if (
            row is not None
            and (row["sessions"] == 0 and row["engine_requests"] == 0)
            or time.monotonic() > drain_deadline
        ):
            break
        await asyncio.sleep(1.0)
    await asyncio.sleep(2.0)  # connection handlers finish their close handshakes
    row = None
    for _ in range(5):
        row, prev = await loop.run_in_executor(None, sample, gw, prev, t0, dict(stats))
        if row is not None:
            break
    samples.append(dict(row, phase="after"))
    return {"samples": samples, "clients": stats}


def verdict(samples: list[dict], fd_slack: int = 2, task_slack: int = 0) -> dict:
    base, last = samples[0], samples[-1]
    during = [s for s in samples if s["phase"] == "calls"]
    half = during[len(during) // 2 :] or during
    slope = 0.0
    if len(half) >= 2 and half[-1]["t_s"] > half[0]["t_s"]:
        slope = (half[-1]["rss_mb"] - half[0]["rss_mb"]) / (half[-1]["t_s"] - half[0]["t_s"]) * 3600
    checks = {
        "sessions_back_to_0": last["sessions"] == 0,
        "engine_requests_back_to_0": last["engine_requests"] == 0,
        "tasks_back_to_baseline": last["asyncio_tasks"] <= base["asyncio_tasks"] + task_slack,
        "fds_back_to_baseline": last["open_fds"] <= base["open_fds"] + fd_slack,
        "threads_back_to_baseline": last["threads"] <= base["threads"],
    }
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "baseline": {
            k: base[k] for k in ("rss_mb", "open_fds", "asyncio_tasks", "threads", "sessions", "engine_requests")
        },
        "end": {k: last[k] for k in ("rss_mb", "open_fds", "asyncio_tasks", "threads", "sessions", "engine_requests")},
        "peak": {
            k: max(s[k] for s in samples)
            for k in ("rss_mb", "open_fds", "asyncio_tasks", "sessions", "engine_requests")
        },
        "rss_growth_mb": round(last["rss_mb"] - base["rss_mb"], 1),
        "rss_slope_second_half_mb_per_h": round(slope, 1),
        "gc_longest_ms": last["gc_longest_ms"],
        "clock_p99_ms_worst_interval": max((s["clock_p99_ms"] or 0) for s in during) if during else None,
        "audible_underruns": last["audible_total"],
        "underruns": last["underruns_total"],
        "errors": last["errors_total"],
        "underruns_by_cause": last["underruns_by_cause"],
    }


# ---------------------------------------------------------------- plots
def plot(samples: list[dict], out_dir: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _svg(samples, out_dir / "soak.svg")
    fig, axes = plt.subplots(len(SERIES), 1, figsize=(9, 2 * len(SERIES)), sharex=True)
    t = [s["t_s"] / 60 for s in samples]
    for ax, key in zip(axes, SERIES):
        ax.plot(t, [s[key] if s[key] is not None else float("nan") for s in samples], lw=1.2)
        ax.set_ylabel(key, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    path = out_dir / "soak.png"
    fig.savefig(path, dpi=90)
    return path


def _svg(samples: list[dict], path: Path) -> Path:
    """One small line chart per series, no dependencies."""
    w, h, pad = 720, 90, 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{(h + 20) * len(SERIES) + 20}" font-family="sans-serif" font-size="11">'
    ]
    tmax = max(s["t_s"] for s in samples) or 1
    for i, key in enumerate(SERIES):
        y0 = 10 + i * (h + 20)
        vals = [(s["t_s"], s[key]) for s in samples if s[key] is not None]
        lo, hi = (min(v for _, v in vals), max(v for _, v in vals)) if vals else (0, 1)
        span = (hi - lo) or 1
        pts = " ".join(f"{pad + (t / tmax) * (w - 2 * pad):.1f},{y0 + h - (v - lo) / span * h:.1f}" for t, v in vals)
        parts.append(f'<rect x="{pad}" y="{y0}" width="{w - 2 * pad}" height="{h}" fill="none" stroke="#ccc"/>')
        parts.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
        parts.append(f'<text x="{pad + 4}" y="{y0 + 12}">{key}: {lo:g} … {hi:g}</text>')
    parts.append(
        f'<text x="{w - pad}" y="{(h + 20) * len(SERIES) + 10}" text-anchor="end">{tmax / 60:.1f} min</text></svg>'
    )
    path.write_text("\n".join(parts))
    return path


def run(
    calls: int,
    minutes: float,
    out: str,
    every: float = 10.0,
    seed: int = 0,
    p_barge: float = 0.15,
    p_hangup: float = 0.05,
    p_end: float = 0.1,
    quiet: bool = False,
) -> dict:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    gw = GatewayProcess(max_sessions=max(100, 2 * calls), log_dir=str(out_dir / "server")).start()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()

    def show(row: dict) -> None:
        if not quiet:
            print(
                " ".join(
                    f"{k}={row[k]}"
                    for k in (
                        "t_s",
                        "sessions",
                        "rss_mb",
                        "open_fds",
                        "asyncio_tasks",
                        "engine_requests",
                        "gc_pauses",
                        "gc_longest_ms",
                        "clock_p99_ms",
                        "client_turns",
                    )
                ),
                flush=True,
            )

    try:
        result = asyncio.run(drive(gw, calls, minutes * 60, every, seed, p_barge, p_hangup, p_end, show))
        alive = gw.alive()
        crashes = gw.crashes_in(gw.new_log())
    finally:
        gw.stop()
    report = {
        "calls": calls,
        "minutes": minutes,
        "every_s": every,
        "seed": seed,
        "started_utc": started,
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "alive": alive,
        "clients": result["clients"],
        "verdict": verdict(result["samples"]),
        "samples": result["samples"],
    }
    report["verdict"]["log_tracebacks"] = len(crashes)
    report["verdict"]["log_traceback_examples"] = crashes[:2]
    report["verdict"]["checks"]["no_unhandled_errors_in_log"] = not crashes
    report["verdict"]["ok"] = report["verdict"]["ok"] and alive and not crashes
    (out_dir / "soak.json").write_text(json.dumps(report, indent=2))
    report["plot"] = str(plot(result["samples"], out_dir))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="soak-out")
    args = ap.parse_args(argv)
    report = run(args.calls, args.minutes, args.out, args.every, args.seed)
    v = report["verdict"]
    print(json.dumps({k: v[k] for k in v if k != "checks"}, indent=1))
    print("checks:", v["checks"], "clients:", report["clients"], "plot:", report["plot"])
    return 0 if v["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
