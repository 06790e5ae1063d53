"""The capacity bench's load client: paced native-protocol callers at a few µs per frame, in a process of their own.

    python -m bench.capacity_client --port 8080 --sessions 1000     # then "stats" / "stop" lines on stdin

Why not `websockets`, nor even asyncio: with a task, a queue hop and a
message object per frame the `websockets` client ran out of its core at ~450
calls; an asyncio Protocol per call still spends ~25 µs a frame here, mostly
in the event loop's per-callback machinery around each `recv`. This client is
one `select.epoll` loop: a readable socket gets one `recv`, the WebSocket
frames in those bytes are walked in place, binary ones (audio) are counted and
never copied, and only the few text frames (events) a caller reacts to are
decoded; turns are entries in a timer heap. A `recv` is the cost (~16 µs of
CPU on the VM these benches run on), so the loop wakes every 50 ms and reads
each socket once, 2-3 frames a read: 9-16 µs a frame measured (README,
capacity), so one core drives 1,000+ paced calls.

It speaks the client side of RFC 6455 that `/v1/ws` needs: the upgrade
(checking Sec-WebSocket-Accept), masked client frames, fragmented or whole
server frames, ping → pong, close. Each caller does what the bench's callers
always did: `session.start` (μ-law 8 kHz), a first turn after a random 0-1 s,
then a turn of ~5 s of speech, its `turn.done`, a 1 s pause like a caller's,
and again; `session.end` and a close handshake at stop.

Control: one line per command on stdin, one JSON line of counters back on
stdout per command: `stats` (frames, turns, errors, connected, disconnects,
cpu_s: this process's CPU seconds, t: monotonic), `stop` (end every call,
print the final counters, exit).
"""

from __future__ import annotations

import argparse
import base64
import errno
import hashlib
import heapq
import itertools
import json
import os
import random
import select
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, field

TURN_TEXTS = [
    "Thank you for calling, your order has shipped and should arrive on Tuesday.",
    "I can help with that, could you please confirm the last four digits of the card?",
    "Your appointment is booked for ten thirty tomorrow morning at the main office.",
    "The balance on your account is forty two dollars and fifteen cents as of today.",
]
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


