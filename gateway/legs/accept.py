"""What every client WebSocket leg does before its first message: auth, upgrade, the draining check.

Auth is an API key (`server.api_keys`) as `Authorization: Bearer <key>`, or a session token from
`POST /v1/tokens` as `Authorization: Bearer <token>` or `?token=` (for browsers, which cannot set headers on
a WebSocket). A long-lived API key is never taken from the query string: URLs end up in access logs,
browser history and Referer headers; one sent there gets 401 naming the header. A door that opens a
session spends the token (`spend=True`); read-only routes only check it.
"""

from __future__ import annotations

import hmac
import logging

from aiohttp import WSCloseCode, web

from gateway import protocol as P
from gateway.cluster.forward import forward_by_path, is_hop
from gateway.cluster.plane import ClusterUnavailable
from gateway.core import CallCore
from gateway.security.tokens import TokenError

UNAUTHORIZED_MESSAGE = (
    "missing or wrong API key (Authorization: Bearer <key>, or ?token= with a token from POST /v1/tokens)"
)
KEY_IN_QUERY_MESSAGE = (
    "an API key is not accepted in ?token= (URLs end up in logs): send it as "
    "Authorization: Bearer <key>, or put a short-lived token from POST /v1/tokens in ?token="
)


def presented_credential(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.startswith("Bearer ") else request.query.get("token", "")


def from_query(request: web.Request) -> bool:
    """Whether presented_credential came from `?token=` (no bearer header)."""
    return not request.headers.get("Authorization", "").startswith("Bearer ") and "token" in request.query


def is_api_key(core: CallCore, credential: str) -> bool:
    return any(hmac.compare_digest(credential.encode(), k.encode()) for k in core.config.server.api_keys)


def auth_problem(core: CallCore, request: web.Request, spend: bool = False) -> str | None:
    """None when the request may pass (no keys configured, an API key, or a good session token, or a leg
    another node of the plane forwards, having checked it), else why not."""
    if not core.config.server.api_keys or is_hop(request):
        return None
    return credential_problem(core, presented_credential(request), spend, tokens_only=from_query(request))


def credential_problem(core: CallCore, credential: str, spend: bool = False, tokens_only: bool = False) -> str | None:
    """None for an API key (unless `tokens_only`: it came in a URL) or a good session token (spent when `spend`),
    else why it is refused."""
    if is_api_key(core, credential):
        if tokens_only:
            core.metrics.connections_refused.labels(reason="key_in_query").inc()
            return KEY_IN_QUERY_MESSAGE
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


async def admit(core: CallCore, request: web.Request, credential: str | None = None) -> str | None:
    """`auth_problem(spend=True)` for a door that opens a session; in a cluster a token is also spent plane-wide
    (an atomic GETDEL in Redis: a second use is refused on every node). Raises ClusterUnavailable when Redis
    cannot say. `credential`: one presented another way (HTTP Basic's password)."""
    if not core.config.server.api_keys or is_hop(request):
        return None
    tokens_only = credential is None and from_query(request)
    credential = presented_credential(request) if credential is None else credential
    problem = credential_problem(core, credential, spend=True, tokens_only=tokens_only)
    if problem is None and core.cluster is not None and core.tokens.looks_like_token(credential):
        if not await core.cluster.token_spend(core.tokens.token_id(credential)):
            core.metrics.connections_refused.labels(reason="token").inc()
            return "the token was already used; a token opens one session"
    return problem


def unavailable_response(exc: ClusterUnavailable) -> web.Response:
    return web.json_response(
        P.error_event(P.CLUSTER_UNAVAILABLE, f"the call plane is unavailable ({exc}); try again shortly"),
        status=503,
        headers={"Retry-After": "1"},
    )


def unauthorized_response(message: str = UNAUTHORIZED_MESSAGE) -> web.Response:
    return web.json_response(P.error_event(P.UNAUTHORIZED, message), status=401)


def websocket_response(core: CallCore) -> web.WebSocketResponse:
    """No compression (audio does not compress); pings keep NATs open; messages capped by limits."""
    limits = core.config.server.limits
    return web.WebSocketResponse(
        heartbeat=limits.ping_interval_s, max_msg_size=limits.max_message_bytes * 4, compress=False
    )


async def accept_ws(
    core: CallCore,
    request: web.Request,
    joins_calls: bool = False,
    door: str | None = None,
    call_ids: list[str] | None = None,
) -> tuple[web.StreamResponse, bool]:
    """Auth, upgrade and the draining check shared by client sockets (`joins_calls`: a draining node of a
    cluster still takes it, for the legs of its own calls; the call registry refuses new calls).
    In a cluster, a leg whose `call_ids` (from its path) belong to another node is forwarded there.
    Returns (response, accepted); a refused or forwarded socket is already answered."""
    try:
        problem = await admit(core, request)
    except ClusterUnavailable as exc:
        core.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
        return unavailable_response(exc), False
    if problem is not None:
        return unauthorized_response(problem), False
    if door is not None and call_ids:
        limits = core.config.server.limits
        forwarded = await forward_by_path(core, request, door, call_ids, {"heartbeat": limits.ping_interval_s})
        if forwarded is not None:
            return forwarded, False
    ws = websocket_response(core)
    await ws.prepare(request)
    if not core.accepting or (core.draining and not joins_calls):
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
