"""Telephony media legs over a provider's WebSocket: the adapter every wire in `gateway/wire/` shares.

`/v1/asterisk` (chan_websocket), `/v1/telnyx`, `/v1/vonage` and `/v1/jambonz`
share this code; what differs lives in each wire class (pure encode/decode)
and in a `WireSpec` (`gateway/legs/asterisk.py`, …). The far end connects, its opening message names
the call, and the call registry joins it with the agent's control socket by
any of the call's ids (the provider's own, or a `call_id` query parameter).

Sending: the shared 20 ms clock hands us one PCM16 frame per tick — at the
wire's own rate when the far end started the call (wideband stays
wideband), at 8 kHz when the agent attached first — resampled when the rates
differ, encoded, and sent at once —
so the far end's buffer stays one frame deep and barge-in (its clear
command) drops almost nothing audible. A mark follows each text chunk's last
frame (and every 500 ms inside long chunks); the far end's confirmations go
to `Session.playback_confirmed`, so the client's marks, `played_ms` and
`played_text` follow what the far end played, and become `call.mark`
(played or dropped) for the control socket.
A far end that asks us to pause (Asterisk `MEDIA_XOFF`) gets its frames held,
in order with the marks, until it resumes; past a bound they are dropped and
counted. A peer that stops reading loses frames, never stalls the clock.

Problems in what the far end sends go to the call's control socket and to
metrics and logs; nothing unknown is ever sent to the far end.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import logging
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
from aiohttp import WSCloseCode, WSMsgType, web

from audio.encode import PCM16_RATES, OutputFormat
from audio.pcm import float_to_int16, int16_to_float
from audio.playout import PlayoutEvent
from audio.resample import FrameFifo, StreamResampler
from gateway import protocol as P
from gateway.cluster.forward import forward_after_peek, forward_by_path
from gateway.core import CallCore
from gateway.core.backpressure import frame_must_skip, send_would_wait
from gateway.core.calls import TELEPHONY_PCM, Call
from gateway.cluster.plane import ClusterUnavailable
from gateway.legs.accept import KEY_IN_QUERY_MESSAGE, admit, run_media_stream, unavailable_response
from gateway.legs.host import LegHost
from gateway.wire.events import (
    Audio,
    Dtmf,
    Ended,
    FarEndError,
    FlowControl,
    MarkDone,
    Notice,
    Outgoing,
    Started,
    StartRefused,
    WireAudio,
)

log = logging.getLogger("voxgate.wsmedia")

START_TIMEOUT_S = 10.0  # every far end sends its opening message right after connecting
MAX_CONTROL_BACKLOG_BYTES = 256 * 1024  # marks and clears still go out above the media cap, up to this
MAX_HELD_FRAMES = 500  # 10 s of audio held while the far end said XOFF
MAX_OUTSTANDING_MARKS = 256
MAX_MESSAGE_BYTES = 256 * 1024
WIRE_UNAUTHORIZED = (
    "missing or wrong API key (Authorization: Bearer <key>, HTTP Basic with the key as password, "
    "or ?token= with a token from POST /v1/tokens)"
)


@dataclass(frozen=True)
class WireSpec:
    kind: str  # leg name in events and metrics
    path: str
    make_wire: Callable[[Mapping[str, str]], object]  # the request's query → a fresh wire
    subprotocol: str | None = None
    max_outstanding_marks: int = MAX_OUTSTANDING_MARKS


@dataclass
class _SentMark:
    epoch: int  # barge-ins before it was sent
    turn_id: str
    chunk: int
    played_ms: float
    mark_id: int | None = None  # the session's id for it (Session.playback_confirmed)
    progress: bool = False  # a confirmation point inside a chunk: no `call.mark`


class WireMediaLeg:
    """The media leg of one far-end WebSocket, clock-driven."""

    clock_driven = True
    send_idle_silence = False  # every one of these far ends plays silence by itself when idle
    confirms_playback = True  # every wire here confirms marks: marks, played_ms and played_text follow the far end

    def __init__(
        self,
        ws: web.WebSocketResponse,
        request: web.BaseRequest,
        wire,
        spec: WireSpec,
        metrics,
        notify: Callable[[dict], "asyncio.Future | None"],
    ):
        self.ws = ws
        self.transport = request.transport
        self.protocol = request.protocol
        if self.transport is not None:
            self.transport.set_write_buffer_limits(high=MAX_CONTROL_BACKLOG_BYTES)
        self.wire = wire
        self.spec = spec
        self.metrics = metrics
        self.notify = notify  # async: an event for the call's control socket
        self._frames = metrics.frames_sent.labels(leg=spec.kind)
        self.out = wire.outbound
        self.output = TELEPHONY_PCM  # what the session hands us; `bind` sets it once the call is known
        self.confirmed: Callable[[int, bool], None] = lambda mark_id, heard: (
            None
        )  # Session.playback_confirmed, from `bind`
        self._resampler, self._fifo = self._new_resampler()
        self._names = itertools.count()
        self._to_mark: list[tuple[str, _SentMark]] = []  # marks whose chunk's last frame is being sent
        self.sent_marks: dict[str, _SentMark] = {}
        self.epoch = 0
        self.clears_sent = 0
        self.paused = False
        self._held: deque[tuple[Outgoing, bool]] = deque()  # (message, is media) while paused
        self._dropped_names: deque[str] = deque(maxlen=MAX_OUTSTANDING_MARKS)  # reported dropped at a barge-in
        self.frames_held_dropped = 0

    def bind(self, output: OutputFormat, confirmed: Callable[[int, bool], None]) -> None:
        """The session's output format (the wire's own rate when this leg started the call, else 8 kHz) and
        where the far end's confirmations go (`Session.playback_confirmed`)."""
        self.output = output
        self.confirmed = confirmed
        self._resampler, self._fifo = self._new_resampler()

    def _new_resampler(self):
        if self.out.sample_rate == self.output.sample_rate:
            return None, None
        return StreamResampler(self.output.sample_rate, self.out.sample_rate), FrameFifo(self.out.frame_samples)

    # ------------------------------------------------------------ sending
    def _usable(self) -> bool:
        return not self.ws.closed and self.transport is not None and not self.transport.is_closing()

    async def _send(self, message: Outgoing, media: bool) -> bool:
        """Sends (or holds, under XOFF) one message; False when a media frame was dropped."""
        if not self._usable():
            return False
        if self.paused:
            if media and sum(1 for _, m in self._held if m) >= MAX_HELD_FRAMES:
                self.frames_held_dropped += 1
                self.metrics.frames_dropped.inc()
                return False
            self._held.append((message, media))
            return True
        if media:
            if frame_must_skip(self.transport):
                self.metrics.frames_dropped.inc()  # drop, never block the clock
                return False
        elif send_would_wait(self.transport, self.protocol, len(message)):
            # A mark or clear cannot be dropped alone: a far end this far behind (megabytes unread) is cut.
            log.warning(
                "%s far end is not reading (%d bytes unsent); closing it",
                self.spec.kind,
                self.transport.get_write_buffer_size(),
            )
            self.transport.abort()
            return False
        if isinstance(message, bytes):
            await self.ws.send_bytes(message)
        else:
            await self.ws.send_str(message)
        if media:
            self._frames.inc()
        return True

    def _encode(self, frame: bytes) -> list[bytes]:
        """One PCM16 frame of the session's → wire-encoded frames at the wire's rate (resampling is bursty: 0..n frames)."""
        pcm = np.frombuffer(frame, dtype="<i2")
        if self._resampler is None:
            return [frame if self.out.encoding == "pcm16le" else self.out.encode(pcm)]
        self._fifo.push(self._resampler.process(int16_to_float(pcm)))
        out = []
        while (block := self._fifo.pop()) is not None:
            out.append(self.out.encode(float_to_int16(block)))
        return out

    def congested(self) -> bool:
        """The next frame will be skipped (the far end is not reading; frames held under XOFF are not skipped)."""
        return self._usable() and not self.paused and frame_must_skip(self.transport)

    async def send_audio(self, frame: bytes) -> bool:
        sent = False
        if self._usable():
            sent = True
            for data in self._encode(frame):
                for message in self.wire.media(data):
                    sent = await self._send(message, media=True) and sent
        await self._send_marks()
        return sent

    async def _send_marks(self) -> None:
        while self._to_mark:
            name, mark = self._to_mark.pop(0)
            if not self._usable():
                continue
            if (
                len(self.sent_marks) >= self.spec.max_outstanding_marks
            ):  # a far end that never confirms must not grow our memory
                del self.sent_marks[next(iter(self.sent_marks))]
            self.sent_marks[name] = mark
            for message in self.wire.mark(name):
                await self._send(message, media=isinstance(message, bytes))

    def on_playout_event(self, event: PlayoutEvent) -> None:
        if event.type == "mark":
            # Short names: Asterisk ignores commands over 128 bytes, and turn ids are the agent's to choose.
            d = event.data
            name = f"m{next(self._names)}"
            mark = _SentMark(
                self.epoch, event.turn_id, d["chunk"], d["played_ms"], d.get("mark_id"), d.get("progress", False)
            )
            self._to_mark.append((name, mark))

    async def on_flush(self) -> None:
        """Barge-in: the far end drops what it buffered; our held frames and marks go too."""
        self._to_mark.clear()
        self._held.clear()
        self._resampler, self._fifo = self._new_resampler()
        self.epoch += 1
        self.clears_sent += 1
        paused, self.paused = self.paused, False  # a command is not media: it goes out even under XOFF
        for message in self.wire.clear():
            await self._send(message, media=False)
        self.paused = paused
        if not self.wire.clear_returns_marks:
            # This far end never answers for the marks it dropped: they are dropped now.
            dropped, self.sent_marks = self.sent_marks, {}
            self._dropped_names.extend(dropped)
            for mark in dropped.values():
                if mark.mark_id is not None:
                    self.confirmed(mark.mark_id, False)
                if not mark.progress:
                    await self.notify(_call_mark(mark, "dropped"))

    def on_confirmation(self, done: MarkDone) -> dict | None:
        """The far end reached (or dropped) a mark: tells the session, and returns the `call.mark` event (None for
        a progress mark, or one already reported dropped at a barge-in); `bad_message` for a mark never sent."""
        mark = self.sent_marks.pop(done.name, None)
        if mark is None:
            if done.name in self._dropped_names:
                return None
            raise P.ProtocolError(
                P.BAD_MESSAGE, f"the {self.spec.kind} far end confirmed mark {done.name!r}, which was never sent"
            )
        if mark.mark_id is not None:
            self.confirmed(mark.mark_id, done.played)  # heard only if it came before our clear: the core's rule
        if mark.progress:
            return None
        return _call_mark(mark, "played" if done.played and mark.epoch == self.epoch else "dropped")

    async def on_flow(self, paused: bool) -> None:
        self.paused = paused
        if not paused:
            held, self._held = self._held, deque()
            for message, media in held:
                await self._send(message, media)

    async def hangup(self) -> None:
        if self._usable():
            self.paused = False
            for message in self.wire.hangup():
                await self._send(message, media=False)
        if not self.ws.closed:
            await self.ws.close(code=WSCloseCode.OK)


