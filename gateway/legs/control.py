"""/v1/control: the agent's text leg for a telephony call (docs/protocol.md).

One `call.attach` per socket, then the native protocol's text-leg messages
(`text`, `user.text`, `interrupt`, `session.end`); events come back as on
/v1/ws, plus `call.media`, `dtmf` and `call.mark` (Twilio's confirmation
that a chunk's audio was played or dropped).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import WSCloseCode, WSMsgType, web

from gateway import protocol as P
from gateway.core import CallCore
from gateway.core.backpressure import allow_event_backlog, drop_if_stuck
from gateway.core.calls import Call, normalize_call_id
from gateway.cluster.forward import ReplayingSocket, forward_after_peek
from gateway.legs.accept import accept_ws, close_code
from gateway.legs.host import LegHost

log = logging.getLogger("voxgate.control")


class ControlLeg:
    """The session's text leg over one control WebSocket."""

    def __init__(self, ws: web.WebSocketResponse, request: web.BaseRequest | None = None):
        self.ws = ws
        self.transport = request.transport if request is not None else None
        self.protocol = request.protocol if request is not None else None
        allow_event_backlog(self.transport)

    async def send_event(self, event: dict) -> None:
        if self.ws.closed:
            return
        data = P.dump_event(event)
        # The shared clock flushes events too: an agent that stopped reading is dropped, never awaited
        # (the call goes on, and an agent may re-attach).
        if self.transport is not None and drop_if_stuck(
            self.transport, self.protocol, len(data.encode()), "control socket"
        ):
            return
        await self.ws.send_str(data)

    async def close(self) -> None:
        if not self.ws.closed:
            await self.ws.close(code=WSCloseCode.OK)


class ControlEndpoint:
    def __init__(self, core: CallCore):
        self.core = core
        self.registry = core.calls

    def routes(self) -> list[web.RouteDef]:
        """`/v1/control/{call_id}` lets a balancer hash on the call; `call.attach` must then name the same call."""
        return [web.get("/v1/control", self.handle), web.get("/v1/control/{call_id}", self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        gw = self.core
        path_id = request.match_info.get("call_id")
        ws, accepted = await accept_ws(
            gw, request, joins_calls=True, door="control", call_ids=[path_id] if path_id else None
        )
        if not accepted:
            return ws
        limits = gw.config.server.limits
        if (
            gw.cluster is not None and not path_id
        ):  # the call is named by call.attach: read it, then serve here or forward
            sock = await forward_after_peek(
                gw, request, ws, "control", attach_ids, limits.idle_timeout_s, native_errors=True
            )
            if sock is None:
                return ws
            ws = sock  # replays what was read; the handler still returns the real response below
        response = ws if not isinstance(ws, ReplayingSocket) else ws._ws
        await self._serve(request, ws)
        return response

    async def _serve(self, request: web.Request, ws) -> None:
        gw = self.core
        limits = gw.config.server.limits
        leg = ControlLeg(ws, request)
        call: Call | None = None
        self.registry.track(leg.close)
        try:
            while not ws.closed:
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=limits.idle_timeout_s)
                except asyncio.TimeoutError:
                    if call is None:
                        await self._error(
                            leg, None, P.ProtocolError(P.IDLE_TIMEOUT, f"no message for {limits.idle_timeout_s:g} s")
                        )
                        break
                    continue  # an attached agent may stay quiet while the caller talks
                if msg.type == WSMsgType.TEXT:
                    try:
                        call = await self._on_message(msg.data, leg, call, request.match_info.get("call_id"))
                    except P.ProtocolError as exc:
                        await self._error(leg, call, exc)
                        if exc.code == P.AT_CAPACITY:
                            await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
                    if call is not None and call.session.closed:
                        break
                elif msg.type == WSMsgType.BINARY:
                    await self._error(
                        leg,
                        call,
                        P.ProtocolError(P.BINARY_NOT_ALLOWED, "binary messages are not accepted on /v1/control"),
                    )
                elif msg.type == WSMsgType.ERROR:
                    log.info("control ws error: %s", ws.exception())
                    gw.metrics.errors.labels(code=P.TOO_LARGE if "size" in str(ws.exception()) else P.BAD_MESSAGE).inc()
                    break
                else:  # CLOSE, CLOSING, CLOSED
                    break
        except ConnectionError:  # the peer vanished while we wrote (a pong, a close): a hang-up, not a fault
            log.debug("connection lost", exc_info=True)
        except Exception:
            log.exception("control connection failed")
            if not ws.closed:
                try:
                    await ws.send_json(P.error_event(P.INTERNAL, "internal error; the control socket was closed"))
                except ConnectionError:
                    pass
        finally:
            if call is not None:
                await self.registry.detach_control(call, leg)
            if not ws.closed:
                await ws.close(code=close_code(gw))

    async def _on_message(
        self, raw: str, leg: ControlLeg, call: Call | None, path_id: str | None = None
    ) -> Call | None:
        m = P.parse_message(raw, self.core.config.server.limits.max_message_bytes)
        mtype = m["type"]
        if mtype == "call.attach":
            if call is not None:
                raise P.ProtocolError(
                    P.SESSION_EXISTS, f"this socket is attached to call {call.call_id!r}; one call per control socket"
                )
            if path_id is not None and normalize_call_id(m["call_id"]) != normalize_call_id(path_id):
                raise P.ProtocolError(
                    P.BAD_MESSAGE, f"call.attach names call {m['call_id']!r} but the path names {path_id!r}"
                )
            return await self.registry.attach_control(
                m["call_id"],
                leg,
                m.get("voice"),
                m.get("language"),
                m.get("instruct"),
                barge_in=m.get("barge_in"),
                mode=P.check_mode(m.get("mode")),
                word_timings=m.get("word_timings"),
            )
        if call is None:
            raise P.ProtocolError(P.NO_SESSION, "send call.attach first")
        if mtype == "session.start":
            raise P.ProtocolError(
                P.BAD_MESSAGE, "session.start is not used on /v1/control; the call's media leg sets the format"
            )
        if mtype == "call.transfer":
            transfer = getattr(call.media, "transfer", None)  # legs that can transfer a call (SIP: REFER)
            if transfer is None:
                raise P.ProtocolError(
                    P.BAD_MESSAGE,
                    f"call.transfer is not supported on a {call.media_kind or 'call without a'} media leg",
                )
            await transfer(m["to"], m.get("headers"))
        elif mtype == "user.text":
            await self.core.handle_user_text(call.session, m["text"])
        else:
            await call.session.handle(m)
        return call

    async def _error(self, leg: ControlLeg, call: Call | None, exc: P.ProtocolError) -> None:
        if call is not None and not call.session.closed:
            await call.report(exc.code, exc.message)  # counted by the session
            return
        self.core.metrics.errors.labels(code=exc.code).inc()
        await leg.send_event(exc.event())  # never waits on a client that stops reading


def attach_ids(msg) -> list[str]:
    """The call a control socket's first message attaches to ([] when it is not a call.attach: served here)."""
    if msg.type != WSMsgType.TEXT:
        return []
    try:
        m = P.loads_json(msg.data)
    except ValueError:
        return []
    ok = isinstance(m, dict) and m.get("type") == "call.attach" and isinstance(m.get("call_id"), str)
    return [m["call_id"]] if ok else []


def install(core: CallCore, host: LegHost) -> ControlEndpoint:
    endpoint = ControlEndpoint(core)
    host.add_routes(endpoint.routes())
    return endpoint
