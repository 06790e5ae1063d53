"""The gateway server: one aiohttp app on one port.

aiohttp, not `websockets`, serves: later routes need HTTP POST on the same
port (WebRTC signalling), which `websockets`' server cannot take; aiohttp
serves plain HTTP routes and WebSocket upgrades side by side. `websockets`
stays the client for tests and the load tester.

Routes: /v1/ws (native protocol), /healthz, /readyz, /metrics, /v1/voices,
and those that transports register through `Gateway.add_routes`.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import os
import re
import signal
import time
import uuid
from typing import Awaitable, Callable

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from audio.encode import OutputFormat
from gateway import protocol as P
from gateway.backpressure import allow_event_backlog, drop_if_stuck
from gateway.calls import install_telephony
from gateway.clock import PlayoutClock
from gateway.config import Config, ConfigError, load_config
from gateway.engines import build_engine, resolve_kind
from gateway.metrics import GatewayMetrics
from gateway.session import Session
from tts import Engine, EngineError

log = logging.getLogger("voxgate.server")

CLOSE_TRY_AGAIN_LATER = 1013
# A client whose socket holds more than this is not keeping up: its frames are dropped, not queued.
MAX_SEND_BACKLOG_BYTES = 48 * 1024
_LANGUAGE = re.compile(r"auto|[a-z]{2}")


class _MalformedRequestsAreNotErrors(logging.Filter):
    """aiohttp answers a request it cannot parse with 400 and logs it as an ERROR with a traceback:
    anyone who can reach the port could fill the log with them. They are refused requests, not faults."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        if not log.isEnabledFor(logging.INFO):
            return False
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args, record.exc_info, record.exc_text = "refused a malformed HTTP request (%s)", (exc.message,), None, None
        return True


def quiet_malformed_requests() -> None:
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _MalformedRequestsAreNotErrors) for f in logger.filters):
        logger.addFilter(_MalformedRequestsAreNotErrors())


class NativeWsLeg:
    """/v1/ws: both legs on one WebSocket; JSON events and binary 20 ms frames."""

    clock_driven = True
    send_idle_silence = False

    def __init__(self, ws: web.WebSocketResponse, request: web.BaseRequest, output: OutputFormat, metrics: GatewayMetrics):
        self.ws = ws
        self.transport = request.transport
        self.protocol = request.protocol
        allow_event_backlog(self.transport)
        self.output = output
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="ws")

    async def send_event(self, event: dict) -> None:
        if self.ws.closed:
            return
        data = P.dump_event(event)
        if drop_if_stuck(self.transport, self.protocol, len(data.encode()), "client"):
            return  # events cannot be skipped like frames: a client this far behind has stopped reading
        await self.ws.send_str(data)

    async def send_audio(self, frame: bytes) -> None:
        t = self.transport
        if self.ws.closed or t is None or t.is_closing():
            return
        # Far below the event high-water mark (1 MiB), so a frame never makes the send wait.
        if t.get_write_buffer_size() > MAX_SEND_BACKLOG_BYTES:
            self.metrics.frames_dropped.inc()  # a slow client loses frames, never the clock
            return
        await self.ws.send_bytes(frame)
        self._frames.inc()

    async def on_flush(self) -> None:
        pass  # the client's own buffer is the client's; `turn.done(interrupted)` tells it to drop

    def on_playout_event(self, event) -> None:
        pass