def _call_mark(mark: _SentMark, status: str) -> dict:
    return {
        "type": "call.mark",
        "turn_id": mark.turn_id,
        "chunk": mark.chunk,
        "status": status,
        "played_ms": mark.played_ms,
    }


class WireEndpoint:
    """The route of one wire: auth, upgrade, and one `_WireStream` per far-end connection."""

    def __init__(self, core: CallCore, spec: WireSpec):
        self.core = core
        self.registry = core.calls
        self.spec = spec

    def routes(self) -> list[web.RouteDef]:
        """`{path}/{call_id}` names the call in the path (a balancer hashes on it); `?call_id=` and the far end's ids still work."""
        return [web.get(self.spec.path, self.handle), web.get(self.spec.path + "/{call_id}", self.handle)]

    async def auth_problem(self, request: web.Request) -> str | None:
        """API keys as elsewhere; far ends that cannot send a bearer use HTTP Basic with the key as password, or
        `?token=` with a minted token (never a key: a URL ends up in logs). None: it may pass."""
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            try:
                password = base64.b64decode(header[6:], validate=True).decode().partition(":")[2]
            except (binascii.Error, ValueError):
                return WIRE_UNAUTHORIZED
            problem = await admit(self.core, request, password)  # an API key or a session token
        else:
            problem = await admit(self.core, request)
        return None if problem is None else (problem if problem == KEY_IN_QUERY_MESSAGE else WIRE_UNAUTHORIZED)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        gw = self.core
        try:
            problem = await self.auth_problem(request)
        except ClusterUnavailable as exc:
            gw.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
            return unavailable_response(exc)
        if problem is not None:
            gw.metrics.errors.labels(code=P.UNAUTHORIZED).inc()
            return web.json_response(P.error_event(P.UNAUTHORIZED, problem), status=401)
        limits = gw.config.server.limits
        known = request.match_info.get("call_id") or request.query.get("call_id")
        if known and gw.cluster is not None:  # another node may own the call: one hop there
            forwarded = await forward_by_path(
                gw, request, self.spec.kind, [known], {"heartbeat": limits.ping_interval_s}
            )
            if forwarded is not None:
                return forwarded
        protocols = (self.spec.subprotocol,) if self.spec.subprotocol else ()
        ws = web.WebSocketResponse(
            protocols=protocols,
            heartbeat=limits.ping_interval_s,
            compress=False,
            max_msg_size=max(MAX_MESSAGE_BYTES, limits.max_message_bytes * 4),
        )
        await ws.prepare(request)
        if not gw.accepting:
            await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
            return ws
        sock = ws
        if gw.cluster is not None and not known:  # the far end's opening message names the call
            sock = await forward_after_peek(gw, request, ws, self.spec.kind, self._start_ids(request), START_TIMEOUT_S)
            if sock is None:
                return ws
        stream = _WireStream(self, sock, request)
        self.registry.track(ws.close)
        await run_media_stream(gw, stream, ws, self.spec.kind, log)
        return ws

    def _start_ids(self, request: web.Request):
        """Reads opening messages with a spare wire: the call ids of its start, None before it, [] if it fails."""
        wire = self.spec.make_wire(request.query)

        def ids_of(msg) -> list[str] | None:
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                return []
            try:
                events = list(wire.decode(msg.data))
            except Exception:  # the real wire reports it, once the leg is served here
                return []
            started = next((e for e in events if isinstance(e, Started)), None)
            if started is not None:
                return list(started.call_ids)
            return None if all(isinstance(e, Notice) for e in events) else []

        return ids_of


