"""/v1/ws: the native protocol (docs/protocol.md), both legs on one WebSocket.

JSON text messages for control and events, binary messages for the playout's
20 ms frames in the negotiated encoding, paced by the shared clock — or, with
`session.start.output.pacing: "none"`, the audio as the engine makes it, for
clients that pace it themselves (gateway/core/unpaced.py). With
`session.start.input` the client's binary messages are the caller's audio
(any length, in that encoding and rate); without it they are refused with
`binary_not_allowed`.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import WSMsgType, web

from audio.encode import OutputFormat, encode_pcm
from gateway import protocol as P
from gateway.core import CallCore, Session
from gateway.core.caller_voice import decode_input, parse_input, session_settings
from gateway.core.inbound import InboundAudio
from gateway.core.backpressure import allow_event_backlog, drop_if_stuck, frame_must_skip
from gateway.core.unpaced import MAX_UNSENT_BYTES
from gateway.legs.accept import accept_ws, close_code
from gateway.legs.host import LegHost
from gateway.metrics import GatewayMetrics

log = logging.getLogger("voxgate.native_ws")

PACINGS = ("realtime", "none")  # session.start.output.pacing
FRAMES_PER_REPORT = 50  # frames_sent is added to once a second of audio per call, not per frame (the lock costs ~1 µs)


def binary_frame_header(n: int) -> bytes:
    """RFC 6455 §5.2: a final, unmasked binary frame of `n` payload bytes (a server never masks)."""
    if n < 126:
        return bytes((0x82, n))
    if n < 65536:
        return bytes((0x82, 126)) + n.to_bytes(2, "big")
    return bytes((0x82, 127)) + n.to_bytes(8, "big")


class NativeWsLeg:
    """The session's text and media leg over one /v1/ws socket."""

    clock_driven = True
    send_idle_silence = False

    def __init__(
        self, ws: web.WebSocketResponse, request: web.BaseRequest, output: OutputFormat, metrics: GatewayMetrics
    ):
        self.ws = ws
        self.transport = request.transport
        self.protocol = request.protocol
        allow_event_backlog(self.transport)
        self.output = output
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="ws")
        self._unreported = 0  # frames sent and not yet added to frames_sent
        self._header = b""  # the binary frame header for `_header_for` bytes: the same length every tick
        self._header_for = -1
        self.input_encoding: str | None = None  # session.start.input: binary client messages are caller audio
        # The tick's coroutine-free send (MediaLeg's optional `send_audio_now`); a deflating socket has none
        self.send_audio_now = None if ws.compress else self._write_frame

    async def send_event(self, event: dict) -> None:
        if self.ws.closed:
            return
        data = P.dump_event(event)
        if drop_if_stuck(self.transport, self.protocol, len(data.encode()), "client"):
            return  # events cannot be skipped like frames: a client this far behind has stopped reading
        await self.ws.send_str(data)

    def congested(self) -> bool:
        """The next frame will be skipped (the client is not reading fast enough)."""
        t = self.transport
        return t is not None and not t.is_closing() and frame_must_skip(t)

    async def send_audio(self, frame: bytes) -> bool:
        if not self.ws.compress:
            return self._write_frame(frame)
        # never, as accept.py builds the socket; aiohttp's writer would deflate
        t = self.transport
        if t is None or t.is_closing() or self.ws.closed:
            return False
        if frame_must_skip(t):
            self.metrics.frames_dropped.inc()
            return False
        await self.ws.send_bytes(frame)
        self._count_frame()
        return True

    def _write_frame(self, frame: bytes) -> bool:
        """`send_audio` on an uncompressed socket, without a coroutine (the session's tick calls it as
        `send_audio_now`): an audio frame needs no lock and no drain (frame_must_skip watches the backlog), and
        one transport.write cannot interleave with aiohttp's own frames on this single-threaded loop."""
        t = self.transport
        if t is None or t.is_closing() or self.ws.closed:
            return False
        if frame_must_skip(t):
            self.metrics.frames_dropped.inc()  # a slow client loses frames, never the clock
            return False
        n = len(frame)
        if n != self._header_for:
            self._header, self._header_for = binary_frame_header(n), n
        # The whole frame in one write, past aiohttp's writer (a coroutine and three calls a frame).
        t.write(self._header + frame)
        self._count_frame()
        return True

    def _count_frame(self) -> None:
        self._unreported += 1
        if self._unreported >= FRAMES_PER_REPORT:
            self.report_frames()

    def report_frames(self) -> None:
        """Adds the frames sent since the last report to frames_sent (also at the call's end)."""
        if self._unreported:
            self._frames.inc(self._unreported)
            self._unreported = 0

    async def on_flush(self) -> None:
        pass  # the client's own buffer is the client's; `turn.done(interrupted)` tells it to drop

    def on_playout_event(self, event) -> None:
        pass

    # ------------------------------------------------------------ output.pacing "none": UnpacedPlayout.pump's leg
    async def send_piece(self, pcm) -> bool:
        """One piece of unpaced audio (any length), never skipped: the sender waited for room (`writable`)."""
        if self.ws.closed:
            return False
        data = encode_pcm(pcm, self.output.encoding)
        await self.ws.send_bytes(data)
        self._frames.inc(max(1, round(len(pcm) / self.output.frame_samples)))
        return True

    async def writable(self) -> bool:
        """Waits while the client has not read the audio already sent (it paces itself); False once it is gone."""
        delay = 0.002
        while True:
            t = self.transport
            if self.ws.closed or t is None or t.is_closing():
                return False
            if t.get_write_buffer_size() <= MAX_UNSENT_BYTES:
                return True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)


