"""The front door of the HTTP port, before any route: the Origin allowlist and the per-IP caps.

One aiohttp middleware, so every route and WebSocket upgrade passes it (a leg added later cannot forget it).
A WebSocket connection counts against its address for as long as it stays open; a plain request while it
is served. Refusals: 403 `forbidden_origin`; 429 `rate_limited` for plain requests; a WebSocket upgrade is
accepted and closed at once with 1013 and the `rate_limited` event (a browser cannot read an upgrade's
HTTP status; it can read a close code). Each is counted in `voxgate_connections_refused_total{reason}`.

A page on a listed origin other than the gateway's own calls it cross-origin, so its `fetch` needs CORS:
preflights (`OPTIONS` with `Access-Control-Request-Method`) from listed origins are answered here, and every
response to a listed origin names it in `Access-Control-Allow-Origin`. With an empty list no CORS header is
ever sent (any origin may open a WebSocket, as before, but no other site's script may read an HTTP answer).
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from aiohttp import web

from gateway import protocol as P
from gateway.core import CallCore
from gateway.cluster.forward import HOP_HEADER, HOP_KEY, accept_hop, claimed_node
from gateway.cluster.hop import HopRefused
from gateway.cluster.plane import ClusterUnavailable
from gateway.security.peers import CAP, RATE, client_address

log = logging.getLogger("voxgate.cluster")


def origin_allowed(allowed: list[str], origin: str, host: str | None) -> bool:
    """Empty list: any. Else the origin is listed, or it is the gateway's own page (same host as the request)."""
    if not allowed:
        return True
    origin = origin.strip().lower().rstrip("/")
    if origin in (o.lower().rstrip("/") for o in allowed):
        return True
    netloc = urlsplit(origin).netloc if "://" in origin else ""
    return bool(netloc and host and netloc == host.lower())


def listed_origin(allowed: list[str], origin: str | None) -> bool:
    return bool(origin and allowed) and origin.strip().lower().rstrip("/") in (o.lower().rstrip("/") for o in allowed)


CORS_PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Max-Age": "600",
}


def cors_headers(core: CallCore):
    """`on_response_prepare` hook: runs before any response's headers leave, streamed bodies included."""
    allowed = core.config.server.allowed_origins

    async def add(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if listed_origin(allowed, origin):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers.add("Vary", "Origin")

    return add


def guard_middleware(core: CallCore):
    config = core.config

    plane = core.cluster
    limits = config.server.limits

    @web.middleware
    async def guard(request: web.Request, handler):
        if (
            HOP_HEADER in request.headers
        ):  # another node of the plane forwards a leg it checked already (docs/cluster.md)
            refused = await _accept_hop(core, request)
            if refused is not None:
                return refused
            return await handler(request)
        origin = request.headers.get("Origin")
        if origin is not None and not origin_allowed(config.server.allowed_origins, origin, request.host):
            core.metrics.connections_refused.labels(reason="origin").inc()
            core.metrics.errors.labels(code=P.FORBIDDEN_ORIGIN).inc()
            return web.json_response(
                P.error_event(P.FORBIDDEN_ORIGIN, "this page's origin is not in server.allowed_origins"), status=403
            )
        if (
            request.method == "OPTIONS"
            and "Access-Control-Request-Method" in request.headers
            and listed_origin(config.server.allowed_origins, origin)
        ):
            return web.Response(status=204, headers=CORS_PREFLIGHT_HEADERS)
        address = client_address(request.remote, request.headers.get("X-Forwarded-For"), core.trusted_proxies)
        refused = core.peers.open(address)
        if refused is not None:
            return await _refuse(core, request, refused)
        shared = False  # counted plane-wide too
        if plane is not None and core.peers.enabled and address is not None:
            try:
                refused = await plane.peer_open(address, limits.max_connections_per_ip, limits.connections_per_ip_per_s)
                shared = refused is None
            except ClusterUnavailable:
                refused = None  # without Redis each node holds its own caps
            if refused is not None:
                core.peers.close(address)
                return await _refuse(core, request, {"cap": CAP, "rate": RATE}[refused])
        try:
            return await handler(request)
        finally:
            core.peers.close(address)
            if shared:
                plane.peer_close(address)

    return guard


async def _accept_hop(core: CallCore, request: web.Request) -> web.Response | None:
    """None when the request's hop is genuine, fresh, for this very request and unused (then it is marked as a hop);
    else the refusal. A hop header is never ignored: a request carrying one that fails is refused, not served as
    if it had none (a balancer in front must drop the header from outside callers)."""
    value = request.headers[HOP_HEADER]
    plane = core.cluster
    try:
        if plane is None:
            raise HopRefused("this node is not in a cluster (no cluster.redis_url)")
        request[HOP_KEY] = await accept_hop(plane, value, request.method, request.raw_path)
        return None
    except (HopRefused, ClusterUnavailable) as exc:
        # the value itself is never logged: a hop is a credential, however short-lived
        log.warning(
            "cluster: refused a hop from %s claiming node %s for %s %s: %s",
            request.remote,
            claimed_node(value),
            request.method,
            request.path,
            exc,
        )
        core.metrics.connections_refused.labels(reason="hop").inc()
        if isinstance(exc, ClusterUnavailable):
            core.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
            return web.json_response(
                P.error_event(P.CLUSTER_UNAVAILABLE, "the call plane cannot check this hop now"),
                status=503,
                headers={"Retry-After": "1"},
            )
        core.metrics.errors.labels(code=P.UNAUTHORIZED).inc()
        return web.json_response(P.error_event(P.UNAUTHORIZED, f"{HOP_HEADER} refused: {exc}"), status=403)


async def _refuse(core: CallCore, request: web.Request, reason: str) -> web.StreamResponse:
    limits = core.config.server.limits
    message = (
        f"too many connections from your address (server.limits.max_connections_per_ip = {limits.max_connections_per_ip})"
        if reason == CAP
        else f"connections opened too fast from your address (server.limits.connections_per_ip_per_s = {limits.connections_per_ip_per_s:g})"
    )
    core.metrics.connections_refused.labels(reason=reason).inc()
    core.metrics.errors.labels(code=P.RATE_LIMITED).inc()
    event = P.error_event(P.RATE_LIMITED, message)
    if request.headers.get("Upgrade", "").lower() == "websocket":
        ws = web.WebSocketResponse()
        if ws.can_prepare(request).ok:
            await ws.prepare(request)
            await ws.send_json(event)
            await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
            return ws
    return web.json_response(event, status=429, headers={"Retry-After": "1"})
