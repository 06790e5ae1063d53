"""What every client WebSocket leg does before its first message: auth, upgrade, the draining check.

Auth is an API key (`server.api_keys`) or a session token from `POST /v1/tokens`, as
`Authorization: Bearer <key or token>` or `?token=`. A door that opens a session spends the token
(`spend=True`); read-only routes only check it.
"""

from __future__ import annotations

import hmac
import logging

from aiohttp import WSCloseCode, web

from gateway import protocol as P
from gateway.core import CallCore
from gateway.security.tokens import TokenError

UNAUTHORIZED_MESSAGE = "missing or wrong API key (Authorization: Bearer <key> or ?token=)"


def presented_credential(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.startswith("Bearer ") else request.query.get("token", "")


def is_api_key(core: CallCore, credential: str) -> bool:
    return any(hmac.compare_digest(credential.encode(), k.encode()) for k in core.config.server.api_keys)


def auth_problem(core: CallCore, request: web.Request, spend: bool = False) -> str | None:
    """None when the request may pass (no keys configured, an API key, or a good session token), else why not."""
    if not core.config.server.api_keys:
        return None
    return credential_problem(core, presented_credential(request), spend)


def credential_problem(core: CallCore, credential: str, spend: bool = False) -> str | None:
    """None for an API key or a good session token (spent when `spend`), else why it is refused."""
    if is_api_key(core, credential):
        return None
    if core.tokens.looks_like_token(credential):
        try:
            core.tokens.check(credential, spend)
        except TokenError as exc:
            core.metrics.connections_refused.labels(reason="token").inc()
            return str(exc)
        return None
    return UNAUTHORIZED_MESSAGE


def authorized(core: CallCore, request: web.Request, spend: bool = False) -> bool:
    return auth_problem(core, request, spend) is None


def unauthorized_response(message: str = UNAUTHORIZED_MESSAGE) -> web.Response:
    return web.json_response(P.error_event(P.UNAUTHORIZED, message), status=401)


def websocket_response(core: CallCore) -> web.WebSocketResponse:
    """No compression (audio does not compress); pings keep NATs open; messages capped by limits."""
    limits = core.config.server.limits
    return web.WebSocketResponse(heartbeat=limits.ping_interval_s, max_msg_size=limits.max_message_bytes * 4, compress=False)


async def accept_ws(core: CallCore, request: web.Request) -> tuple[web.StreamResponse, bool]:
    """Auth, upgrade and the draining check shared by client sockets.
    Returns (response, accepted); a refused socket is already answered."""
    problem = auth_problem(core, request, spend=True)
    if problem is not None:
        return unauthorized_response(problem), False
    ws = websocket_response(core)
    await ws.prepare(request)
    if not core.accepting:
        await ws.send_json(P.error_event(P.SHUTTING_DOWN, "the gateway is not accepting calls"))
        await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
        return ws, False
    return ws, True


def close_code(core: CallCore) -> int:
    """How a client socket is closed when its session ends: 1001 while the gateway shuts down, else 1000."""
    return WSCloseCode.GOING_AWAY if not core.accepting else WSCloseCode.OK


async def run_media_stream(core: CallCore, stream, ws: web.WebSocketResponse, kind: str, log: logging.Logger) -> None:
    """Run a telephony far end's reading loop (`stream.run()`) and always end its call and socket.

    `stream` has `run()`, `call` (the Call once started, else None) and `end_reason`.
    """
    try:
        await stream.run()
    except ConnectionError:  # the far end vanished while we wrote (a pong, a close): a hang-up, not a fault
        log.debug("connection lost", exc_info=True)
    except Exception:
        log.exception("%s stream failed", kind)
        core.metrics.errors.labels(code=P.INTERNAL).inc()
        if stream.call is not None:
            await stream.call.report(P.INTERNAL, f"internal error in the {kind} media leg; the call was ended")
    finally:
        if stream.call is not None:
            await core.calls.end_media(stream.call, stream.end_reason)
        if not ws.closed:
            await ws.close(code=WSCloseCode.OK)
