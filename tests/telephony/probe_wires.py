"""Measures the WebSocket wires (chan_websocket, Telnyx, Vonage, jambonz) under N concurrent calls (not a test: prints numbers).

Starts `voxgate serve` in its own process with the SimulatedEngine (ample
capacity: this measures the transport), opens N calls of one wire, each with
its control socket, has every agent speak one long turn, and reports frame
inter-arrival times at the far ends, the server's clock lateness and CPU per
call; then, one call at a time, the time from `interrupt` to the wire's
clear command at the far end.

    .venv/bin/python -m tests.telephony.probe_wires --wire asterisk --calls 50 --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import websockets

from bench.loadtest.servers import cpu_seconds, free_port
from tests.telephony.probe_pacing import control_for, lateness_p99_bucket, summarize

SUBPROTOCOLS = {"asterisk": ["media"], "jambonz": ["audio.jambonz.org"]}
CLEAR = {"asterisk": "FLUSH_MEDIA", "telnyx": "clear", "vonage": "clear", "jambonz": "killAudio"}


def opening(wire: str, n: int) -> tuple[str, str]:
    """(the far end's first message, the call id the agent attaches with)."""
    cid = f"{wire}-{n}"
    if wire == "asterisk":
        return json.dumps(
            {
                "event": "MEDIA_START",
                "connection_id": "voxgate",
                "channel_id": cid,
                "format": "ulaw",
                "optimal_frame_size": 160,
                "ptime": 20,
            }
        ), cid
    if wire == "telnyx":
        return json.dumps(
            {
                "event": "start",
                "stream_id": f"S{n}",
                "start": {
                    "call_control_id": cid,
                    "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
                },
            }
        ), cid
    if wire == "vonage":
        return json.dumps({"event": "websocket:connected", "content-type": "audio/l16;rate=16000", "call_id": cid}), cid
    return json.dumps({"callSid": cid, "sampleRate": 16000, "mixType": "mono"}), cid


def parse(wire: str, msg) -> tuple[bool, str | None, object]:
    """(is a media frame, command name, the command) of one message from the gateway."""
    if isinstance(msg, bytes):
        return True, None, None
    m = json.loads(msg)
    if wire == "telnyx":
        return m["event"] == "media", m["event"], m
    name = m.get("command") or m.get("action") or m.get("type")
    return False, name, m


def confirmation(wire: str, cmd: dict) -> str | None:
    if wire == "asterisk" and cmd.get("command") == "MARK_MEDIA":
        return json.dumps({"event": "MEDIA_MARK_PROCESSED", "correlation_id": cmd["correlation_id"]})
    if wire == "telnyx" and cmd.get("event") == "mark":
        return json.dumps({"event": "mark", "mark": cmd["mark"]})
    if wire == "vonage" and cmd.get("action") == "notify":
        return json.dumps({"event": "websocket:notify", "payload": cmd["payload"]})
    if wire == "jambonz" and cmd.get("type") == "mark":
        return json.dumps({"type": "mark", "data": {"name": cmd["data"]["name"], "event": "playout"}})
    return None


async def far_end(base: str, wire: str, n: int, text: str, start: asyncio.Event, arrivals: list) -> dict:
    first, cid = opening(wire, n)
    async with websockets.connect(f"{base}/v1/{wire}", subprotocols=SUBPROTOCOLS.get(wire), compression=None) as ws:
        await ws.send(first)
        agent = asyncio.create_task(control_for(base, cid, text, start))
        times = []
        while not agent.done():
            try:
                msg = await asyncio.wait_for(ws.recv(), 0.5)
            except asyncio.TimeoutError:
                continue
            media, _, cmd = parse(wire, msg)
            if media:
                times.append(time.monotonic())
            elif (answer := confirmation(wire, cmd)) is not None:
                await ws.send(answer)
        arrivals.append(times)
        return await agent


async def bargein(base: str, wire: str, reps: int) -> list[float]:
    text = "A long answer that the caller will interrupt right in the middle of it. " * 4
    first, cid = opening(wire, 999)
    out = []
    async with (
        websockets.connect(f"{base}/v1/{wire}", subprotocols=SUBPROTOCOLS.get(wire), compression=None) as ws,
        websockets.connect(f"{base}/v1/control") as ctl,
    ):
        await ws.send(first)
        await ctl.send(json.dumps({"type": "call.attach", "call_id": cid}))
        for i in range(reps):
            await ctl.send(json.dumps({"type": "text", "turn_id": f"t{i}", "text": text, "final": True}))
            frames = 0
            while frames < 15:  # 300 ms into the turn
                media, _, _ = parse(wire, await ws.recv())
                frames += media
            t0 = time.monotonic()
            await ctl.send(json.dumps({"type": "interrupt"}))
            while parse(wire, await ws.recv())[1] != CLEAR[wire]:
                pass
            out.append((time.monotonic() - t0) * 1000)
    return out


async def run(args) -> None:
    port = free_port()
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write(f"""server: {{host: 127.0.0.1, port: {port}, max_sessions: 2000}}
engine: {{kind: simulated}}
simulated: {{first_packet_ms: 60, capacity_x: 2000, ms_per_char: 70, stream_rtf: 0.1}}
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
        base = f"ws://127.0.0.1:{port}"
        text = " ".join(["This sentence keeps the line busy for a while."] * max(1, int(args.seconds / 3.3)))
        start = asyncio.Event()
        arrivals: list[list[float]] = []
        calls = [asyncio.create_task(far_end(base, args.wire, n, text, start, arrivals)) for n in range(args.calls)]
        await asyncio.sleep(1.0 + args.calls * 0.01)
        cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
        start.set()
        done = await asyncio.gather(*calls)
        cpu, wall = cpu_seconds(server.pid) - cpu0, time.monotonic() - t0
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        clears = await bargein(base, args.wire, args.bargeins)
        print(
            json.dumps(
                {
                    "wire": args.wire,
                    "calls": args.calls,
                    "wall_s": round(wall, 1),
                    "played_s_per_call": round(float(np.mean([d["played_ms"] for d in done])) / 1000, 2),
                    "server_cpu_pct": round(100 * cpu / wall, 1),
                    "server_cpu_ms_per_call_second": round(1000 * cpu / wall / args.calls, 3),
                    "clock_lateness_p99": lateness_p99_bucket(metrics),
                    "playout_gaps": sum(d["gaps"]["micro"] + d["gaps"]["audible"] for d in done),
                    **summarize(arrivals),
                    "interrupt_to_clear_ms_p50": round(float(np.median(clears)), 1),
                    "interrupt_to_clear_ms_max": round(max(clears), 1),
                }
            )
        )
    finally:
        server.terminate()
        server.wait(30)
        os.unlink(cfg.name)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--wire", choices=["asterisk", "telnyx", "vonage", "jambonz"], default="asterisk")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--bargeins", type=int, default=10)
    asyncio.run(run(ap.parse_args()))
