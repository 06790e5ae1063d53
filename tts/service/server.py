"""`EngineServer`: one `tts.Engine` served to any number of gateways over ZeroMQ (docs/engine-protocol.md).

One ROUTER socket; each gateway is one connection, known by the id in its
`Hello`. What a gateway asks in one event-loop turn arrives as one `Ops`
message; what the engine makes for a gateway in one loop turn (one engine
step: its streams' packets and failures) leaves as one `Packets` message,
the PCM as raw frames after the header. A gateway that goes silent for one
heartbeat, or whose connection is gone when the engine sends to it, has its
streams cancelled: their slots free at the engine's next step.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
import uuid

import zmq

from tts.engine import Engine, EngineError, PcmChunk, SamplingSettings, SynthesisRequest, TurnStream, VoiceClone
import tts.service.wire as W
from tts.service.transport import SEND_BACKLOG, Transport, send_now

log = logging.getLogger("voxgate.engine.server")

OUTCOMES = ("completed", "failed", "cancelled", "refused", "expired")
DROPS = ("silent", "gone", "not_reading")  # why the engine dropped a gateway (voxgate_engine_gateways_dropped_total)


class _Peer:
    __slots__ = ("rid", "gateway", "name", "last_seen", "streams", "chunks", "failed")

    def __init__(self, rid: bytes, gateway: str, name: str):
        self.rid = rid
        self.gateway = gateway
        self.name = name
        self.last_seen = time.monotonic()
        self.streams: dict = {}  # sid -> SynthesisStream
        self.chunks: list[tuple[int, PcmChunk]] = []  # waiting for this loop turn's flush
        self.failed: list[W.Failure] = []


def engine_slots(engine: Engine) -> int:
    """How many requests the engine runs at once (qwen3: max_batch); 0 when it has no such limit."""
    settings = getattr(engine, "settings", None)
    return int(getattr(settings, "max_batch", 0) or 0)


def engine_max_queued(engine: Engine) -> int:
    settings = getattr(engine, "settings", None)
    return int(getattr(settings, "max_queued", 0) or getattr(engine, "max_queued", 0) or 0)


class EngineServer:
    def __init__(
        self,
        engine: Engine,
        listen: str,
        secret: bytes | None = None,
        heartbeat_s: float = 2.0,
        transport: Transport | None = None,
        send_backlog: int = SEND_BACKLOG,
    ):
        if not heartbeat_s > 0:
            raise ValueError("heartbeat_s must be > 0")
        if send_backlog < 1:
            raise ValueError("send_backlog must be >= 1")
        self.send_backlog = send_backlog
        self.engine = engine
        self.listen = listen
        self.heartbeat_s = heartbeat_s
        self.engine_id = uuid.uuid4().hex[:12]
        self._secret = secret
        self._own_transport = transport is None
        self._transport = transport or Transport()
        self._sock = None
        self._peers: dict[bytes, _Peer] = {}
        self._dirty: list[_Peer] = []
        self._flush_scheduled = False
        self._tasks: list[asyncio.Task] = []
        self._calls: set[asyncio.Task] = set()
        self.draining = False
        self.counters = {
            "requests": 0,
            **{o: 0 for o in OUTCOMES},
            "gateways_seen": 0,
            "messages_in": 0,
            "messages_out": 0,
            "packets_out": 0,
            "pcm_bytes_out": 0,
            "bad_messages": 0,
            **{f"dropped_{why}": 0 for why in DROPS},
        }
        self._step_mark = (0.0, 0)  # (engine step seconds, steps) at the last load report

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._sock = self._transport.server_socket(self.listen, self._secret, self.send_backlog)
        if self.listen.startswith("tcp://") and self.listen.endswith(":0"):
            self.listen = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._receive(), name="engine-server-recv"),
            loop.create_task(self._beat(), name="engine-server-beat"),
        ]
        log.info("engine %s (%s) serving on %s", self.engine_id, self.engine.name, self.listen)

    @property
    def endpoint(self) -> str:
        """The bound endpoint (a tcp port 0 resolved)."""
        return self.listen

    @property
    def slots(self) -> int:
        return engine_slots(self.engine)

    def ready(self) -> str | None:
        """None while it takes requests; else why not (the engine's health, or draining)."""
        if self.draining:
            return "draining: the engine is shutting down"
        return self.engine.health()

    @property
    def gateways(self) -> int:
        return len(self._peers)

    @property
    def open_streams(self) -> int:
        return sum(len(p.streams) for p in self._peers.values())

    async def drain(self, timeout: float) -> None:
        """No new requests (refused with `draining`); the running ones finish for up to `timeout` seconds,
        then fail with engine_error."""
        self.draining = True
        self._send_beats()
        deadline = time.monotonic() + timeout
        while self.open_streams and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for peer in list(self._peers.values()):
            for sid, stream in list(peer.streams.items()):
                peer.failed.append(W.Failure(sid, "engine_error", "the engine shut down before this request ended"))
                self._count("failed")
                peer.streams.pop(sid, None)
                stream.cancel()
            self._mark(peer)
        self._flush()

    async def close(self) -> None:
        for task in self._tasks + list(self._calls):
            task.cancel()
        for task in self._tasks + list(self._calls):
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled
                pass
        self._tasks = []
        for peer in list(self._peers.values()):
            self._drop(peer, "server closed")
        bound = self._sock is not None
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._own_transport:
            self._transport.close()
        if bound and self.listen.startswith("ipc://"):  # never the path of another engine it was refused
            try:
                os.unlink(self.listen[len("ipc://") :])
            except OSError:
                pass

    # ------------------------------------------------------------ receiving
    async def _receive(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            self.counters["messages_in"] += 1
            rid, body = frames[0], frames[1:]
            try:
                msg = W.decode_from_gateway(body)
            except W.WireError as exc:
                self.counters["bad_messages"] += 1
                self._send(rid, W.Error(exc.code, exc.message))
                continue
            try:
                self._handle(rid, msg)
            except Exception as exc:  # noqa: BLE001 - one bad message never stops the server
                log.exception("engine server: a %s message failed", type(msg).__name__)
                self._send(rid, W.Error("internal", f"{type(msg).__name__}: {exc}"))

    def _handle(self, rid: bytes, msg) -> None:
        if isinstance(msg, W.Hello):
            self._hello(rid, msg)
            return
        peer = self._peers.get(rid)
        if peer is None:
            self._send(rid, W.Error(W.NO_HELLO, "say hello first (the engine does not know this connection)"))
            return
        peer.last_seen = time.monotonic()
        if isinstance(msg, W.Ops):
            self._ops(peer, msg)
        elif isinstance(msg, W.AddVoice):
            self._call(peer, msg.call, self._add_voice(msg))
        elif isinstance(msg, W.RemoveVoice):
            self._send(
                rid,
                W.Reply(
                    msg.call,
                    True,
                    {"removed": bool(self.engine.remove_voice(msg.name)), "voices": self.engine.voices()},
                ),
            )
        # Ping: last_seen is all it is for

    def _hello(self, rid: bytes, msg: W.Hello) -> None:
        if msg.v != W.VERSION:
            self._send(rid, W.Refused(W.VERSION_MISMATCH, f"this engine speaks protocol v{W.VERSION}, not v{msg.v}"))
            return
        for other in [p for p in self._peers.values() if p.gateway == msg.gateway or p.rid == rid]:
            self._drop(other, "it said hello again")  # a reconnect: its old streams were failed on its side
        peer = self._peers[rid] = _Peer(rid, msg.gateway, msg.name)
        self.counters["gateways_seen"] += 1
        log.info("gateway %s (%s) connected", msg.gateway, msg.name or "?")
        self._send(
            rid,
            W.Welcome(
                v=W.VERSION,
                engine=self.engine.name,
                engine_id=self.engine_id,
                sample_rate=self.engine.sample_rate,
                heartbeat_s=self.heartbeat_s,
                can_clone=bool(self.engine.can_clone),
                voices=list(self.engine.voices()),
                vocoder=getattr(self.engine, "vocoder_name", None),
                load=self._load(peer),
                features=[W.TURNS] if self.engine.supports_turns else [],
            ),
        )

    def _ops(self, peer: _Peer, msg: W.Ops) -> None:
        now = time.monotonic()
        for sid in msg.cancel:
            stream = peer.streams.pop(sid, None)
            if stream is not None:
                self._count("cancelled")
                stream.cancel()
        for sub in msg.submit:
            self._submit(peer, sub, now)
        for sid, piece in msg.text:
            stream = peer.streams.get(sid)
            if isinstance(stream, TurnStream) and not stream.finished:
                stream.append(piece)
        for sid in msg.finish:
            stream = peer.streams.get(sid)
            if isinstance(stream, TurnStream):
                stream.finish()
        for sid, due_in in msg.deadline:
            stream = peer.streams.get(sid)
            if stream is not None and math.isfinite(due_in):
                try:
                    stream.set_deadline(now + due_in)
                except EngineError:
                    pass

    def _submit(self, peer: _Peer, sub: W.Submit, now: float) -> None:
        self.counters["requests"] += 1
        if sub.sid in peer.streams:
            self._refuse(peer, sub.sid, W.BAD_MESSAGE, f"stream {sub.sid} is already open")
            return
        if self.draining:
            self._refuse(peer, sub.sid, W.DRAINING, "the engine is shutting down")
            return
        if not math.isfinite(sub.due_in):
            self._refuse(peer, sub.sid, W.BAD_MESSAGE, f"due_in must be finite, got {sub.due_in!r}")
            return
        s = sub.sampling
        request = SynthesisRequest(
            text=sub.text,
            voice=sub.voice,
            language=sub.language,
            instruct=sub.instruct,
            sampling=SamplingSettings(s.temperature, s.top_k, s.top_p, s.repetition_penalty, s.greedy, s.seed),
            deadline=now + sub.due_in,
            request_id=sub.request_id or sub.sid,
            tag=sub.tag,
        )
        try:
            stream = self.engine.open_turn(request) if sub.turn else self.engine.synthesize(request)
        except EngineError as exc:
            self._refuse(peer, sub.sid, exc.code, exc.message)
            return
        peer.streams[sub.sid] = stream
        sid = sub.sid
        stream.forward(lambda item: self._on_item(peer, sid, item))

    def _refuse(self, peer: _Peer, sid: int, code: str, message: str) -> None:
        self._count("refused")
        peer.failed.append(W.Failure(sid, code, message))
        self._mark(peer)

    def _on_item(self, peer: _Peer, sid: int, item) -> None:
        if peer.streams.get(sid) is None:
            return  # cancelled (or its gateway is gone): nothing more goes out for it
        if isinstance(item, PcmChunk):
            peer.chunks.append((sid, item))
            if item.is_last:
                del peer.streams[sid]
                self._count("completed")
        elif item is None:  # ended without a last chunk (an engine closing)
            del peer.streams[sid]
            peer.failed.append(W.Failure(sid, "engine_error", "the engine ended this request"))
            self._count("failed")
        else:
            del peer.streams[sid]
            code = getattr(item, "code", "internal")
            peer.failed.append(
                W.Failure(
                    sid, "engine_error" if code == "internal" else code, getattr(item, "message", None) or str(item)
                )
            )
            self._count("failed")
        self._mark(peer)

    def _count(self, outcome: str) -> None:
        self.counters[outcome] += 1

    # ------------------------------------------------------------ voices
    def _call(self, peer: _Peer, call: int, coro) -> None:
        async def run():
            try:
                result = await coro
                reply = W.Reply(call, True, result)
            except EngineError as exc:
                reply = W.Reply(call, False, code=exc.code, message=exc.message)
            except Exception as exc:  # noqa: BLE001 - answered, not raised
                log.exception("engine call failed")
                reply = W.Reply(call, False, code="internal", message=str(exc))
            if peer.rid in self._peers:
                self._send(peer.rid, reply)

        task = asyncio.get_running_loop().create_task(run())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _add_voice(self, msg: W.AddVoice) -> dict:
        info = await self.engine.add_voice(VoiceClone(msg.name, msg.ref_audio, msg.ref_text, msg.x_vector_only))
        return {"info": info, "voices": list(self.engine.voices())}

    # ------------------------------------------------------------ sending
    def _mark(self, peer: _Peer) -> None:
        self._dirty.append(peer)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """One `Packets` message per gateway with everything its streams got since the last flush."""
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, []
        for peer in dict.fromkeys(dirty):
            if not peer.chunks and not peer.failed:
                continue
            parts, chunks = [], []
            for sid, chunk in peer.chunks:
                if len(chunk.pcm):
                    chunks.append(W.Chunk(sid, chunk.frame_index, chunk.is_last, len(parts) + 1))
                    parts.append(W.pcm_part(chunk.pcm))
                else:
                    chunks.append(W.Chunk(sid, chunk.frame_index, chunk.is_last, -1))
            failed = peer.failed
            ends = [-1 if c.text_end is None else c.text_end for _, c in peer.chunks]
            text_ends = ends if any(e >= 0 for e in ends) else []
            words = [
                W.Words(i, c.words.source, [(w.char_start, w.char_end, w.start, w.end) for w in c.words.words])
                for i, (_, c) in enumerate(peer.chunks)
                if c.words is not None
            ]
            peer.chunks, peer.failed = [], []
            self.counters["packets_out"] += len(chunks)
            self.counters["pcm_bytes_out"] += sum(len(p) for p in parts)
            self._send(peer.rid, W.Packets(chunks=chunks, failed=failed, text_ends=text_ends, words=words), parts)

    def _send(self, rid: bytes, msg, parts: list | None = None) -> None:
        if self._sock is None:
            return
        exc = send_now(
            self._sock, [rid, *W.encode(msg, parts)], copy=parts is None, on_error=lambda e: self._unreachable(rid, e)
        )
        if exc is not None:
            self._unreachable(rid, exc)
            return
        self.counters["messages_out"] += 1

    def _unreachable(self, rid: bytes, exc: BaseException) -> None:
        peer = self._peers.get(rid)
        if peer is None:
            return
        if isinstance(exc, zmq.Again):  # its queue is full: it stopped reading (a stuck or hostile peer)
            log.warning(
                "gateway %s is not reading (%d messages wait for it): dropping it and its %d streams",
                peer.gateway,
                self.send_backlog,
                len(peer.streams),
            )
            self._drop(peer, f"it left {self.send_backlog} messages unread", "not_reading")
        else:
            log.info("gateway %s is gone (%s): freeing its %d streams", peer.gateway, exc, len(peer.streams))
            self._drop(peer, "its connection is gone", "gone")

    def _drop(self, peer: _Peer, why: str, counted: str | None = None) -> None:
        """Forget a gateway: cancel every stream it had (the slots free at the engine's next step)."""
        if self._peers.get(peer.rid) is peer:
            del self._peers[peer.rid]
            if counted:
                self.counters[f"dropped_{counted}"] += 1
        streams, peer.streams = peer.streams, {}
        peer.chunks, peer.failed = [], []
        if streams:
            log.info("gateway %s: %s; cancelling its %d streams", peer.gateway, why, len(streams))
        for stream in streams.values():
            self._count("expired")
            stream.cancel()

    # ------------------------------------------------------------ heartbeat and load
    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s / 4)
            now = time.monotonic()
            for peer in [p for p in self._peers.values() if now - p.last_seen > self.heartbeat_s]:
                log.info("gateway %s silent for %.1f s", peer.gateway, now - peer.last_seen)
                self._drop(peer, f"silent for more than {self.heartbeat_s:g} s", "silent")
            self._send_beats()

    def _send_beats(self) -> None:
        base = self._load(None)
        for peer in list(self._peers.values()):
            load = W.Load(**{f: getattr(base, f) for f in base.__struct_fields__})
            load.streams = len(peer.streams)
            self._send(peer.rid, W.Beat(load))

    def _load(self, peer: _Peer | None) -> W.Load:
        stats = self.engine.stats()
        step_s = float(getattr(self.engine, "timings", {}).get("step", 0.0) or 0.0)
        steps = int(stats.get("steps", 0) or 0)
        last_s, last_n = self._step_mark
        step_ms = (step_s - last_s) / (steps - last_n) * 1000 if steps > last_n else 0.0
        if peer is None:
            self._step_mark = (step_s, steps)
        numeric = {k: float(v) for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return W.Load(
            active=int(stats.get("active", 0)),
            queued=int(stats.get("queued", 0)),
            slots=engine_slots(self.engine),
            max_queued=engine_max_queued(self.engine),
            step_ms=step_ms,
            health=self.engine.health(),
            draining=self.draining,
            streams=len(peer.streams) if peer else 0,
            stats=numeric,
        )


SWITCH_INTERVAL_S = 0.0005


def favour_the_loop() -> None:
    """For an engine process: hand the GIL on every 0.5 ms instead of every 5 ms.

    The engine's worker and vocoder lane threads hold the GIL between their torch calls; the event loop that
    moves requests in and packets out waits for it at every wake-up, so with the default switch interval a
    request's first packet can wait several 5 ms turns in the engine process alone."""
    import sys

    sys.setswitchinterval(SWITCH_INTERVAL_S)


def host_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
