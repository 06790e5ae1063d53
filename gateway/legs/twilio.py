"""/v1/twilio: Twilio Media Streams, bidirectional (`<Connect><Stream>`), as a media leg.

The messages are encoded and decoded by `gateway.wire.twilio`; this leg owns
the socket and the call. We send `media` frames paced by the shared clock, a
`mark` after each text chunk's last frame, and `clear` on barge-in. Twilio
buffers what it is sent and echoes a mark once the audio before it has
played; after a `clear` it echoes the pending marks too, so a mark echoed
after our `clear` means its chunk was dropped, not played. The control
socket learns each outcome as `call.mark`.

Nothing but media, mark and clear may go to Twilio, so problems with
Twilio's input are reported to the call's control socket and to metrics and
logs, never on this socket.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import os
from dataclasses import dataclass

from aiohttp import WSCloseCode, WSMsgType, web

from audio.playout import PlayoutEvent
from gateway import protocol as P
from gateway.cluster.forward import forward_after_peek, forward_by_path, is_hop
from gateway.core import CallCore
from gateway.core.backpressure import drop_if_stuck, frame_must_skip
from gateway.core.calls import TELEPHONY_PCM, Call
from gateway.legs.accept import run_media_stream, websocket_response
from gateway.legs.host import LegHost
from gateway.wire import twilio as wire
from gateway.wire.twilio import twilio_signature

log = logging.getLogger("voxgate.twilio")

MAX_MARK_BACKLOG_BYTES = 256 * 1024  # the socket's high-water mark: marks and clear still go out above the frame cap
MAX_OUTSTANDING_MARKS = 256
START_TIMEOUT_S = 10.0  # Twilio sends `start` right after connecting; a socket that does not is not Twilio

__all__ = ["TwilioLeg", "TwilioEndpoint", "install", "twilio_signature"]


@dataclass
class _SentMark:
    epoch: int  # the number of `clear`s sent before it
    turn_id: str
    chunk: int
    played_ms: float
    mark_id: int | None = None  # the session's id for it (Session.playback_confirmed)
    progress: bool = False  # a confirmation point inside a chunk: no `call.mark`


class TwilioLeg:
    """The media leg of one Twilio stream: μ-law frames, marks and clear."""

    clock_driven = True
    send_idle_silence = False
    confirms_playback = True  # Twilio echoes each mark once the audio before it has played
    output = TELEPHONY_PCM  # the session hands us PCM16 8 kHz; the wire encoder makes μ-law of it

    def __init__(self, ws: web.WebSocketResponse, transport, stream_sid: str, metrics, protocol=None):
        self.ws = ws
        self.transport = transport
        self.protocol = protocol  # aiohttp's request protocol: tells whether a send would wait for Twilio to read
        if transport is not None and protocol is not None:
            transport.set_write_buffer_limits(high=MAX_MARK_BACKLOG_BYTES)  # room for a mark that names a long turn id
        self.stream_sid = stream_sid
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="twilio")
        self.encoder = wire.TwilioEncoder(stream_sid)
        self._names = itertools.count()
        self._to_send: list[tuple[str, _SentMark]] = []  # marks whose chunk's last frame is being sent
        self.sent_marks: dict[str, _SentMark] = {}
        self.epoch = 0
        self.clears_sent = 0

    def _usable(self) -> bool:
        t = self.transport
        return not self.ws.closed and t is not None and not t.is_closing()

    async def _send_or_drop_stream(self, text: str) -> None:
        """A mark or clear: it cannot be dropped alone, so a stream backed up this far (megabytes unread) is cut."""
        if drop_if_stuck(self.transport, self.protocol, len(text), f"twilio stream {self.stream_sid}"):
            return
        await self.ws.send_str(text)

    def congested(self) -> bool:
        """The next frame will be skipped (Twilio is not reading fast enough)."""
        return self._usable() and frame_must_skip(self.transport)

    async def send_audio(self, frame: bytes) -> bool:
        sent = False
        if self._usable():
            if frame_must_skip(self.transport):
                self.metrics.frames_dropped.inc()  # as Twilio does when congested: drop, never block the clock
            else:
                await self.ws.send_str(self.encoder.media(frame))
                self._frames.inc()
                sent = True
        await self._send_marks()
        return sent

    async def _send_marks(self) -> None:
        """Marks go after the frame that holds their chunk's last audio."""
        while self._to_send:
            name, mark = self._to_send.pop(0)
            if not self._usable():
                continue
            if len(self.sent_marks) >= MAX_OUTSTANDING_MARKS:  # a far end that never echoes must not grow our memory
                del self.sent_marks[next(iter(self.sent_marks))]
            self.sent_marks[name] = mark
            await self._send_or_drop_stream(self.encoder.mark(name))

    def on_playout_event(self, event: PlayoutEvent) -> None:
        if event.type == "mark":
            d = event.data
            name = f"{event.turn_id}/{d['chunk']}/{next(self._names)}"
            self._to_send.append(
                (
                    name,
                    _SentMark(
                        self.epoch,
                        event.turn_id,
                        d["chunk"],
                        d["played_ms"],
                        d.get("mark_id"),
                        d.get("progress", False),
                    ),
                )
            )

    async def on_flush(self) -> None:
        self._to_send.clear()  # their audio was flushed before it went out
        self.epoch += 1
        self.clears_sent += 1
        if self._usable():
            await self._send_or_drop_stream(self.encoder.clear)

    def on_mark_echo(self, name: str) -> tuple[_SentMark, dict | None] | None:
        """Twilio echoed a mark: (the mark, its `call.mark` event for the control socket or None for a progress
        mark), or None if we never sent it."""
        mark = self.sent_marks.pop(name, None)
        if mark is None:
            return None
        if mark.progress:
            return mark, None
        status = "played" if mark.epoch == self.epoch else "dropped"
        return mark, {
            "type": "call.mark",
            "turn_id": mark.turn_id,
            "chunk": mark.chunk,
            "status": status,
            "played_ms": mark.played_ms,
        }

    async def hangup(self) -> None:
        if not self.ws.closed:
            await self.ws.close(code=WSCloseCode.OK)