@dataclass
class ClientStats:
    frames: int = 0  # binary messages (audio frames) received, all callers
    turns: int = 0  # turn.done received
    errors: int = 0  # error events, failed connects, protocol errors
    disconnects: int = 0  # connections the server ended before the caller did
    connected: int = 0  # callers whose upgrade succeeded
    error_codes: dict = field(default_factory=dict)

    def error(self, code: str) -> None:
        self.errors += 1
        self.error_codes[code] = self.error_codes.get(code, 0) + 1


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame (RFC 6455 §5.2: a client masks every frame with a fresh key)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    key = os.urandom(4)
    if n:  # XOR as one big integer: no per-byte Python loop
        mask = int.from_bytes((key * (n // 4 + 1))[:n], "big")
        payload = (int.from_bytes(payload, "big") ^ mask).to_bytes(n, "big")
    return head + key + payload


def accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())


class Caller:
    """One call's socket and state; the loop calls `readable`, `writable` and the timers it scheduled."""

    def __init__(self, client: "LoadClient", host: str, port: int, path: str, rng: random.Random):
        self.client, self.rng, self.path = client, rng, path
        self.host = f"{host}:{port}"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = self.sock.fileno()
        self.state = "connecting"  # → upgrading → open → closing → closed
        self.stopping = False
        self._key = base64.b64encode(os.urandom(16))
        self._head = b""  # the HTTP answer, until its blank line
        self._buf = b""  # a partial frame carried to the next read
        self._out = b""  # bytes the socket did not take yet
        self._frag_op, self._frag = 0, b""
        self._turn = 0
        self._timer_gen = 0  # bumps to cancel a scheduled turn
        err = self.sock.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, os.strerror(err))

    # ------------------------------------------------------------ the loop's calls
    def writable(self) -> None:
        if self.state == "connecting":
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.client.stats.error("connect_failed")
                self.close()
                return
            self.state = "upgrading"
            self.write(
                b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                % (self.path.encode(), self.host.encode(), self._key)
            )
            return
        self.write(b"")

    def readable(self) -> None:
        try:
            data = self.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if not self.stopping:
                self.client.stats.disconnects += 1 if self.state == "open" else 0
                if self.state != "open":
                    self.client.stats.error("closed_during_upgrade")
            self.close()
            return
        if self.state == "upgrading":
            data = self._upgrade(data)
            if not data:
                return
        if self._buf:
            data = self._buf + data
        stats = self.client.stats
        end, pos = len(data), 0
        while end - pos >= 2:
            b0, b1 = data[pos], data[pos + 1]
            n, h = b1 & 0x7F, 2
            if n == 126:
                if end - pos < 4:
                    break
                n, h = (data[pos + 2] << 8) | data[pos + 3], 4
            elif n == 127:
                if end - pos < 10:
                    break
                n, h = int.from_bytes(data[pos + 2 : pos + 10], "big"), 10
            if b1 & 0x80:
                stats.error("masked_server_frame")  # RFC 6455 §5.1: a server never masks
                self.close()
                return
            if end - pos < h + n:
                break
            if b0 == 0x82:  # the hot path: a whole binary message, an audio frame, counted and not copied
                stats.frames += 1
            else:
                self._frame(b0 & 0x0F, bool(b0 & 0x80), data[pos + h : pos + h + n])
                if self.state == "closed":
                    return
            pos += h + n
        self._buf = data[pos:] if pos < end else b""

    # ------------------------------------------------------------ internals
    def _upgrade(self, data: bytes) -> bytes:
        self._head += data
        head, sep, rest = self._head.partition(b"\r\n\r\n")
        if not sep:
            if len(self._head) > 16384:
                self._fail("bad_upgrade")
            return b""
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 101"):
            self._fail("upgrade_refused")
            return b""
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
        if headers.get(b"sec-websocket-accept") != accept_key(self._key):
            self._fail("bad_accept")
            return b""
        self.state = "open"
        self.client.stats.connected += 1
        start = {"type": "session.start", "output": {"encoding": "mulaw", "sample_rate": 8000}}
        if self.client.word_timings:
            start["word_timings"] = True
        self.send_json(start)
        self._schedule_turn(self.rng.random())  # spread the turn starts
        return rest

    def _frame(self, op: int, fin: bool, payload: bytes) -> None:
        if op == OP_CONT:
            self._frag += payload
            if not fin:
                return
            op, payload, self._frag_op, self._frag = self._frag_op, self._frag, 0, b""
        elif not fin and op in (OP_TEXT, OP_BINARY):
            self._frag_op, self._frag = op, payload
            return
        if op == OP_BINARY:
            self.client.stats.frames += 1
        elif op == OP_TEXT:
            self._event(json.loads(payload))
        elif op == OP_PING:
            self.write(client_frame(OP_PONG, payload))
        elif op == OP_CLOSE:
            if not self.stopping:
                self.client.stats.disconnects += 1
                self.stopping = True
            self.write(client_frame(OP_CLOSE, payload[:2]))
            self.close()

    def _event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "turn.done":
            self.client.stats.turns += 1
            if not self.stopping:
                self._schedule_turn(self.client.pause_s)
        elif kind == "error":
            self.client.stats.error(str(event.get("code")))

    def _schedule_turn(self, delay: float) -> None:
        self._timer_gen += 1
        self.client.call_later(delay, self._next_turn, self._timer_gen)

    def _next_turn(self, gen: int) -> None:
        if gen != self._timer_gen or self.stopping or self.state != "open":
            return
        self._turn += 1
        self.send_json(
            {"type": "text", "turn_id": f"t{self._turn}", "text": self.rng.choice(TURN_TEXTS), "final": True}
        )

    def _fail(self, code: str) -> None:
        self.client.stats.error(code)
        self.close()

    def send_json(self, message: dict) -> None:
        self.write(client_frame(OP_TEXT, json.dumps(message).encode()))

    def write(self, data: bytes) -> None:
        if self.state == "closed":
            return
        self._out += data
        if not self._out:
            return
        try:
            sent = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()
            return
        self._out = self._out[sent:]
        self.client.want_write(self, bool(self._out))

    def stop(self) -> None:
        """End the call as a caller would: `session.end`, then the close handshake (the server closes)."""
        if self.stopping:
            return
        self.stopping = True
        self._timer_gen += 1
        if self.state == "open":
            self.send_json({"type": "session.end"})
            self.write(client_frame(OP_CLOSE, struct.pack("!H", 1000)))
        else:
            self.close()

    def close(self) -> None:
        if self.state == "closed":
            return
        self.state = "closed"
        self.client.forget(self)
        self.sock.close()


class LoadClient:
    """The loop: epoll over every caller's socket (and stdin for commands), plus a timer heap."""

    def __init__(
        self,
        host: str,
        port: int,
        path: str = "/v1/ws",
        pause_s: float = 1.0,
        seed: int = 0,
        read_interval_s: float = 0.05,
    ):
        self.host, self.port, self.path, self.pause_s = host, port, path, pause_s
        self.word_timings = False  # callers ask for audio.words (--word-timings)
        # Wake at most this often: each wake-up costs a syscall or two (~10 µs on this VM), and the gateway's clock
        # sends every call's frame within a few ms, so one wake-up per few ms reads hundreds of sockets, not one.
        # The frames wait in the kernel's socket buffer meanwhile, never in the gateway's.
        self.read_interval_s = read_interval_s
        self._last_poll = 0.0
        self.rng = random.Random(seed)
        self.stats = ClientStats()
        self.epoll = select.epoll()
        self.callers: dict[int, Caller] = {}
        self._masks: dict[int, int] = {}
        self._timers: list = []
        self._seq = itertools.count()
        self.done = False

    def call_later(self, delay: float, fn, *args) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn, args))

    def add_caller(self) -> None:
        try:
            c = Caller(self, self.host, self.port, self.path, self.rng)
        except OSError:
            self.stats.error("connect_failed")
            return
        self.callers[c.fd] = c
        self._masks[c.fd] = select.EPOLLOUT
        self.epoll.register(c.fd, select.EPOLLOUT)

    def want_write(self, c: Caller, on: bool) -> None:
        mask = select.EPOLLIN | (select.EPOLLOUT if on else 0)
        if c.fd in self._masks and self._masks[c.fd] != mask:
            self._masks[c.fd] = mask
            self.epoll.modify(c.fd, mask)

    def forget(self, c: Caller) -> None:
        if self.callers.pop(c.fd, None) is not None:
            self._masks.pop(c.fd, None)
            try:
                self.epoll.unregister(c.fd)
            except OSError:
                pass

    def start(self, sessions: int, stagger_s: float = 0.005) -> None:
        for i in range(sessions):
            self.call_later(i * stagger_s, self.add_caller)

    def stop_all(self) -> None:
        for c in list(self.callers.values()):
            c.stop()

    def run_once(self, max_wait: float = 0.05) -> list[tuple[int, int]]:
        """One poll and the timers that came due; returns the events not on a caller's socket."""
        timers = self._timers
        idle = self._last_poll + self.read_interval_s - time.monotonic()
        if idle > 0:
            time.sleep(idle)
        self._last_poll = time.monotonic()
        wait = max_wait if not timers else min(max_wait, max(0.0, timers[0][0] - time.monotonic()))
        other = []
        for fd, ev in self.epoll.poll(wait):
            c = self.callers.get(fd)
            if c is None:
                other.append((fd, ev))
                continue
            if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                c.readable()
            if ev & select.EPOLLOUT and c.state != "closed":
                c.writable()
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(timers)
            fn(*args)
        return other

    def counters(self) -> dict:
        return {**asdict(self.stats), "cpu_s": time.process_time(), "t": time.monotonic(), "open": len(self.callers)}


