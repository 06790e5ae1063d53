"""Measures the telephony legs under N concurrent calls (not a test: prints numbers).

Starts `voxgate serve` in its own process with the SimulatedEngine (ample
capacity: this measures the transport, not the engine), opens N calls of one
kind (Twilio + control socket, or AudioSocket + control socket), has each
agent speak one long turn, and reports frame inter-arrival times at the far
end, the server's own clock lateness, and the server's CPU per call.

    .venv/bin/python -m tests.telephony.probe_pacing --leg twilio --calls 50 --seconds 8
    .venv/bin/python -m tests.telephony.probe_pacing --leg audiosocket --calls 50 --seconds 8
    .venv/bin/python -m tests.telephony.probe_pacing --leg bargein --calls 20   # 20 interrupts per leg
    .venv/bin/python -m tests.telephony.probe_pacing --leg frame-cost
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import timeit
import uuid

import numpy as np
import websockets

from audio.g711 import ulaw_encode
from bench.loadtest.servers import cpu_seconds, free_port


async def control_for(base: str, call_id: str, text: str, start: asyncio.Event) -> dict:
    async with websockets.connect(f"{base}/v1/control", compression=None) as ws:
        await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
        while json.loads(await ws.recv())["type"] != "call.media":
            pass
        await start.wait()
        await ws.send(json.dumps({"type": "text", "turn_id": "t", "text": text, "final": True}))
        while True:
            ev = json.loads(await ws.recv())
            if ev["type"] == "turn.done":
                return ev


async def twilio_call(base: str, n: int, text: str, start: asyncio.Event, arrivals: list) -> dict:
    sid = f"MZprobe{n}"
    async with websockets.connect(f"{base}/v1/twilio", compression=None) as tw:
        await tw.send(
            json.dumps({"event": "start", "streamSid": sid, "start": {"streamSid": sid, "callSid": f"CA{n}"}})
        )
        agent = asyncio.create_task(control_for(base, f"CA{n}", text, start))
        times = []
        while not agent.done():
            try:
                msg = json.loads(await asyncio.wait_for(tw.recv(), 0.5))
            except asyncio.TimeoutError:
                continue
            if msg["event"] == "media":
                times.append(time.monotonic())
            elif msg["event"] == "mark":
                await tw.send(json.dumps({"event": "mark", "streamSid": sid, "mark": msg["mark"]}))
        arrivals.append(times)
        await tw.send(json.dumps({"event": "stop", "streamSid": sid}))
        return await agent


async def audiosocket_call(base: str, port: int, text: str, start: asyncio.Event, arrivals: list) -> dict:
    call = uuid.uuid4()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">BH", 1, 16) + call.bytes)
    agent = asyncio.create_task(control_for(base, str(call), text, start))
    times = []
    silence = struct.pack(">BH", 0x10, 320) + bytes(320)
    while not agent.done():
        kind, length = struct.unpack(">BH", await reader.readexactly(3))
        await reader.readexactly(length)
        if kind == 0x10 and start.is_set():
            times.append(time.monotonic())
            writer.write(silence)  # Asterisk sends the caller's audio at the same pace
    arrivals.append(times)
    writer.write(struct.pack(">BH", 0, 0))
    writer.close()
    return await agent


def summarize(arrivals: list[list[float]]) -> dict:
    gaps = np.concatenate([np.diff(t) for t in arrivals if len(t) > 1]) * 1000
    return {
        "frames": int(sum(len(t) for t in arrivals)),
        "interarrival_ms_p50": round(float(np.percentile(gaps, 50)), 2),
        "p99": round(float(np.percentile(gaps, 99)), 2),
        "max": round(float(gaps.max()), 2),
        "share_over_40ms": round(float((gaps > 40).mean()), 5),
    }


def lateness_p99_bucket(metrics: str) -> str:
    buckets = [
        (float(le), float(v))
        for le, v in re.findall(r'voxgate_clock_lateness_seconds_bucket\{le="([0-9.e+-]+)"\} ([0-9.e+]+)', metrics)
    ]
    total = float(re.search(r"voxgate_clock_lateness_seconds_count ([0-9.e+]+)", metrics).group(1))
    for le, count in buckets:
        if count >= 0.99 * total:
            return f"<= {le * 1000:g} ms"
    return "> 320 ms"


async def run(args) -> None:
    http_port, as_port = free_port(), free_port()
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write(f"""server: {{host: 127.0.0.1, port: {http_port}, max_sessions: 2000}}
engine: {{kind: simulated}}
simulated: {{first_packet_ms: 60, capacity_x: 2000, ms_per_char: 70, stream_rtf: 0.1}}
telephony: {{audiosocket_port: {as_port}}}
""")
    cfg.close()
    server = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", cfg.name, "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        server.stdout.readline()  # "voxgate listening on …"
        base = f"ws://127.0.0.1:{http_port}"
        if args.leg == "bargein":
            print(json.dumps(await bargein(base, as_port, args.calls)))
            return
        text = " ".join(["This sentence keeps the line busy for a while."] * max(1, int(args.seconds / 3.3)))
        start = asyncio.Event()
        arrivals: list[list[float]] = []
        if args.leg == "twilio":
            calls = [asyncio.create_task(twilio_call(base, n, text, start, arrivals)) for n in range(args.calls)]
        else:
            calls = [
                asyncio.create_task(audiosocket_call(base, as_port, text, start, arrivals)) for n in range(args.calls)
            ]
        await asyncio.sleep(1.0 + args.calls * 0.01)
        cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
        start.set()
        done = await asyncio.gather(*calls)
        cpu = cpu_seconds(server.pid) - cpu0
        wall = time.monotonic() - t0
        import urllib.request

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics").read().decode()
        gaps = sum(d["gaps"]["micro"] + d["gaps"]["audible"] for d in done)
        print(
            json.dumps(
                {
                    "leg": args.leg,
                    "calls": args.calls,
                    "wall_s": round(wall, 1),
                    "played_s_per_call": round(float(np.mean([d["played_ms"] for d in done])) / 1000, 2),
                    "server_cpu_pct": round(100 * cpu / wall, 1),
                    "server_cpu_ms_per_call_second": round(1000 * cpu / wall / args.calls, 3),
                    "clock_lateness_p99": lateness_p99_bucket(metrics),
                    "playout_gaps": gaps,
                    **summarize(arrivals),
                }
            )
        )
    finally:
        server.terminate()
        server.wait(30)
        os.unlink(cfg.name)


async def bargein(base: str, as_port: int, reps: int) -> dict:
    """Interrupt → Twilio `clear` received; interrupt → first silent AudioSocket frame (ms, one call at a time)."""
    text = "A long answer that the caller will interrupt right in the middle of it. " * 4
    twilio_ms, as_ms = [], []
    async with (
        websockets.connect(f"{base}/v1/twilio", compression=None) as tw,
        websockets.connect(f"{base}/v1/control") as ctl,
    ):
        await tw.send(
            json.dumps({"event": "start", "streamSid": "MZb", "start": {"streamSid": "MZb", "callSid": "CAb"}})
        )
        await ctl.send(json.dumps({"type": "call.attach", "call_id": "CAb"}))
        for i in range(reps):
            await ctl.send(json.dumps({"type": "text", "turn_id": f"t{i}", "text": text, "final": True}))
            for _ in range(15):  # 300 ms into the turn
                while json.loads(await tw.recv())["event"] != "media":
                    pass
            t0 = time.monotonic()
            await ctl.send(json.dumps({"type": "interrupt"}))
            while json.loads(await tw.recv())["event"] != "clear":
                pass
            twilio_ms.append((time.monotonic() - t0) * 1000)
    call = uuid.uuid4()
    reader, writer = await asyncio.open_connection("127.0.0.1", as_port)
    writer.write(struct.pack(">BH", 1, 16) + call.bytes)
    async with websockets.connect(f"{base}/v1/control") as ctl:
        await ctl.send(json.dumps({"type": "call.attach", "call_id": str(call)}))

        async def frame() -> bytes:
            kind, length = struct.unpack(">BH", await reader.readexactly(3))
            return await reader.readexactly(length)

        for i in range(reps):
            await ctl.send(json.dumps({"type": "text", "turn_id": f"t{i}", "text": text, "final": True}))
            while not any(await frame()):
                pass
            for _ in range(15):
                await frame()
            t0 = time.monotonic()
            await ctl.send(json.dumps({"type": "interrupt"}))
            while any(await frame()):
                pass
            as_ms.append((time.monotonic() - t0) * 1000)
    writer.close()
    return {
        "reps": reps,
        "twilio_clear_ms_p50": round(float(np.median(twilio_ms)), 1),
        "twilio_clear_ms_max": round(max(twilio_ms), 1),
        "audiosocket_silence_ms_p50": round(float(np.median(as_ms)), 1),
        "audiosocket_silence_ms_max": round(max(as_ms), 1),
    }


def frame_cost() -> None:
    """CPU of one outbound Twilio frame: PCM16 → μ-law → base64 → JSON text."""
    pcm = (np.sin(np.arange(160) / 3) * 8000).astype("<i2").tobytes()
    head = '{"event":"media","streamSid":"MZ0","media":{"payload":"'

    def one() -> str:
        return head + base64.b64encode(ulaw_encode(np.frombuffer(pcm, dtype="<i2"))).decode("ascii") + '"}}'

    n = 20000
    print(json.dumps({"twilio_frame_encode_us": round(timeit.timeit(one, number=n) / n * 1e6, 2)}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--leg", choices=["twilio", "audiosocket", "bargein", "frame-cost"], default="twilio")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=8.0)
    a = ap.parse_args()
    if a.leg == "frame-cost":
        frame_cost()
    else:
        asyncio.run(run(a))
