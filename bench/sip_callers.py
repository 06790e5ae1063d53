"""The capacity bench's SIP callers: N calls into `sip.port`, each with its own RTP socket, driven by an agent on
`/v1/control` that speaks a turn of ~5 s, waits for `turn.done`, pauses 1 s and speaks again.

    python -m bench.sip_callers --port 8080 --sip-port 5060 --sessions 100   # then "stats" / "stop" lines on stdin
    python -m bench.sip_callers --port 8080 --tls-port 5061 --ca-file cert.pem --srtp --sessions 100

It answers the same `stats` / `stop` lines as bench/capacity_client.py with the same counters (frames = RTP
packets received, all calls), so `python -m bench.gateway_capacity --leg sip` reads SIP runs like WebSocket
ones. One asyncio loop: every call's RTP socket is served together every 50 ms (packets counted, never decoded;
the caller's own RTP, silence, sent as phones send it),
one shared SIP socket matches responses by Call-ID, and the agents' control sockets are `websockets` clients (a few
messages per turn, not per frame).

`--srtp`: the calls share one TLS connection to the gateway's TLS listener (as a trunk's calls do), each offers
RTP/SAVP with an SDES key (AES_CM_128_HMAC_SHA1_80), protects its RTP and unprotects the gateway's with libsrtp
under the answer's key (gateway/sip/srtp.py). Frames are then the packets that authenticated; `undecrypted`
counts those that did not (a gateway sending plain RTP, or under another key).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import socket
import ssl
import struct
import sys
import time
import uuid
from dataclasses import dataclass

import websockets

from bench.capacity_client import TURN_TEXTS, ClientStats
from gateway.sip import sdes
from gateway.sip.srtp import SrtpSession

READ_INTERVAL_S = 0.05  # as bench/capacity_client.py: wake every 50 ms and drain, never once per packet
TIMER_B_S = 32.0  # RFC 3261: how long an INVITE waits for its final answer over a reliable transport


SILENCE_PCMU = bytes([0xFF]) * 160


@dataclass(slots=True)
class RtpStream:
    """One call's media state: where the gateway's RTP comes from, how many packets this caller has sent since
    `started`, and (SRTP calls) the call's keys; `keyed` is False while an SRTP call waits for its answer."""

    started: float
    source: tuple | None = None
    sent: int = 0
    srtp: SrtpSession | None = None
    keyed: bool = True