class TwilioEndpoint:
    def __init__(self, core: CallCore):
        self.core = core
        self.registry = core.calls
        env = core.config.telephony.twilio_auth_token_env
        self.auth_token: str | None = None
        if env:
            self.auth_token = os.environ.get(env)
            if not self.auth_token:
                raise ValueError(
                    f"telephony.twilio_auth_token_env names {env!r}, but that environment variable is empty or unset"
                )
        self.allow_unsigned = core.config.telephony.twilio_allow_unsigned
        # Twilio cannot send an API key (no headers, no query string in <Stream>): its signature is /v1/twilio's only guard.
        self.refuse_all = self.auth_token is None and bool(core.config.server.api_keys) and not self.allow_unsigned
        if self.refuse_all:
            log.warning(
                "server.api_keys is set but telephony.twilio_auth_token_env is not: /v1/twilio refuses every stream "
                "(set the auth token to verify X-Twilio-Signature, or telephony.twilio_allow_unsigned: true)"
            )
        elif self.auth_token is None and core.config.server.api_keys:
            log.warning(
                "telephony.twilio_allow_unsigned is true and no twilio_auth_token_env is set: /v1/twilio is OPEN to anyone who can reach it"
            )

    def routes(self) -> list[web.RouteDef]:
        """`/v1/twilio/{call_id}`: `<Stream url>` takes no query string, so a balancer hashes on the path."""
        return [web.get("/v1/twilio", self.handle), web.get("/v1/twilio/{call_id}", self.handle)]

    def signed_url(self, request: web.Request) -> str:
        """The URL Twilio signed: `telephony.public_url` (behind proxies) or the one this request reached."""
        public = self.core.config.telephony.public_url
        if public:
            public = public.rstrip("/")
            return public if public.endswith(request.path) else public + request.path_qs
        scheme = "wss" if request.secure else "ws"
        return f"{scheme}://{request.host}{request.path_qs}"

    def refusal(self, request: web.Request) -> str | None:
        """None when the upgrade may go on, else why it is refused (a leg forwarded by a node of the plane was checked there)."""
        if is_hop(request):
            return None
        got = request.headers.get("X-Twilio-Signature")
        if self.refuse_all:
            return "unsigned Twilio streams are refused while server.api_keys is set (configure telephony.twilio_auth_token_env)"
        if self.auth_token is None or (got is None and self.allow_unsigned):
            return None
        want = twilio_signature(self.auth_token, self.signed_url(request))
        return (
            None if hmac.compare_digest((got or "").encode(), want.encode()) else "missing or wrong X-Twilio-Signature"
        )

    def signature_ok(self, request: web.Request) -> bool:
        return self.refusal(request) is None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        gw = self.core
        refusal = self.refusal(request)
        if refusal is not None:
            gw.metrics.errors.labels(code=P.UNAUTHORIZED).inc()
            gw.metrics.connections_refused.labels(reason="twilio_unsigned").inc()
            # the query string is left out of the log: it may carry a credential
            log.warning("twilio: refused a stream to %s: %s", request.path, refusal)
            return web.json_response(P.error_event(P.UNAUTHORIZED, refusal), status=403)
        path_id = request.match_info.get("call_id")
        if path_id and gw.cluster is not None:  # another node may own the call: one hop there
            forwarded = await forward_by_path(
                gw, request, "twilio", [path_id], {"heartbeat": gw.config.server.limits.ping_interval_s}
            )
            if forwarded is not None:
                return forwarded
        ws = websocket_response(gw)
        await ws.prepare(request)
        if not gw.accepting:
            await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
            return ws
        sock = ws
        if gw.cluster is not None and not path_id:  # the call is named by `start`: read it, then serve here or forward
            sock = await forward_after_peek(gw, request, ws, "twilio", start_ids, START_TIMEOUT_S)
            if sock is None:
                return ws
        stream = _TwilioStream(self, sock, request)
        self.registry.track(ws.close)
        await run_media_stream(gw, stream, ws, "Twilio", log)
        return ws