class NativeWsEndpoint:
    def __init__(self, core: CallCore):
        self.core = core
        self._connections = 0  # sockets without a session yet count against max_sessions
        # sockets with no session: nothing else ends them at stop, and the HTTP server would wait ~30 s on each
        self._sessionless: set[web.WebSocketResponse] = set()

    def route(self) -> web.RouteDef:
        return web.get("/v1/ws", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        core = self.core
        ws, accepted = await accept_ws(core, request)
        if not accepted:
            return ws
        limits = core.config.server.limits
        if core.registry.full(self._connections):
            error = core.registry.capacity_error()
            core.metrics.errors.labels(code=error.code).inc()
            await ws.send_json(error.event())
            await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
            return ws
        self._connections += 1
        self._sessionless.add(ws)
        session: Session | None = None
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=limits.idle_timeout_s)
                except asyncio.TimeoutError:
                    error = P.error_event(P.IDLE_TIMEOUT, f"no message for {limits.idle_timeout_s:g} s")
                    if session:
                        await session.close(error)
                    else:
                        await ws.send_json(error)
                    break
                if msg.type == WSMsgType.TEXT:
                    try:
                        m = P.parse_message(msg.data, limits.max_message_bytes)
                        if m["type"] == "session.start":
                            if session is not None:
                                raise P.ProtocolError(P.SESSION_EXISTS, "this connection already has a session")
                            session = self._start(ws, request, m)
                            self._sessionless.discard(ws)
                            await session.flush_events()
                        elif session is None:
                            raise P.ProtocolError(P.NO_SESSION, "send session.start first")
                        elif m["type"] == "user.text":
                            await core.handle_user_text(session, m["text"])
                        else:
                            await session.handle(m)
                    except P.ProtocolError as exc:
                        await self._error(ws, session, exc)
                    if session is not None and session.closed:
                        break
                elif msg.type == WSMsgType.BINARY:
                    leg = session.text_leg if session is not None else None
                    if (
                        session is None
                        or session.inbound is None
                        or not isinstance(leg, NativeWsLeg)
                        or leg.input_encoding is None
                    ):
                        await self._error(
                            ws,
                            session,
                            P.ProtocolError(
                                P.BINARY_NOT_ALLOWED,
                                "binary messages are caller audio only when session.start carries `input`",
                            ),
                        )
                        continue
                    try:
                        session.inbound.push(decode_input(leg.input_encoding, msg.data))
                    except P.ProtocolError as exc:
                        await self._error(ws, session, exc)
                elif msg.type == WSMsgType.ERROR:
                    code = P.TOO_LARGE if "size" in str(ws.exception()) else P.BAD_MESSAGE
                    log.info("ws error: %s", ws.exception())
                    core.metrics.errors.labels(code=code).inc()
                    break
                else:  # CLOSE, CLOSING, CLOSED
                    break
        except ConnectionError:  # the peer vanished while we wrote (a pong, a close): a hang-up, not a fault
            log.debug("connection lost", exc_info=True)
        except Exception:
            log.exception("native ws connection failed")
            if not ws.closed:
                try:
                    await ws.send_json(P.error_event(P.INTERNAL, "internal error; the session was closed"))
                except ConnectionError:
                    pass
        finally:
            self._connections -= 1
            self._sessionless.discard(ws)
            if session is not None and not session.closed:
                await session.close()
            if session is not None and isinstance(session.text_leg, NativeWsLeg):
                session.text_leg.report_frames()
            if session is not None and session.inbound is not None:
                session.inbound.close()
            if not ws.closed:
                await ws.close(code=close_code(core))
        return ws

    def _start(self, ws: web.WebSocketResponse, request: web.Request, m: dict) -> Session:
        out = m.get("output") or {}
        try:
            output = OutputFormat(encoding=out.get("encoding", "pcm16"), sample_rate=out.get("sample_rate", 24000))
        except (ValueError, TypeError) as exc:
            raise P.ProtocolError(P.UNSUPPORTED_FORMAT, str(exc)) from None
        pacing = out.get("pacing")
        pacing = "realtime" if pacing is None else pacing  # null means the default, as for the other optional fields
        if pacing not in PACINGS:
            raise P.ProtocolError(P.BAD_MESSAGE, f"output.pacing must be one of {', '.join(PACINGS)}, not {pacing!r}")
        caller_input = parse_input(m["input"]) if m.get("input") is not None else None
        barge_in = session_settings(self.core.config.barge_in, m.get("barge_in"))
        unpaced = pacing == "none"
        mode = P.check_mode(m.get("mode"))
        session = self.core.new_session(
            "ws", m.get("voice"), (m.get("language") or "auto"), m.get("instruct"), output, unpaced=unpaced
        )
        session.set_mode(mode)
        session.word_timings = bool(m.get("word_timings"))
        leg = NativeWsLeg(ws, request, output, self.core.metrics)
        leg.clock_driven = not unpaced  # unpaced: the playout's sender task sends, not the shared clock
        if caller_input is not None:
            leg.input_encoding = caller_input[0]
            session.inbound = InboundAudio(caller_input[1])
            self.core.voice.attach(session, session.inbound, barge_in)
        session.attach_text(leg)
        session.attach_media(leg)
        self.core.play(session)
        if unpaced:
            session.observers.append(session.playout.on_session_event)
            sender = asyncio.get_running_loop().create_task(
                session.playout.pump(leg.send_piece, session.flush_events, leg.writable)
            )
            session.on_close(sender.cancel)
        session.emit(
            {
                "type": "session.started",
                "session_id": session.session_id,
                "voice": session.voice_name,
                "language": (m.get("language") or "auto"),
                "output": {
                    "encoding": output.encoding,
                    "sample_rate": output.sample_rate,
                    "frame_ms": output.frame_ms,
                    "pacing": pacing,
                },
                "mode": session.mode,
                **({"mode_note": session.mode_note} if session.mode_note else {}),
                **({"word_timings": True} if session.word_timings else {}),
                **(
                    {
                        "input": {"encoding": caller_input[0], "sample_rate": caller_input[1]},
                        "barge_in": {
                            "mode": barge_in.mode if session.caller_voice is not None else "off",
                            "min_speech_ms": barge_in.min_speech_ms,
                        },
                    }
                    if caller_input
                    else {}
                ),
            }
        )
        asyncio.get_running_loop().create_task(self._close_ws_when_done(session, ws))
        return session

    async def _close_ws_when_done(self, session: Session, ws: web.WebSocketResponse) -> None:
        await session.wait_closed()
        if not ws.closed:
            await ws.close(code=close_code(self.core))

    async def _error(self, ws, session: Session | None, exc: P.ProtocolError) -> None:
        if session is not None:
            await session.report(exc)  # counted by the session
        else:
            self.core.metrics.errors.labels(code=exc.code).inc()
            if not ws.closed:
                await ws.send_json(exc.event())

    async def close_sessionless(self) -> None:
        """At stop: says so to every socket that has no session (a refused session.start leaves one) and closes it."""
        for ws in list(self._sessionless):
            if ws.closed:
                continue
            try:
                await ws.send_json(P.error_event(P.SHUTTING_DOWN, "the gateway is shutting down"))
                await ws.close(code=close_code(self.core))
            except ConnectionError:
                pass


def install(core: CallCore, host: LegHost) -> NativeWsEndpoint:
    endpoint = NativeWsEndpoint(core)
    host.add_routes([endpoint.route()])
    host.on_stop(endpoint.close_sessionless)
    return endpoint
