"""The capacity bench's SIP callers: N calls into `sip.port`, each with its own RTP socket, driven by an agent on
`/v1/control` that speaks a turn of ~5 s, waits for `turn.done`, pauses 1 s and speaks again.

    python -m bench.sip_callers --port 8080 --sip-port 5060 --sessions 100   # then "stats" / "stop" lines on stdin

It answers the same `stats` / `stop` lines as bench/capacity_client.py with the same counters (frames = RTP
packets received, all calls), so `python -m bench.gateway_capacity --leg sip` reads SIP runs like WebSocket
ones. One asyncio loop: every call's RTP socket is served together every 50 ms (packets counted, never decoded;
the caller's own RTP, silence, sent as phones send it),
one shared SIP socket matches responses by Call-ID, and the agents' control sockets are `websockets` clients (a few
messages per turn, not per frame).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import struct
import sys
import time
import uuid

import websockets

from bench.capacity_client import TURN_TEXTS, ClientStats


READ_INTERVAL_S = 0.05  # as bench/capacity_client.py: wake every 50 ms and drain, never once per packet


SILENCE_PCMU = bytes([0xFF]) * 160


class RtpSockets:
    """Every call's RTP socket, served together every READ_INTERVAL_S: what arrived is counted, and each caller
    sends the 20 ms packets of silence that fell due meanwhile (a phone sends RTP all call long, and the
    gateway decodes it into its inbound path: that is part of a SIP call's cost). A callback per packet would
    wake this process 50 times a second per call, and on a small machine those wake-ups preempt the gateway."""

    def __init__(self, stats: ClientStats):
        self.stats = stats
        self.sockets: dict[socket.socket, list] = {}  # socket -> [gateway's RTP address or None, packets sent]
        self.started = time.monotonic()

    def open(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        while True:  # an even port: what an SDP's audio port must be (RFC 3550 §11; voxgate refuses odd ones)
            try:
                sock.bind(("127.0.0.1", random.randrange(46000, 60000, 2)))
                break
            except OSError:
                continue
        sock.setblocking(False)
        self.sockets[sock] = [None, 0, time.monotonic()]
        return sock

    def close(self, sock: socket.socket) -> None:
        self.sockets.pop(sock, None)
        sock.close()

    async def drain_forever(self) -> None:
        while True:
            await asyncio.sleep(READ_INTERVAL_S)
            now = time.monotonic()
            for sock, state in self.sockets.items():
                try:
                    while True:
                        _, source = sock.recvfrom(2048)
                        state[0] = source  # symmetric RTP: answer where the gateway's RTP comes from
                        self.stats.frames += 1
                except (BlockingIOError, OSError):
                    pass
                if state[0] is None:
                    continue
                due = int((now - state[2]) / 0.020)
                for seq in range(state[1], due):
                    header = struct.pack(
                        "!BBHII", 0x80, 0, seq & 0xFFFF, (seq * 160) & 0xFFFFFFFF, id(sock) & 0xFFFFFFFF
                    )
                    try:
                        sock.sendto(header + SILENCE_PCMU, state[0])
                    except OSError:
                        break
                state[1] = max(state[1], due)


class SipSocket(asyncio.DatagramProtocol):
    """One UDP socket for every call's signalling: final responses by Call-ID; BYEs from voxgate answered 200."""

    def __init__(self):
        self.transport = None
        self.waiting: dict[str, asyncio.Future] = {}

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        text = data.decode(errors="replace")
        head, _, _ = text.partition("\r\n\r\n")
        lines = head.split("\r\n")
        headers = {}
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            if sep:
                headers.setdefault(key.strip().lower(), value.strip())
        call_id = headers.get("call-id", "")
        if lines[0].startswith("BYE "):
            reply = "\r\n".join(
                ["SIP/2.0 200 OK"]
                + [
                    line
                    for line in lines[1:]
                    if line.split(":", 1)[0].strip().lower() in ("via", "from", "to", "call-id", "cseq")
                ]
                + ["Content-Length: 0", "", ""]
            )
            self.transport.sendto(reply.encode(), addr)
        elif lines[0].startswith("SIP/2.0 ") and int(lines[0][8:11]) >= 200:
            fut = self.waiting.pop(call_id, None)
            if fut is not None and not fut.done():
                fut.set_result((int(lines[0][8:11]), headers.get("to", "")))


async def sip_call(
    args, sip: SipSocket, rtps: RtpSockets, stats: ClientStats, stop: asyncio.Event, rng: random.Random
) -> None:
    loop = asyncio.get_running_loop()
    rtp = rtps.open()
    rtp_port = rtp.getsockname()[1]
    sip_local = sip.transport.get_extra_info("sockname")[1]
    call_id = f"bench-{uuid.uuid4().hex}"
    sdp = (
        f"v=0\r\no=bench 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    )
    common = f"From: <sip:bench@127.0.0.1>;tag={call_id[-8:]}\r\nCall-ID: {call_id}\r\n"
    answered = loop.create_future()
    sip.waiting[call_id] = answered
    invite = (
        f"INVITE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{sip_local};branch=z9hG4bK{call_id[-12:]}\r\n"
        f"{common}To: <sip:agent@127.0.0.1>\r\nCSeq: 1 INVITE\r\nContact: <sip:bench@127.0.0.1:{sip_local}>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}"
    ).encode()
    try:
        for wait in (0.5, 1.0, 2.0, 4.0, 4.0):  # RFC 3261 timer A, as a phone retransmits an INVITE over UDP
            sip.transport.sendto(invite, ("127.0.0.1", args.sip_port))
            done, _ = await asyncio.wait({answered}, timeout=wait)
            if done:
                break
        status, to = await asyncio.wait_for(answered, 0.01)
    except asyncio.TimeoutError:
        stats.error("no_answer")
        rtps.close(rtp)
        return
    if status != 200:
        stats.error(f"sip_{status}")
        rtps.close(rtp)
        return
    sip.transport.sendto(
        (
            f"ACK sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{sip_local};branch=z9hG4bKa{call_id[-12:]}\r\n"
            f"{common}To: {to}\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
        ).encode(),
        ("127.0.0.1", args.sip_port),
    )
    try:
        async with websockets.connect(f"ws://127.0.0.1:{args.port}/v1/control", max_size=None) as ws:
            await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            stats.connected += 1
            await asyncio.sleep(rng.random())
            turn = 0
            while not stop.is_set():
                turn += 1
                await ws.send(
                    json.dumps({"type": "text", "turn_id": f"t{turn}", "text": rng.choice(TURN_TEXTS), "final": True})
                )
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] == "turn.done":
                        stats.turns += 1
                        break
                    if event["type"] == "error":
                        stats.error(event.get("code", "?"))
                await asyncio.sleep(1.0)
            await ws.send(json.dumps({"type": "session.end"}))  # voxgate's BYE follows
    except websockets.ConnectionClosed:
        if not stop.is_set():
            stats.disconnects += 1
    finally:
        rtps.close(rtp)


async def main_async(args) -> None:
    loop = asyncio.get_running_loop()
    stats, stop, rng = ClientStats(), asyncio.Event(), random.Random(args.seed)
    _, sip = await loop.create_datagram_endpoint(SipSocket, local_addr=("127.0.0.1", 0))
    rtps = RtpSockets(stats)
    drain = asyncio.create_task(rtps.drain_forever())
    tasks = []
    for _ in range(args.sessions):
        tasks.append(asyncio.create_task(sip_call(args, sip, rtps, stats, stop, rng)))
        await asyncio.sleep(0.005)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def report() -> None:
        print(json.dumps({**stats.__dict__, "cpu_s": time.process_time(), "t": time.monotonic()}), flush=True)

    while True:
        line = (await reader.readline()).decode().strip()
        if line == "stats":
            report()
        elif line in ("stop", ""):
            stop.set()
            await asyncio.wait(tasks, timeout=15)
            drain.cancel()
            report()
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="the gateway's HTTP port (/v1/control)")
    ap.add_argument("--sip-port", type=int, required=True)
    ap.add_argument("--sessions", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    asyncio.run(main_async(ap.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
