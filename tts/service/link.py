"""`EngineLink`: a gateway's one connection to one engine process (docs/engine-protocol.md).

It multiplexes every stream the gateway has on that engine over one DEALER
socket. What the gateway asks in one event-loop turn (new requests, cancels,
deadline updates) leaves as one `Ops` message. The link is *up* from the
engine's `Welcome` until its connection drops (seen at once by the socket
monitor) or the engine goes silent for a heartbeat; then every stream it
carried fails with `engine_error`, and it says hello again as soon as the
engine answers (ZeroMQ reconnects by itself).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from typing import Callable

import numpy as np
import zmq
from zmq.utils.monitor import parse_monitor_message

from tts.engine import WORD_SOURCES, EngineError, PcmChunk, SynthesisStream, TurnStream, WordTiming, WordTimings
import tts.service.wire as W
from tts.service.transport import Transport, send_now

log = logging.getLogger("voxgate.engine.link")

HELLO_RETRY_S = 0.2  # while not up: how often the hello is tried (sends fail at once while disconnected)
DEFAULT_HEARTBEAT_S = 2.0  # until the engine's Welcome names its own

_MONITOR_EVENTS = (
    zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


class EngineLink:
    """One engine endpoint. The owner (RemoteEngine) reads `up`, `load`, `welcome` and gets callbacks:
    `on_up(link)` after each Welcome, `on_down(link, why)`, and `on_refused(link, stream, code, message) -> bool`
    for a stream the engine refused before any audio (True: the owner placed it elsewhere)."""

    def __init__(
        self,
        endpoint: str,
        transport: Transport,
        secret: bytes | None,
        gateway_id: str,
        name: str = "",
        features: tuple[str, ...] = (),
    ):
        self.endpoint = endpoint
        self._transport = transport
        self._secret = secret
        self.gateway_id = gateway_id
        self._name = name
        self._features = list(features)
        self.welcome: W.Welcome | None = None  # the engine's latest Welcome (kept while down: its kind, voices)
        self.up = False
        self.ready = False  # up, and the owner finished what it does on connect (cloned voices replayed)
        self.why_down: str | None = "connecting"
        self.load = W.Load()
        self.load_at = 0.0  # monotonic time of the last load report
        self.streams: dict[int, SynthesisStream] = {}
        self.placed_since_load = 0  # streams placed here since the last report (placement counts them)
        self.last_heard = 0.0
        self.counters = {
            "connects": 0,
            "disconnects": 0,
            "messages_out": 0,
            "messages_in": 0,
            "failed_over": 0,
            "packets_in": 0,
            "ops_out": 0,
        }
        self.on_up: Callable[["EngineLink"], None] | None = None
        self.on_down: Callable[["EngineLink", str], None] | None = None
        self.on_refused: Callable[["EngineLink", SynthesisStream, str, str], bool] | None = None
        self._sids = itertools.count(1)
        self._sock = None
        self._monitor = None
        self._tasks: list[asyncio.Task] = []
        self._submits: list[W.Submit] = []
        self._cancels: list[int] = []
        self._deadlines: dict[int, float] = {}
        self._texts: list[tuple[int, str]] = []  # turn mode: pieces for streams already sent
        self._finishes: list[int] = []
        self._flush_scheduled = False
        self._calls: dict[int, asyncio.Future] = {}
        self._call_ids = itertools.count(1)
        self._closed = False
        self._handshaken = False  # the current connection completed its (CURVE) handshake
        self._handshake_failed: str | None = None

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._open()
        self._tasks.append(
            asyncio.get_running_loop().create_task(self._keepalive(), name=f"link-keepalive {self.endpoint}")
        )

    def _open(self) -> None:
        loop = asyncio.get_running_loop()
        monitors = []  # attached before the connect, so the first handshake's success is never missed
        try:
            self._sock = self._transport.client_socket(
                self.endpoint,
                self._secret,
                on_socket=lambda sock: monitors.append(sock.get_monitor_socket(_MONITOR_EVENTS)),
            )
        except BaseException:
            for monitor in monitors:  # an open socket would keep the context's termination waiting for ever
                monitor.close(linger=0)
            raise
        self._monitor = monitors[0]
        self._io = [
            loop.create_task(self._receive(self._sock), name=f"link-recv {self.endpoint}"),
            loop.create_task(self._watch(self._monitor), name=f"link-monitor {self.endpoint}"),
        ]
        self._try_hello()

    def _close_socket(self) -> None:
        for task in getattr(self, "_io", []):
            task.cancel()
        self._io = []
        if self._sock is not None:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._monitor.close(linger=0)
            self._sock.close(linger=0)
            self._sock = self._monitor = None

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled
                pass
        self._close_socket()
        self._down("the gateway closed the link", reconnect=False)

    # ------------------------------------------------------------ streams
    def submit(self, stream: SynthesisStream) -> int:
        r = stream.request
        s = r.sampling
        sid = next(self._sids)
        self.streams[sid] = stream
        self.placed_since_load += 1
        turn = isinstance(stream, TurnStream)  # a turn placed again after a refusal carries all its text so far
        self._submits.append(
            W.Submit(
                sid=sid,
                text=stream.text if turn else r.text,
                due_in=r.deadline,
                voice=r.voice,
                language=r.language,
                instruct=r.instruct,
                sampling=W.Sampling(s.temperature, s.top_k, s.top_p, s.repetition_penalty, s.greedy, s.seed),
                request_id=r.request_id,
                tag=r.tag,
                turn=turn,
            )
        )  # due_in holds the absolute deadline until the flush
        if turn and stream.finished:
            self._finishes.append(sid)
        self._schedule()
        return sid

    def append_text(self, sid: int, text: str) -> None:
        """Turn mode: a piece for stream `sid` (into its submit while that is not sent yet)."""
        if sid not in self.streams:
            return
        for sub in self._submits:
            if sub.sid == sid:
                sub.text += text
                return
        self._texts.append((sid, text))
        self._schedule()

    def finish_turn(self, sid: int) -> None:
        if sid in self.streams:
            self._finishes.append(sid)
            self._schedule()

    def cancel(self, sid: int) -> None:
        if self.streams.pop(sid, None) is None:
            return
        before = len(self._submits)
        self._submits = [s for s in self._submits if s.sid != sid]
        if len(self._submits) == before:  # already sent: tell the engine
            self._cancels.append(sid)
            self._deadlines.pop(sid, None)
            self._schedule()

    def set_deadline(self, sid: int, deadline: float) -> None:
        if sid not in self.streams:
            return
        for sub in self._submits:  # not sent yet: it leaves with this deadline
            if sub.sid == sid:
                sub.due_in = deadline
                return
        self._deadlines[sid] = deadline
        self._schedule()

    def forget(self, sid: int) -> None:
        """The stream moved to another engine (refused here): no cancel goes out for it."""
        self.streams.pop(sid, None)

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not (self._submits or self._cancels or self._deadlines or self._texts or self._finishes):
            return
        now = time.monotonic()
        for sub in self._submits:
            sub.due_in = sub.due_in - now
        deadlines = [(sid, dl - now) for sid, dl in self._deadlines.items() if sid in self.streams]
        live = self.streams
        msg = W.Ops(
            submit=self._submits,
            cancel=self._cancels,
            deadline=deadlines,
            text=[(sid, t) for sid, t in self._texts if sid in live],
            finish=[sid for sid in self._finishes if sid in live],
        )
        self.counters["ops_out"] += 1
        submitted = [s.sid for s in self._submits]
        self._submits, self._cancels, self._deadlines, self._texts, self._finishes = [], [], {}, [], []
        if not self._send(msg):
            for sid in submitted:  # never reached the engine
                stream = self.streams.pop(sid, None)
                if stream is not None:
                    stream._fail(EngineError("engine_error", f"engine {self.endpoint} is not connected"))

    def _send(self, msg) -> bool:
        if self._sock is None:
            return False
        exc = send_now(self._sock, W.encode(msg))
        if exc is not None:  # EAGAIN: not connected (IMMEDIATE)
            if not isinstance(msg, W.Hello):
                self._down(f"lost the connection to engine {self.endpoint} (a send failed: {exc})")
            return False
        self.counters["messages_out"] += 1
        return True

    async def call(self, msg, timeout: float = 120.0) -> W.Reply:
        """Send a request that gets a `Reply` (add_voice, remove_voice) and wait for it."""
        if not self.up:
            raise EngineError("engine_unavailable", f"engine {self.endpoint} is not connected")
        msg.call = next(self._call_ids)
        fut = asyncio.get_running_loop().create_future()
        self._calls[msg.call] = fut
        try:
            if not self._send(msg):
                raise EngineError("engine_unavailable", f"engine {self.endpoint} is not connected")
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise EngineError("engine_error", f"engine {self.endpoint} did not answer in {timeout:g} s") from None
        finally:
            self._calls.pop(msg.call, None)

    # ------------------------------------------------------------ receiving
    async def _receive(self, sock) -> None:
        while True:
            frames = await sock.recv_multipart()
            self.counters["messages_in"] += 1
            self.last_heard = time.monotonic()
            try:
                msg = W.decode_from_engine(frames)
            except W.WireError as exc:
                log.warning(
                    "engine %s sent a message this gateway cannot read (%s): %s", self.endpoint, exc.code, exc.message
                )
                continue
            try:
                self._handle(msg, frames)
            except Exception:  # noqa: BLE001 - one bad message never stops the link
                log.exception("engine link %s: handling %s failed", self.endpoint, type(msg).__name__)

    def _handle(self, msg, frames: list) -> None:
        if isinstance(msg, W.Packets):
            self.counters["packets_in"] += 1
            self._packets(msg, frames)
        elif isinstance(msg, W.Beat):
            self._set_load(msg.load)
        elif isinstance(msg, W.Welcome):
            self._welcome(msg)
        elif isinstance(msg, W.Reply):
            fut = self._calls.get(msg.call)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif isinstance(msg, W.Refused):
            log.error("engine %s refused this gateway: %s (%s)", self.endpoint, msg.message, msg.code)
            self._down(f"engine {self.endpoint} refused the connection: {msg.message}")
            self.why_down = f"refused: {msg.message}"
        elif isinstance(msg, W.Error):
            if msg.code == W.NO_HELLO:  # the engine restarted under us: its streams are gone
                self._down(f"engine {self.endpoint} restarted")
                self._try_hello()
            else:
                log.warning("engine %s: %s (%s)", self.endpoint, msg.message, msg.code)

    def _welcome(self, msg: W.Welcome) -> None:
        if not (
            math.isfinite(msg.heartbeat_s) and msg.heartbeat_s > 0
        ):  # its keepalive would spin, its silence never end
            why = f"engine {self.endpoint} sent a welcome with heartbeat_s {msg.heartbeat_s!r}; not used"
            if self.why_down != why:
                log.error("%s", why)
            self._down(why)
            return
        if self.welcome is not None and msg.engine_id != self.welcome.engine_id and self.streams:
            self._fail_all(f"engine {self.endpoint} restarted")
        self.welcome = msg
        self.up = True
        self.why_down = None
        self.counters["connects"] += 1
        self._set_load(msg.load)
        log.info("engine %s is up: %s (%s), heartbeat %g s", self.endpoint, msg.engine, msg.engine_id, msg.heartbeat_s)
        if self.on_up is not None:
            self.on_up(self)
        else:
            self.ready = True

    def _set_load(self, load: W.Load) -> None:
        self.load = load
        self.load_at = time.monotonic()
        self.placed_since_load = 0

    def _packets(self, msg: W.Packets, frames: list) -> None:
        ends = msg.text_ends if len(msg.text_ends) == len(msg.chunks) else None
        words = _word_timings(msg)
        for i, c in enumerate(msg.chunks):
            stream = self.streams.get(c.sid)
            if stream is None:
                continue  # cancelled here meanwhile
            if c.part >= len(frames) or c.part == 0:  # no such PCM frame: this stream fails, the others go on
                del self.streams[c.sid]
                stream._fail(EngineError("engine_error", f"engine {self.endpoint} sent a packet without its audio"))
                continue
            pcm = W.pcm_from(frames[c.part]) if c.part > 0 else _EMPTY
            if c.last:
                del self.streams[c.sid]
            end = ends[i] if ends is not None and ends[i] >= 0 else None
            stream._deliver(PcmChunk(pcm, c.frame_index, c.last, end, words.get(i)))
        for f in msg.failed:
            stream = self.streams.pop(f.sid, None)
            if stream is None:
                continue
            if (
                stream.first_audio_at is None
                and f.code in RETRYABLE
                and self.on_refused is not None
                and self.on_refused(self, stream, f.code, f.message)
            ):
                self.counters["failed_over"] += 1
                continue
            stream._fail(EngineError("overloaded" if f.code == W.DRAINING else f.code, f.message))

    # ------------------------------------------------------------ connection state
    async def _watch(self, monitor) -> None:
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())["event"]
            if event == zmq.EVENT_DISCONNECTED:
                if self._handshake_failed:  # keep the handshake's reason, not "lost the connection"
                    self._down(self._handshake_failed)
                elif not self._handshaken and self.endpoint.startswith("tcp://"):
                    self._down(
                        f"the engine at {self.endpoint} closed the connection during the handshake (a tcp:// "
                        "engine and its gateways need the same VOXGATE_ENGINE_SECRET)"
                    )
                else:
                    self._down(f"lost the connection to engine {self.endpoint}")
                self._handshaken = False
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._handshaken, self._handshake_failed = True, None
                self._try_hello()
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self._handshake_failed = (
                    f"engine {self.endpoint} refused this gateway's key (is VOXGATE_ENGINE_SECRET the same on both?)"
                )
                self._down(self._handshake_failed)
            elif event in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL):
                self._handshake_failed = (
                    f"the handshake with engine {self.endpoint} failed (a tcp:// engine and its "
                    "gateways need the same VOXGATE_ENGINE_SECRET)"
                )
                self._down(self._handshake_failed)

    def _try_hello(self) -> None:
        if not self.up and self._sock is not None:
            self._send(W.Hello(v=W.VERSION, gateway=self.gateway_id, name=self._name, features=self._features))

    async def _keepalive(self) -> None:
        while True:
            hb = self.welcome.heartbeat_s if self.welcome else DEFAULT_HEARTBEAT_S
            await asyncio.sleep(min(HELLO_RETRY_S, hb / 4) if not self.up else hb / 4)
            if not self.up:
                self._try_hello()
                continue
            if time.monotonic() - self.last_heard > hb:
                # silent for a heartbeat (hung, or the network is gone): fail its streams, start a fresh connection
                self._down(f"engine {self.endpoint} sent nothing for {hb:g} s")
                self._close_socket()
                self._open()
                continue
            self._send(W.Ping())

    def _down(self, why: str, reconnect: bool = True) -> None:
        was_up = self.up
        self.up = self.ready = False
        self.why_down = why
        if was_up and reconnect:
            self.counters["disconnects"] += 1
            log.warning("%s; failing its %d streams", why, len(self.streams))
        self._fail_all(why)
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(EngineError("engine_error", why))
        if was_up and self.on_down is not None:
            self.on_down(self, why)

    def _fail_all(self, why: str) -> None:
        streams, self.streams = self.streams, {}
        self._submits, self._cancels, self._deadlines = [], [], {}
        for stream in streams.values():
            stream._fail(EngineError("engine_error", why))

    # ------------------------------------------------------------ placement's view
    @property
    def serving(self) -> bool:
        """Takes new requests: up, ready, healthy and not draining."""
        return self.ready and self.load.health is None and not self.load.draining

    def pressure(self) -> float:
        """How loaded the engine is (lower is better), counting what was placed since its last report."""
        load = self.load
        waiting = load.active + load.queued + self.placed_since_load
        if load.slots:
            return waiting / load.slots
        return waiting / 1000.0

    def full(self) -> bool:
        return bool(self.load.max_queued) and self.load.queued + self.placed_since_load >= self.load.max_queued


RETRYABLE = ("overloaded", W.DRAINING)  # refusals another engine may not give
_EMPTY = np.zeros(0, dtype=np.float32)


def _word_timings(msg: W.Packets) -> dict[int, WordTimings]:
    """Packets.words by chunk; an entry that names no chunk or an unknown source is dropped (the estimate stands)."""
    out = {}
    for entry in msg.words:
        if not 0 <= entry.chunk < len(msg.chunks) or entry.source not in WORD_SOURCES:
            log.warning("engine sent word timings for no chunk or from an unknown source: %r", entry)
            continue
        out[entry.chunk] = WordTimings(tuple(WordTiming(*span) for span in entry.spans), entry.source)
    return out