def serve_commands(client: LoadClient, stdin=sys.stdin, stdout=sys.stdout, stop_timeout_s: float = 15.0) -> None:
    """Run the loop, answering `stats` and `stop` lines on stdin (see the module doc)."""
    fd = stdin.fileno()
    os.set_blocking(fd, False)
    client.epoll.register(fd, select.EPOLLIN)
    pending = b""
    stop_deadline = None
    while True:
        for efd, _ in client.run_once():
            if efd != fd:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:  # the bench went away: end the calls
                chunk = b"stop\n"
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                cmd = line.strip().decode()
                if cmd == "stats":
                    print(json.dumps(client.counters()), file=stdout, flush=True)
                elif cmd == "stop" and stop_deadline is None:
                    client.stop_all()
                    stop_deadline = time.monotonic() + stop_timeout_s
                    client.epoll.unregister(fd)
        if stop_deadline is not None and (not client.callers or time.monotonic() > stop_deadline):
            for c in list(client.callers.values()):
                c.close()
            print(json.dumps(client.counters()), file=stdout, flush=True)
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", default="/v1/ws")
    ap.add_argument("--sessions", type=int, required=True)
    ap.add_argument(
        "--stagger-ms", type=float, default=5.0, help="between two callers' connects (default: %(default)s)"
    )
    ap.add_argument("--pause-s", type=float, default=1.0, help="the caller's pause after each turn.done")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--read-interval-ms", type=float, default=50.0, help="wake at most this often (default: %(default)s)"
    )
    ap.add_argument("--word-timings", action="store_true", help="every caller asks for audio.words events")
    args = ap.parse_args(argv)
    client = LoadClient(args.host, args.port, args.path, args.pause_s, args.seed, args.read_interval_ms / 1000.0)
    client.word_timings = args.word_timings
    client.start(args.sessions, args.stagger_ms / 1000.0)
    serve_commands(client)
    return 0


if __name__ == "__main__":
    sys.exit(main())
