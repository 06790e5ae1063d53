"""What the one-hop forward costs, measured (not a test): Twilio calls with both legs on one node, against calls
whose media leg lands on a second node and is forwarded to the first. Real redis-server and gateway processes.

    PYTHONPATH=. python -m tests.cluster.probe_forward --calls 20 --seconds 6

Reports, per mode: `interrupt` → `clear` at the Twilio far end (median, p95), media frame inter-arrival p99
and its worst, and the CPU the forwarding node spent per relayed frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import websockets

from tests.conftest import CLUSTER_SECRET_ENV
from tests.cluster.harness import Node, Redis
from tests.telephony.clients import Control, TwilioClient


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, clock ticks


async def one_call(control_base: str, media_base: str, call_id: str, seconds: float, out: dict) -> None:
    control = Control(await websockets.connect(f"{control_base}/v1/control"))
    await control.attach(call_id)
    tw = TwilioClient(
        await websockets.connect(f"{media_base}/v1/twilio", compression=None), f"MZ{call_id}", f"CA{call_id}"
    )
    tw.echo_marks(0.0)
    await tw.start(params={"call_id": call_id})
    await control.expect("call.media", timeout=10)
    await control.send(
        {
            "type": "text",
            "turn_id": "t",
            "text": "A long enough turn to keep the line busy for a while. " * 12,
            "final": True,
        }
    )
    arrivals = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        msg, at = await tw.recv(5)
        if msg["event"] == "media":
            arrivals.append(at)
    sent = time.monotonic()
    await control.send({"type": "interrupt"})
    while True:
        msg, at = await tw.recv(5)
        if msg["event"] == "clear":
            out["clear_ms"].append((at - sent) * 1000)
            break
    gaps = [(b - a) * 1000 for a, b in zip(arrivals[5:], arrivals[6:])]
    out["gaps_ms"].extend(gaps)
    out["frames"] += len(arrivals)
    await tw.stop()
    await control.expect_closed()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def run(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="probe-forward-"))
    redis = Redis(tmp)
    redis.start()
    cfg = {
        "engine": {"kind": "simulated"},
        "playout": {"prebuffer_ms": 60},
        "server": {"max_sessions": 500},
        "telephony": {"unknown_call_timeout_s": 10},
        "cluster": {"redis_url": redis.url, "secret_env": CLUSTER_SECRET_ENV},
    }
    owner, relay = Node("owner", "127.0.0.2", tmp, cfg), Node("relay", "127.0.0.3", tmp, cfg)
    try:
        for node in (owner, relay):
            node.start(wait=False)
        for node in (owner, relay):
            node.wait_ready()
        report = {}
        for mode, media in (("one node", owner), ("forwarded", relay)):
            out = {"clear_ms": [], "gaps_ms": [], "frames": 0}
            cpu0 = cpu_seconds(relay.proc.pid)
            await asyncio.gather(
                *(one_call(owner.ws, media.ws, f"{mode[:3]}-{i}", args.seconds, out) for i in range(args.calls))
            )
            cpu = cpu_seconds(relay.proc.pid) - cpu0
            report[mode] = {
                "calls": args.calls,
                "frames": out["frames"],
                "interrupt_to_clear_ms": {
                    "median": round(statistics.median(out["clear_ms"]), 2),
                    "p95": round(pct(out["clear_ms"], 0.95), 2),
                },
                "frame_gap_ms": {"p99": round(pct(out["gaps_ms"], 0.99), 2), "max": round(max(out["gaps_ms"]), 2)},
                "relay_node_cpu_us_per_frame": round(cpu / max(1, out["frames"]) * 1e6, 1),
            }
        print(json.dumps(report, indent=2))
    finally:
        owner.stop()
        relay.stop()
        redis.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--seconds", type=float, default=6.0)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
