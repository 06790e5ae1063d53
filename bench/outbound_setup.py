"""Outbound call setup time: `POST /v1/calls` → `call.answered`, and → the first RTP packet at the far end.

Starts `voxgate serve` (SimulatedEngine; one trunk pointing at SIPp on loopback) and SIPp as a far end that
answers at once (bench/sipp/outbound_uas.xml: 180, then 200 with SDP), then places the calls one after the
other. For each call the agent's control socket is open before the POST (attaching costs one message, not a
WebSocket handshake), and from just before the POST the bench times: the POST's 201, `call.answered` on the
control socket, and the first RTP packet on the far end's media socket (the bench's own UDP socket, which
SIPp's SDP names, so the bench and not SIPp timestamps it). The agent then ends the call (BYE) and the next
one starts. The first `--warmup` calls are not counted.

    python -m bench.outbound_setup --calls 20

`answered → first RTP` may be negative: the gateway sends the ACK and opens the media before it tells the
agent, so the far end can hear the first (silence) packet before the agent hears of the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SCENARIO = Path(__file__).resolve().parent / "sipp" / "outbound_uas.xml"
CONFIG = """server: {{host: 127.0.0.1, port: {http_port}}}
engine: {{kind: simulated}}
telephony: {{audiosocket_port: 0}}
sip:
  host: 127.0.0.1
  port: {sip_port}
  allow: [127.0.0.1]
  rtp_ports: 31000-31999
  trunks:
    - {{name: far, address: "127.0.0.1:{far_port}", from: "sip:bench@127.0.0.1"}}
"""
METRICS = ("post_201_ms", "post_to_answered_ms", "post_to_first_rtp_ms", "answered_to_first_rtp_ms")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def even_port_socket() -> socket.socket:
    """A UDP socket on an even port: an SDP's RTP port must be even (RFC 3550 §11)."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        if s.getsockname()[1] % 2 == 0:
            return s
        s.close()


class FirstPacket(asyncio.DatagramProtocol):
    """The far end's media socket: when the first RTP packet arrived after `arm()`."""

    def __init__(self):
        self.waiter: asyncio.Future | None = None

    def arm(self) -> asyncio.Future:
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter

    def datagram_received(self, data: bytes, addr) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(time.perf_counter())


async def one_call(http, base: str, media: FirstPacket) -> dict:
    ws = await http.ws_connect(f"{base.replace('http', 'ws', 1)}/v1/control")
    try:
        first_rtp = media.arm()
        t0 = time.perf_counter()
        async with http.post(f"{base}/v1/calls", json={"to": "sip:far@127.0.0.1", "trunk": "far"}) as r:
            body = await r.json()
        t_201 = time.perf_counter()
        if r.status != 201:
            raise RuntimeError(f"POST /v1/calls answered {r.status}: {body}")
        await ws.send_json({"type": "call.attach", "call_id": body["call_id"]})
        while True:
            event = json.loads((await ws.receive(timeout=10)).data)
            if event["type"] == "call.answered":
                t_answered = time.perf_counter()
                break
            if event["type"] in ("call.failed", "error", "session.ended"):
                raise RuntimeError(f"the call was not answered: {event}")
        t_rtp = await asyncio.wait_for(first_rtp, 5)
        await ws.send_json({"type": "session.end"})  # BYE; SIPp answers it and waits for the next INVITE
        while not ws.closed and (await ws.receive(timeout=10)).type.name == "TEXT":
            pass
        await asyncio.sleep(0.1)
        return {
            "post_201_ms": (t_201 - t0) * 1000,
            "post_to_answered_ms": (t_answered - t0) * 1000,
            "post_to_first_rtp_ms": (t_rtp - t0) * 1000,
            "answered_to_first_rtp_ms": (t_rtp - t_answered) * 1000,
        }
    finally:
        await ws.close()


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def measure(calls: int, warmup: int) -> list[dict]:
    import aiohttp

    sipp = shutil.which("sipp")
    if sipp is None:
        raise SystemExit("outbound_setup: SIPp is not installed (apt-get install sip-tester)")
    http_port, sip_port, far_port = free_port(), free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    loop = asyncio.get_running_loop()
    transport, media = await loop.create_datagram_endpoint(FirstPacket, sock=even_port_socket())
    rtp_port = transport.get_extra_info("sockname")[1]
    folder = Path(tempfile.mkdtemp(prefix="outbound-setup-"))
    (folder / "gateway.yaml").write_text(CONFIG.format(http_port=http_port, sip_port=sip_port, far_port=far_port))
    gateway = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--config",
            str(folder / "gateway.yaml"),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "gateway.log", "wb"),
    )
    far = subprocess.Popen(
        [sipp, "-sf", str(SCENARIO), "-set", "rtp_port", str(rtp_port), "-i", "127.0.0.1", "-p", str(far_port)]
        + ["-m", str(calls + warmup), "-nostdin", "-timeout", str(30 + 5 * (calls + warmup))],
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "sipp.log", "wb"),
        cwd=folder,
    )
    base = f"http://127.0.0.1:{http_port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/readyz", timeout=1)
                break
            except OSError:
                await asyncio.sleep(0.1)
        async with aiohttp.ClientSession() as http:
            rows = [await one_call(http, base, media) for _ in range(calls + warmup)]
        return rows[warmup:]
    finally:
        transport.close()
        for proc in (far, gateway):
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


def report(rows: list[dict]) -> None:
    print(f"{len(rows)} calls, SIPp answering at once on loopback")
    print(f"{'':28} {'median':>8} {'p95':>8} {'min':>8} {'max':>8}")
    for name in METRICS:
        values = [row[name] for row in rows]
        print(f"{name:28} {statistics.median(values):8.1f} {p95(values):8.1f} {min(values):8.1f} {max(values):8.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outbound_setup", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="calls measured (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="calls placed first and not counted (default: 2)")
    parser.add_argument("--json", default=None, help="also write each call's times to this file")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 0:
        parser.error("--calls must be at least 1 and --warmup at least 0")
    rows = asyncio.run(measure(args.calls, args.warmup))
    report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