class _WireStream:
    """The reading side of one far-end WebSocket."""

    def __init__(self, endpoint: WireEndpoint, ws: web.WebSocketResponse, request: web.Request):
        self.endpoint = endpoint
        self.core = endpoint.core
        self.spec = endpoint.spec
        self.ws = ws
        self.request = request
        self.query = request.query
        self.wire = self.spec.make_wire(request.query)
        self.leg: WireMediaLeg | None = None
        self.call: Call | None = None
        self.end_reason = "disconnected"
        self._inbound_resampler: StreamResampler | None = None

    async def run(self) -> None:
        limits = self.core.config.server.limits
        while not self.ws.closed:
            timeout = limits.idle_timeout_s if self.call is not None else START_TIMEOUT_S
            try:
                msg = await asyncio.wait_for(self.ws.receive(), timeout=timeout)
            except asyncio.TimeoutError:
                self.end_reason = P.IDLE_TIMEOUT
                await self._error(P.IDLE_TIMEOUT, f"nothing from the {self.spec.kind} far end for {timeout:g} s")
                return
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                try:
                    if await self._on_message(msg.data):
                        return
                except StartRefused as exc:  # a stream that cannot start: nothing else on it can work
                    await self._error(exc.code, exc.message)
                    self.end_reason = exc.code
                    await self.ws.close(code=P.CLOSE_TRY_AGAIN_LATER if exc.code == P.AT_CAPACITY else P.CLOSE_POLICY)
                    return
                except P.ProtocolError as exc:
                    await self._error(exc.code, exc.message)
            elif msg.type == WSMsgType.ERROR:
                exc = self.ws.exception()
                await self._error(
                    P.TOO_LARGE if "size" in str(exc) else P.BAD_MESSAGE, f"{self.spec.kind} socket error: {exc}"
                )
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    async def _on_message(self, data: str | bytes) -> bool:
        """One far-end message; True when the stream is over."""
        for event in self.wire.decode(data):
            if isinstance(event, Audio):
                self._on_audio(event)
            elif isinstance(event, Started):
                await self._on_start(event)
            elif isinstance(event, MarkDone):
                outcome = self.leg.on_confirmation(event)
                if outcome is not None:
                    await self.call.notify(outcome)
                else:
                    await self.call.session.flush_events()  # a confirmation may release a mark or a turn.done
            elif isinstance(event, Dtmf):
                await self.call.notify({"type": "dtmf", "digit": event.digit})
            elif isinstance(event, FlowControl):
                log.info(
                    "%s call %s: far end says %s", self.spec.kind, self.call.call_id, "XOFF" if event.paused else "XON"
                )
                await self.leg.on_flow(event.paused)
            elif isinstance(event, Ended):
                self.end_reason = event.reason
                return True
            elif isinstance(event, FarEndError):
                await self._error(P.MEDIA_ERROR, event.message)
            elif isinstance(event, Notice):
                log.debug("%s: %s", self.spec.kind, event.kind)
        return False

    async def _on_start(self, started: Started) -> None:
        if not self.core.accepting:
            raise StartRefused(P.SHUTTING_DOWN, "the gateway is not accepting calls")
        q = self.query
        ids = [i for i in (self.request.match_info.get("call_id"), q.get("call_id"), *started.call_ids) if i]
        if not ids:
            raise StartRefused(
                P.BAD_MESSAGE,
                f"the {self.spec.kind} stream names no call id: pass call_id (a header or a query parameter)",
            )
        voice = q.get("voice") or started.voice
        language = q.get("language") or started.language
        leg = WireMediaLeg(self.ws, self.request, self.wire, self.spec, self.core.metrics, self._notify)
        try:
            call = self.endpoint.registry.connect_media(
                ids,
                leg,
                self.spec.kind,
                voice,
                language,
                output=native_output(self.wire.outbound),
                inbound_rate=started.audio.sample_rate,
            )
        except P.ProtocolError as exc:
            raise StartRefused(exc.code, exc.message) from None
        leg.bind(call.session.output, call.session.playback_confirmed)
        self.leg, self.call = leg, call
        if started.audio.sample_rate != call.inbound.sample_rate:
            self._inbound_resampler = StreamResampler(started.audio.sample_rate, call.inbound.sample_rate)
        log.info("%s call %s started (%s, ids %s)", self.spec.kind, call.call_id, started.info, ids)
        await call.session.flush_events()

    async def _notify(self, event: dict) -> None:
        if self.call is not None:
            await self.call.notify(event)

    def _on_audio(self, audio: Audio) -> None:
        if self.call is None:
            return
        pcm = audio.pcm
        if self._inbound_resampler is not None:
            pcm = float_to_int16(self._inbound_resampler.process(int16_to_float(pcm)))
        self.call.inbound.push(pcm, audio.timestamp_ms)

    async def _error(self, code: str, message: str) -> None:
        if self.call is not None and not self.call.session.closed:
            await self.call.report(code, message)  # the session counts it
        else:
            self.core.metrics.errors.labels(code=code).inc()
        log.info(
            "%s stream %s: %s: %s", self.spec.kind, self.call.call_id if self.call else "(not started)", code, message
        )


def native_output(out: WireAudio) -> OutputFormat:
    """The session format that needs no resampling for this wire: its own pcm16 rate, else 8 kHz."""
    if out.encoding in ("pcm16le", "pcm16be") and out.sample_rate in PCM16_RATES:
        return OutputFormat("pcm16", out.sample_rate)
    return TELEPHONY_PCM


def install_wire(core: CallCore, host: LegHost, spec: WireSpec) -> WireEndpoint:
    """Serves one wire's path on the gateway's port (each provider's leg module calls this)."""
    endpoint = WireEndpoint(core, spec)
    host.add_routes(endpoint.routes())
    return endpoint
