"""What every client WebSocket leg does before its first message: auth, upgrade, the draining check."""

from __future__ import annotations

import hmac

from aiohttp import WSCloseCode, web

from gateway import protocol as P
from gateway.core import CallCore

UNAUTHORIZED_MESSAGE = "missing or wrong API key (Authorization: Bearer <key> or ?token=)"


def authorized(core: CallCore, request: web.Request) -> bool:
    """`Authorization: Bearer <key>` or `?token=<key>` when server.api_keys is set; anyone otherwise."""
    keys = core.config.server.api_keys
    if not keys:
        return True
    header = request.headers.get("Authorization", "")
    token = header[7:] if header.startswith("Bearer ") else request.query.get("token", "")
    return any(hmac.compare_digest(token.encode(), k.encode()) for k in keys)


def unauthorized_response() -> web.Response:
    return web.json_response(P.error_event(P.UNAUTHORIZED, UNAUTHORIZED_MESSAGE), status=401)


def websocket_response(core: CallCore) -> web.WebSocketResponse:
    """No compression (audio does not compress); pings keep NATs open; messages capped by limits."""
    limits = core.config.server.limits
    return web.WebSocketResponse(heartbeat=limits.ping_interval_s, max_msg_size=limits.max_message_bytes * 4, compress=False)


async def accept_ws(core: CallCore, request: web.Request) -> tuple[web.StreamResponse, bool]:
    """Auth, upgrade and the draining check shared by client sockets.
    Returns (response, accepted); a refused socket is already answered."""
    if not authorized(core, request):
        return unauthorized_response(), False
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