class Gateway:
    def __init__(self, config: Config, engine: Engine | None = None):
        self.config = config
        self.engine = engine or build_engine(config)
        self.engine_kind = getattr(self.engine, "name", resolve_kind(config))
        vocoder = config.engine.vocoder if self.engine_kind == "qwen3" else "none"
        self.metrics = GatewayMetrics(self.engine.stats, self.engine_kind, vocoder)
        self.clock = PlayoutClock(
            config.playout.frame_ms,
            on_lateness=self.metrics.clock_lateness.observe,
            on_skip=self.metrics.clock_skipped.inc,
        )
        self.sessions: dict[str, Session] = {}
        self.accepting = False
        self._connections = 0
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.app = web.Application(client_max_size=config.server.limits.max_message_bytes * 4)
        self.app.add_routes([
            web.get("/v1/ws", self._native_ws),
            web.get("/healthz", self._healthz),
            web.get("/readyz", self._readyz),
            web.get("/metrics", self._metrics),
            web.get("/v1/voices", self._voices),
        ])
        self._on_start: list[Callable[[], Awaitable[None]]] = []
        self._on_stop: list[Callable[[], Awaitable[None]]] = []
        self.user_text_handler: Callable[[Session, str], Awaitable[None]] | None = None
        quiet_malformed_requests()
        self.calls = install_telephony(self)  # /v1/control, /v1/twilio, AudioSocket server (gateway/calls.py)
        if not config.server.api_keys:
            log.warning("no server.api_keys configured: the gateway is OPEN to anyone who can reach it")

    # ------------------------------------------------------------ lifecycle
    def add_routes(self, routes) -> None:
        self.app.add_routes(routes)

    def on_start(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._on_start.append(fn)

    def on_stop(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._on_stop.append(fn)

    async def start(self, host: str | None = None, port: int | None = None) -> int:
        if self.config.server.log_dir:
            try:
                os.makedirs(self.config.server.log_dir, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"{self.config.source}: server.log_dir: cannot create {self.config.server.log_dir!r}: {exc.strerror}") from exc
        if any(v.stress for v in self.config.voices.values()):
            from tts.frontend.stress import warm_up  # load the stress model now, not on a caller's first chunk

            await asyncio.to_thread(warm_up)
        await self.engine.start()
        self.clock.start()
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host or self.config.server.host, self.config.server.port if port is None else port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        for fn in self._on_start:
            await fn()
        self.accepting = True
        return self.port

    @property
    def url(self) -> str:
        return f"http://{self.config.server.host}:{self.port}"

    async def drain(self, timeout: float | None = None) -> None:
        """Stop accepting, let open turns finish (up to the timeout), then close everything with 1001."""
        self.accepting = False
        timeout = self.config.server.limits.drain_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(s.active_turns for s in self.sessions.values()):
            await asyncio.sleep(0.05)
        for session in list(self.sessions.values()):
            await session.close(P.error_event(P.SHUTTING_DOWN, "the gateway is shutting down"))

    async def stop(self) -> None:
        self.accepting = False
        for session in list(self.sessions.values()):
            await session.close()
        for fn in self._on_stop:
            await fn()
        await self.clock.stop()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None
        await self.engine.close()

    # ------------------------------------------------------------ sessions
    def new_session(
        self, leg_name: str, voice: str | None, language: str, instruct: str | None, output: OutputFormat, session_id: str | None = None
    ) -> Session:
        """Validates the session.start fields and registers a session (the caller attaches legs)."""
        voice = voice or self.config.default_voice_name
        if voice not in self.config.voices:
            raise P.ProtocolError(P.UNKNOWN_VOICE, f"unknown voice {voice!r}; GET /v1/voices lists them")
        if not _LANGUAGE.fullmatch(language):
            raise P.ProtocolError(P.BAD_MESSAGE, f"language must be 'auto' or an ISO 639-1 code, not {language!r}")
        if len(self.sessions) >= self.config.server.max_sessions:
            raise P.ProtocolError(P.AT_CAPACITY, f"the gateway holds its maximum of {self.config.server.max_sessions} sessions")
        session = Session(
            session_id or uuid.uuid4().hex[:16], self.config, self.engine, self.metrics, voice, language, instruct, output, on_closed=self._session_closed
        )
        self.sessions[session.session_id] = session
        self.metrics.sessions_active.set(len(self.sessions))
        self.metrics.sessions_total.labels(leg=leg_name).inc()
        return session

    def _session_closed(self, session: Session) -> None:
        self.sessions.pop(session.session_id, None)
        self.clock.remove(session)
        self.metrics.sessions_active.set(len(self.sessions))

    def authorized(self, request: web.Request) -> bool:
        keys = self.config.server.api_keys
        if not keys:
            return True
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else request.query.get("token", "")
        return any(hmac.compare_digest(token.encode(), k.encode()) for k in keys)

    # ------------------------------------------------------------ HTTP routes
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        ready = self.accepting and len(self.sessions) < self.config.server.max_sessions
        body = {"ready": ready, "sessions": len(self.sessions), "engine": self.engine_kind}
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def _voices(self, request: web.Request) -> web.Response:
        voices = [{"name": name, "language": v.language, "speaker": v.speaker, "instruct": v.instruct} for name, v in self.config.voices.items()]
        return web.json_response({"default": self.config.default_voice_name, "voices": voices, "languages": ["auto", "en", "ru", "de", "fr", "es", "it", "pt", "zh", "ja", "ko"]})

    # ------------------------------------------------------------ client WebSockets
    async def accept_ws(self, request: web.Request) -> tuple[web.StreamResponse, bool]:
        """Auth, upgrade (no compression: audio does not compress) and the draining check shared by
        client sockets. Returns (response, accepted); a refused socket is already answered."""
        if not self.authorized(request):
            return web.json_response(P.error_event(P.UNAUTHORIZED, "missing or wrong API key (Authorization: Bearer <key> or ?token=)"), status=401), False
        limits = self.config.server.limits
        ws = web.WebSocketResponse(heartbeat=limits.ping_interval_s, max_msg_size=limits.max_message_bytes * 4, compress=False)
        await ws.prepare(request)
        if not self.accepting:
            await ws.send_json(P.error_event(P.SHUTTING_DOWN, "the gateway is not accepting calls"))
            await ws.close(code=CLOSE_TRY_AGAIN_LATER)
            return ws, False
        return ws, True

    async def _native_ws(self, request: web.Request) -> web.StreamResponse:
        ws, accepted = await self.accept_ws(request)
        if not accepted:
            return ws
        limits = self.config.server.limits
        if len(self.sessions) + self._connections >= self.config.server.max_sessions:
            self.metrics.errors.labels(code=P.AT_CAPACITY).inc()
            await ws.send_json(P.error_event(P.AT_CAPACITY, f"the gateway holds its maximum of {self.config.server.max_sessions} sessions"))
            await ws.close(code=CLOSE_TRY_AGAIN_LATER)
            return ws
        self._connections += 1
        session: Session | None = None
        call_timer = None
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=limits.idle_timeout_s)
                except asyncio.TimeoutError:
                    if session:
                        await session.close(P.error_event(P.IDLE_TIMEOUT, f"no message for {limits.idle_timeout_s:g} s"))
                    else:
                        await ws.send_json(P.error_event(P.IDLE_TIMEOUT, f"no message for {limits.idle_timeout_s:g} s"))
                    break
                if msg.type == WSMsgType.TEXT:
                    try:
                        m = P.parse_message(msg.data, limits.max_message_bytes)
                        if m["type"] == "session.start":
                            if session is not None:
                                raise P.ProtocolError(P.SESSION_EXISTS, "this connection already has a session")
                            session = self._start_native(ws, request, m)
                            call_timer = asyncio.get_running_loop().call_later(limits.max_call_s, self._call_too_long, session)
                            await session.flush_events()
                        elif session is None:
                            raise P.ProtocolError(P.NO_SESSION, "send session.start first")
                        elif m["type"] == "user.text":
                            await self.handle_user_text(session, m["text"])
                        else:
                            await session.handle(m)
                    except P.ProtocolError as exc:
                        await self._send_error(ws, session, exc)
                    if session is not None and session.closed:
                        break
                elif msg.type == WSMsgType.BINARY:
                    await self._send_error(ws, session, P.ProtocolError(P.BINARY_NOT_ALLOWED, "binary messages are not accepted on /v1/ws"))
                elif msg.type == WSMsgType.ERROR:
                    code = P.TOO_LARGE if "size" in str(ws.exception()) else P.BAD_MESSAGE
                    log.info("ws error: %s", ws.exception())
                    self.metrics.errors.labels(code=code).inc()
                    break
                else:  # CLOSE, CLOSING, CLOSED
                    break
        except Exception:
            log.exception("native ws connection failed")
            if not ws.closed:
                await ws.send_json(P.error_event(P.INTERNAL, "internal error; the session was closed"))
        finally:
            self._connections -= 1
            if call_timer:
                call_timer.cancel()
            if session is not None and not session.closed:
                await session.close()
            if not ws.closed:
                await ws.close(code=WSCloseCode.GOING_AWAY if not self.accepting else WSCloseCode.OK)
        return ws

    def _start_native(self, ws: web.WebSocketResponse, request: web.Request, m: dict) -> Session:
        out = m.get("output") or {}
        try:
            output = OutputFormat(encoding=out.get("encoding", "pcm16"), sample_rate=out.get("sample_rate", 24000))
        except (ValueError, TypeError) as exc:
            raise P.ProtocolError(P.UNSUPPORTED_FORMAT, str(exc)) from None
        session = self.new_session("ws", m.get("voice"), m.get("language") or "auto", m.get("instruct"), output)
        leg = NativeWsLeg(ws, request, output, self.metrics)
        session.attach_text(leg)
        session.attach_media(leg)
        self.clock.add(session)
        session.emit({
            "type": "session.started",
            "session_id": session.session_id,
            "voice": session.voice_name,
            "language": m.get("language") or "auto",
            "output": {"encoding": output.encoding, "sample_rate": output.sample_rate, "frame_ms": output.frame_ms},
        })
        asyncio.get_running_loop().create_task(self._close_ws_when_done(session, ws))
        return session

    async def _close_ws_when_done(self, session: Session, ws: web.WebSocketResponse) -> None:
        await session.wait_closed()
        if not ws.closed:
            await ws.close(code=WSCloseCode.GOING_AWAY if not self.accepting else WSCloseCode.OK)

    def _call_too_long(self, session: Session) -> None:
        if not session.closed:
            error = P.error_event(P.CALL_TOO_LONG, f"the call reached limits.max_call_s = {self.config.server.limits.max_call_s:g} s")
            asyncio.get_running_loop().create_task(session.close(error))

    async def handle_user_text(self, session: Session, text: str) -> None:
        if self.user_text_handler is None:
            raise P.ProtocolError(P.NO_AGENT, "no LLM agent is configured (config section `llm`)")
        await self.user_text_handler(session, text)

    async def _send_error(self, ws, session: Session | None, exc: P.ProtocolError) -> None:
        self.metrics.errors.labels(code=exc.code).inc()
        if session is not None:
            session._outbox.append(exc.event())
            await session.flush_events()
        elif not ws.closed:
            await ws.send_json(exc.event())


# ---------------------------------------------------------------- serve command
def install_transports(gateway: Gateway) -> None:
    """The optional legs: the built-in agent (`llm`), WebRTC and the demo page (the `webrtc` extra)."""
    from gateway import agent

    agent.install(gateway)
    try:
        from gateway import webrtc
    except ImportError as exc:
        log.warning("WebRTC and the demo page are off (%s): pip install 'voxgate[webrtc]'", exc)
    else:
        webrtc.install(gateway)


async def run_gateway(config: Config, ready: Callable[[Gateway], None] | None = None) -> None:
    gateway = Gateway(config)
    install_transports(gateway)
    await gateway.start()
    print(f"voxgate listening on {gateway.url}  (engine: {gateway.engine_kind}; native WS at ws://{config.server.host}:{gateway.port}/v1/ws)", flush=True)
    # Objects made at start-up never need collecting: keep them out of every GC pass (long GC pauses stall the clock).
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    if ready:
        ready(gateway)
    await stop.wait()
    log.info("draining: letting open turns finish for up to %.0f s", config.server.limits.drain_timeout_s)
    await gateway.drain()
    await gateway.stop()


def serve_main(args) -> int:
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict = {"server": {}, "engine": {}}
    if args.host:
        overrides["server"]["host"] = args.host
    if args.port is not None:
        overrides["server"]["port"] = args.port
    if args.model_dir:
        overrides["engine"]["model_dir"] = args.model_dir
    if getattr(args, "model", None) == "tiny":
        from tts.qwen3.tools import ensure_tiny_model  # lazily: only the model tools know the layout

        overrides["engine"].update({"kind": "qwen3", "model_dir": ensure_tiny_model(), "device": "cpu", "dtype": "float32"})
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"voxgate: {exc}")
        return 2
    try:
        asyncio.run(run_gateway(config))
    except (ValueError, OSError, EngineError) as exc:
        print(f"voxgate: cannot start: {exc}")
        return 1
    return 0