class RtpSockets:
    """Every call's RTP socket, served together every READ_INTERVAL_S: what arrived is counted, and each caller
    sends the 20 ms packets of silence that fell due meanwhile (a phone sends RTP all call long, and the
    gateway decodes it into its inbound path: that is part of a SIP call's cost). A callback per packet would
    wake this process 50 times a second per call, and on a small machine those wake-ups preempt the gateway."""

    def __init__(self, stats: ClientStats):
        self.stats = stats
        self.streams: dict[socket.socket, RtpStream] = {}
        self.undecrypted = 0  # SRTP packets from the gateway that did not authenticate under the answer's key
        self.keyed_calls = 0  # SRTP calls whose answer gave a key
        self.sent = 0  # RTP packets the callers sent, all calls

    def open(self, secure: bool = False) -> socket.socket:
        """A call's RTP socket; `secure`: not read until `key` gives it the call's SRTP keys (what the gateway
        sends meanwhile waits in the socket's buffer)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        while True:  # an even port: what an SDP's audio port must be (RFC 3550 §11; voxgate refuses odd ones)
            try:
                sock.bind(("127.0.0.1", random.randrange(46000, 60000, 2)))
                break
            except OSError:
                continue
        sock.setblocking(False)
        self.streams[sock] = RtpStream(time.monotonic(), keyed=not secure)
        return sock

    def key(self, sock: socket.socket, srtp: SrtpSession) -> None:
        stream = self.streams[sock]
        stream.srtp, stream.keyed, stream.started = srtp, True, time.monotonic()
        self.keyed_calls += 1

    def close(self, sock: socket.socket) -> None:
        self.streams.pop(sock, None)
        sock.close()

    async def drain_forever(self) -> None:
        while True:
            await asyncio.sleep(READ_INTERVAL_S)
            now = time.monotonic()
            for sock, stream in self.streams.items():
                if stream.keyed:
                    self._receive(sock, stream)
                if stream.source is not None:
                    self._send_due(sock, stream, int((now - stream.started) / 0.020))

    def _receive(self, sock: socket.socket, stream: RtpStream) -> None:
        try:
            while True:
                packet, source = sock.recvfrom(2048)
                if stream.srtp is not None and stream.srtp.unprotect(packet) is None:
                    self.undecrypted += 1
                    continue
                stream.source = source  # symmetric RTP: answer where the gateway's RTP comes from
                self.stats.frames += 1
        except (BlockingIOError, OSError):
            pass

    def _send_due(self, sock: socket.socket, stream: RtpStream, due: int) -> None:
        for seq in range(stream.sent, due):
            packet = struct.pack("!BBHII", 0x80, 0, seq & 0xFFFF, (seq * 160) & 0xFFFFFFFF, id(sock) & 0xFFFFFFFF)
            packet += SILENCE_PCMU
            if stream.srtp is not None:
                packet = stream.srtp.protect(packet)
            try:
                sock.sendto(packet, stream.source)
            except OSError:
                break
            self.sent += 1
        stream.sent = max(stream.sent, due)


class Signalling:
    """Every call's SIP over one socket or connection: final responses matched by Call-ID (their status, or for a
    refusal the status and voxgate's code from its Reason header, e.g. `503_at_capacity`; To; body); BYEs from
    voxgate answered 200. `via` names the transport, `local_port` our end of it."""

    via = "UDP"
    reliable = False  # an INVITE is resent (RFC 3261 timer A) over UDP, never over a connection
    local_port = 0

    def __init__(self):
        self.waiting: dict[str, asyncio.Future] = {}

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def received(self, data: bytes, answer) -> None:
        """One SIP message; `answer(bytes)` sends back the way it came."""
        head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
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
            answer(reply.encode())
        elif lines[0].startswith("SIP/2.0 ") and int(lines[0][8:11]) >= 200:
            fut = self.waiting.pop(call_id, None)
            if fut is not None and not fut.done():
                status = int(lines[0][8:11])
                why = re.search(r'text="([^"]{1,40})"', headers.get("reason", ""))  # voxgate's refusal code
                fut.set_result((status if why is None else f"{status}_{why.group(1)}", headers.get("to", ""), body))


class UdpSignalling(Signalling, asyncio.DatagramProtocol):
    """One UDP socket for every call's signalling, to the gateway's `sip.port`."""

    def __init__(self, gateway: tuple[str, int]):
        super().__init__()
        self.gateway, self.transport = gateway, None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.local_port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr) -> None:
        self.received(data, lambda reply: self.transport.sendto(reply, addr))

    def send(self, data: bytes) -> None:
        self.transport.sendto(data, self.gateway)


class TlsSignalling(Signalling):
    """One TLS connection for every call's signalling, to the gateway's TLS listener (verified against
    `ca_file`); messages framed by Content-Length (RFC 3261 §18.3)."""

    via = "TLS"
    reliable = True

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        super().__init__()
        self.reader, self.writer = reader, writer
        self.local_port = writer.get_extra_info("sockname")[1]
        self.reading = asyncio.create_task(self._read_forever())

    @classmethod
    async def connect(cls, port: int, ca_file: str) -> TlsSignalling:
        context = ssl.create_default_context(cafile=ca_file)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        return cls(reader, writer)

    async def _read_forever(self) -> None:
        try:
            while True:
                head = await self.reader.readuntil(b"\r\n\r\n")
                if not head.strip():
                    continue  # a CRLF keep-alive (RFC 5626 §3.5.1)
                length = re.search(rb"(?im)^(?:content-length|l)\s*:\s*(\d+)", head)
                body = await self.reader.readexactly(int(length.group(1))) if length else b""
                self.received(head + body, self.send)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        for fut in self.waiting.values():  # the connection went: no call on it gets its answer
            if not fut.done():
                fut.set_result(("connection_lost", "", ""))

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        self.reading.cancel()
        self.writer.close()


def offer_sdp(rtp_port: int, crypto: sdes.Crypto | None) -> str:
    """The caller's offer: PCMU on `rtp_port`, as RTP/SAVP with `crypto`'s key when given."""
    proto, key = ("RTP/SAVP", f"a=crypto:{crypto.to_sdp()}\r\n") if crypto else ("RTP/AVP", "")
    return (
        f"v=0\r\no=bench 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} {proto} 0\r\na=rtpmap:0 PCMU/8000\r\n{key}"
    )


def answered_srtp(offered: sdes.Crypto, body: str) -> SrtpSession:
    """The call's SRTP from the gateway's answer: RTP/SAVP and one a=crypto line answering ours (SdesError if not)."""
    audio = next((line for line in body.splitlines() if line.startswith("m=audio ")), "")
    if "RTP/SAVP" not in audio:
        raise sdes.SdesError("answer_mismatch", f"the answer's media is {audio[:40]!r}, not RTP/SAVP")
    values = [line[len("a=crypto:") :] for line in body.splitlines() if line.startswith("a=crypto:")]
    return SrtpSession(*sdes.answered([offered], values))


async def sip_call(
    args, sip: Signalling, rtps: RtpSockets, stats: ClientStats, stop: asyncio.Event, rng: random.Random
) -> None:
    loop = asyncio.get_running_loop()
    rtp = rtps.open(secure=args.srtp)
    crypto = sdes.generate(sdes.SUITES[0]) if args.srtp else None
    sdp = offer_sdp(rtp.getsockname()[1], crypto)
    call_id = f"bench-{uuid.uuid4().hex}"
    uri = "sip:agent@127.0.0.1" + (";transport=tls" if sip.via == "TLS" else "")
    contact = f"<sip:bench@127.0.0.1:{sip.local_port}{';transport=tls' if sip.via == 'TLS' else ''}>"
    via = f"Via: SIP/2.0/{sip.via} 127.0.0.1:{sip.local_port};branch=z9hG4bK"
    common = f"From: <sip:bench@127.0.0.1>;tag={call_id[-8:]}\r\nCall-ID: {call_id}\r\n"
    answered = loop.create_future()
    sip.waiting[call_id] = answered
    invite = (
        f"INVITE {uri} SIP/2.0\r\n{via}{call_id[-12:]}\r\n"
        f"{common}To: <sip:agent@127.0.0.1>\r\nCSeq: 1 INVITE\r\nContact: {contact}\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}"
    ).encode()
    try:
        # RFC 3261 timer A, as a phone retransmits an INVITE over UDP; over TLS it is sent once (timer B)
        for wait in (TIMER_B_S,) if sip.reliable else (0.5, 1.0, 2.0, 4.0, 4.0):
            sip.send(invite)
            done, _ = await asyncio.wait({answered}, timeout=wait)
            if done:
                break
        status, to, body = await asyncio.wait_for(answered, 0.01)
    except asyncio.TimeoutError:
        stats.error("no_answer")
        rtps.close(rtp)
        return
    if status != 200:
        stats.error(f"sip_{status}")
        rtps.close(rtp)
        return
    sip.send(
        (
            f"ACK {uri} SIP/2.0\r\n{via}a{call_id[-12:]}\r\n"
            f"{common}To: {to}\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
        ).encode()
    )
    if crypto is not None:
        try:
            rtps.key(rtp, answered_srtp(crypto, body))
        except sdes.SdesError as e:
            stats.error(f"srtp_{e.code}")  # the call stays up without our media; the gateway ends it
            rtps.close(rtp)
            return
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
    if args.srtp:
        sip = await TlsSignalling.connect(args.tls_port, args.ca_file)
    else:
        _, sip = await loop.create_datagram_endpoint(
            lambda: UdpSignalling(("127.0.0.1", args.sip_port)), local_addr=("127.0.0.1", 0)
        )
    rtps = RtpSockets(stats)
    drain = asyncio.create_task(rtps.drain_forever())
    tasks = []
    for _ in range(args.sessions):
        tasks.append(asyncio.create_task(sip_call(args, sip, rtps, stats, stop, rng)))
        await asyncio.sleep(0.005)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def report() -> None:
        counters = {**stats.__dict__, "rtp_sent": rtps.sent, "srtp_calls": rtps.keyed_calls}
        counters["undecrypted"] = rtps.undecrypted
        print(json.dumps({**counters, "cpu_s": time.process_time(), "t": time.monotonic()}), flush=True)

    while True:
        line = (await reader.readline()).decode().strip()
        if line == "stats":
            report()
        elif line in ("stop", ""):
            stop.set()
            await asyncio.wait(tasks, timeout=15)
            drain.cancel()
            report()
            if isinstance(sip, TlsSignalling):
                sip.close()
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="the gateway's HTTP port (/v1/control)")
    ap.add_argument("--sip-port", type=int, help="the gateway's SIP port (UDP): plain RTP calls")
    ap.add_argument("--tls-port", type=int, help="the gateway's SIP over TLS port (sip.tls.port): with --srtp")
    ap.add_argument("--ca-file", help="the PEM certificate the TLS listener is verified against (with --srtp)")
    ap.add_argument("--srtp", action="store_true", help="call over TLS with SDES SRTP (needs --tls-port, --ca-file)")
    ap.add_argument("--sessions", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.srtp and (args.tls_port is None or args.ca_file is None):
        ap.error("--srtp calls over TLS: it needs --tls-port and --ca-file")
    if not args.srtp and args.sip_port is None:
        ap.error("plain RTP calls need --sip-port (or --srtp with --tls-port and --ca-file)")
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