class _TwilioStream:
    """The reading side of one Twilio WebSocket."""

    def __init__(self, endpoint: TwilioEndpoint, ws: web.WebSocketResponse, request: web.Request):
        self.endpoint = endpoint
        self.core = endpoint.core
        self.ws = ws
        self.request = request
        self.leg: TwilioLeg | None = None
        self.call: Call | None = None
        self.end_reason = "disconnected"

    async def run(self) -> None:
        limits = self.core.config.server.limits
        while not self.ws.closed:
            timeout = limits.idle_timeout_s if self.call is not None else START_TIMEOUT_S
            try:
                msg = await asyncio.wait_for(self.ws.receive(), timeout=timeout)
            except asyncio.TimeoutError:  # Twilio may never send `stop`
                self.end_reason = "idle_timeout"
                await self._error(
                    P.IDLE_TIMEOUT, f"no {'message' if self.call else 'start'} from Twilio for {timeout:g} s"
                )
                return
            if msg.type == WSMsgType.TEXT:
                try:
                    if await self._on_text(msg.data):
                        return
                except _StreamEnds as exc:  # a stream that cannot start: nothing else on it can work
                    await self._error(exc.code, exc.message)
                    self.end_reason = exc.code
                    await self.ws.close(code=P.CLOSE_TRY_AGAIN_LATER if exc.code == P.AT_CAPACITY else P.CLOSE_POLICY)
                    return
                except P.ProtocolError as exc:
                    await self._error(exc.code, exc.message)
            elif msg.type == WSMsgType.BINARY:
                await self._error(P.BINARY_NOT_ALLOWED, "Twilio media streams carry JSON text frames only")
            elif msg.type == WSMsgType.ERROR:
                log.info("twilio ws error: %s", self.ws.exception())
                await self._error(
                    P.TOO_LARGE if "size" in str(self.ws.exception()) else P.BAD_MESSAGE,
                    f"Twilio socket error: {self.ws.exception()}",
                )
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    async def _on_text(self, raw: str) -> bool:
        """One Twilio message; True when the stream is over."""
        try:
            event = wire.decode(raw)
        except wire.DecodeError as exc:
            if exc.event == "start" and self.call is None:
                raise _StreamEnds(exc.code, exc.message) from None  # a stream that cannot start
            raise
        if isinstance(event, wire.Connected):
            return False
        if isinstance(event, wire.Start):
            if self.call is not None:
                raise P.ProtocolError(P.BAD_MESSAGE, "Twilio sent a second 'start' on one stream; ignored")
            try:
                await self._on_start(event)
            except P.ProtocolError as exc:
                raise _StreamEnds(exc.code, exc.message) from None
            return False
        if isinstance(event, wire.Stop):
            self.end_reason = "stop"
            return True
        if isinstance(event, wire.Unknown):
            raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown Twilio event {event.event!r}")
        if self.call is None:
            raise P.ProtocolError(P.NO_SESSION, f"Twilio sent {_name(event)!r} before 'start'")
        if isinstance(event, wire.Media):
            if event.pcm is not None:
                self.call.inbound.push(event.pcm, event.timestamp_ms)
        elif isinstance(event, wire.Dtmf):
            await self.call.notify({"type": "dtmf", "digit": event.digit})
        elif isinstance(event, wire.Mark):
            echoed = self.leg.on_mark_echo(event.name)
            if echoed is None:
                raise P.ProtocolError(P.BAD_MESSAGE, f"Twilio echoed mark {event.name!r}, which was never sent")
            mark, outcome = echoed
            if mark.mark_id is not None:
                self.call.session.playback_confirmed(
                    mark.mark_id
                )  # Twilio's echo: played; the core applies the clear rule
            if outcome is not None:
                await self.call.notify(outcome)
            else:
                await self.call.session.flush_events()
        return False

    async def _on_start(self, start: wire.Start) -> None:
        leg = TwilioLeg(self.ws, self.request.transport, start.stream_sid, self.core.metrics, self.request.protocol)
        ids = [self.request.match_info.get("call_id"), *start.call_ids]  # the path's id first: the call's name
        call = self.endpoint.registry.connect_media(ids, leg, "twilio", start.param("voice"), start.param("language"))
        self.leg, self.call = leg, call
        await call.session.flush_events()

    async def _error(self, code: str, message: str) -> None:
        if self.call is not None and not self.call.session.closed:
            await self.call.report(code, message)  # the session counts it
        else:
            self.core.metrics.errors.labels(code=code).inc()
        log.info("twilio stream %s: %s: %s", self.leg.stream_sid if self.leg else "(not started)", code, message)


class _StreamEnds(P.ProtocolError):
    """An error that ends the stream (its `start` was unusable)."""


def _name(event) -> str:
    return {wire.Media: "media", wire.Dtmf: "dtmf", wire.Mark: "mark"}.get(type(event), "?")


def start_ids(msg) -> list[str] | None:
    """The call ids in a Twilio stream's opening messages: None after `connected` (read on), [] when it is not Twilio's."""
    if msg.type != WSMsgType.TEXT:
        return []
    try:
        event = wire.decode(msg.data)
    except (wire.DecodeError, P.ProtocolError):
        return []
    if isinstance(event, wire.Connected):
        return None
    return event.call_ids if isinstance(event, wire.Start) else []


def install(core: CallCore, host: LegHost) -> TwilioEndpoint:
    endpoint = TwilioEndpoint(core)
    host.add_routes(endpoint.routes())
    return endpoint
