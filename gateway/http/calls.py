"""POST /v1/calls: place an outbound SIP call through one of `sip.trunks` (docs/sip.md#outbound-calls).

Body: `{"to": "sip:+15551234567@trunk.example" or "+15551234567", "trunk": NAME, "from"?: SIP URI,
"headers"?: {"X-…": "…"}, "ring_timeout_s"?: 30}`. Answer (at once, 201): `{"call_id"}`; the agent attaches on
`/v1/control/{call_id}` and sees `call.progress`, then `call.answered` or `call.failed`. Bad input: 400 with a
stable code; no API key: 401; at capacity or draining: 503. In a call plane the call id is claimed for this node
before the INVITE goes out (the node that dials owns the call: an agent attaching on another node is forwarded
here); Redis unreachable: 503 `cluster_unavailable`.
"""

from __future__ import annotations

import math

from aiohttp import web

from gateway import protocol as P
from gateway.cluster.forward import unavailable_event
from gateway.cluster.plane import ClusterUnavailable
from gateway.config import sip_uri_ok
from gateway.legs.accept import from_query, is_api_key, presented_credential
from gateway.sip.dialing import new_call_id
from gateway.sip.outgoing_dialog import request_uri
from gateway.sip.x_headers import RULE as X_RULE
from gateway.sip.x_headers import x_headers_ok

MAX_BODY_BYTES = 8192
MAX_RING_TIMEOUT_S = 300


def _bad(message: str, code: str = P.BAD_MESSAGE, status: int = 400) -> web.Response:
    return web.json_response(P.error_event(code, message), status=status)


def routes(core, server) -> list[web.RouteDef]:
    trunks = {t.name: t for t in core.config.sip.trunks}

    async def place(request: web.Request) -> web.Response:
        keys = core.config.server.api_keys
        if keys and (from_query(request) or not is_api_key(core, presented_credential(request))):
            core.metrics.errors.labels(code=P.UNAUTHORIZED).inc()
            return _bad("POST /v1/calls takes an API key (Authorization: Bearer <key>)", P.UNAUTHORIZED, 401)
        raw = await request.content.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            return _bad(f"the body may be at most {MAX_BODY_BYTES} bytes", P.TOO_LARGE, 413)
        try:
            body = P.loads_json(raw)
        except ValueError:
            return _bad('the body must be JSON: {"to": …, "trunk": …}', P.BAD_JSON)
        if not isinstance(body, dict):
            return _bad('the body must be a JSON object: {"to": …, "trunk": …}')
        unknown = sorted(set(body) - {"to", "trunk", "from", "headers", "ring_timeout_s"})
        if unknown:
            return _bad(f"unknown field {unknown[0]!r} (known: to, trunk, from, headers, ring_timeout_s)")
        trunk = trunks.get(body.get("trunk")) if isinstance(body.get("trunk"), str) else None
        if trunk is None:
            return _bad(f"trunk must name one of sip.trunks ({', '.join(trunks) or 'none configured'})")
        to = body.get("to")
        uri = request_uri(to, trunk.address) if isinstance(to, str) else None
        if uri is None:
            return _bad("to must be a SIP URI (sip:user@host) or an E.164 number (+15551234567)")
        from_uri = body.get("from", trunk.from_)
        if not isinstance(from_uri, str) or not sip_uri_ok(from_uri):
            return _bad("from must be a SIP URI with a user (sip:+15550100@trunk.example)")
        headers = body.get("headers") or {}
        if not x_headers_ok(headers):
            return _bad(X_RULE)
        ring = body.get("ring_timeout_s", 30)
        if isinstance(ring, bool) or not isinstance(ring, (int, float)) or not math.isfinite(ring):
            ring = -1
        if not 1 <= ring <= MAX_RING_TIMEOUT_S:
            return _bad(f"ring_timeout_s must be a number of seconds, 1..{MAX_RING_TIMEOUT_S}")
        if core.draining:
            return _bad("this gateway is draining: it starts no new calls", P.SHUTTING_DOWN, 503)
        if core.registry.full(server.dialing.ringing()):  # calls still ringing hold a place: they may all answer
            core.metrics.errors.labels(code=P.AT_CAPACITY).inc()
            return _bad(core.registry.capacity_error().message, P.AT_CAPACITY, 503)
        call_id = new_call_id()
        if core.cluster is not None:
            refused = await _claim(core, call_id)
            if refused is not None:
                return refused
        server.dialing.start(call_id, trunk, uri, from_uri, headers, float(ring))
        return web.json_response({"call_id": call_id}, status=201)

    return [web.post("/v1/calls", place)]


async def _claim(core, call_id: str) -> web.Response | None:
    """The call plane: the new call's id is this node's (None), else the refusal. The heartbeat keeps the claim
    while the call rings and while its outcome is kept for a late attach (gateway/core/call_core.py)."""
    try:
        owner = await core.cluster.claim([call_id])
    except ClusterUnavailable as exc:
        core.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
        return web.json_response(unavailable_event(exc), status=503, headers={"Retry-After": "1"})
    if owner is not None:  # 96 random bits another node already holds: never seen, but never two owners either
        return _bad(f"call id {call_id} is owned by node {owner.node_id}; try again", P.CALL_BUSY, 409)
    return None
