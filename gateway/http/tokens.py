"""POST /v1/tokens: a short-lived token that opens one session, so a browser page never holds an API key.

Your backend calls it with an API key and hands the token to the page; the page uses it where an API key
goes (`Authorization: Bearer <token>` or `?token=`, which takes tokens only, never an API key). Body (optional JSON): `{"ttl_s": N}`, at most
`server.token_ttl_s`. Answer: `{"token", "expires_at" (unix seconds), "expires_in"}`.
"""

from __future__ import annotations

import math
import time

from aiohttp import web

from gateway import protocol as P
from gateway.core import CallCore
from gateway.cluster.plane import ClusterUnavailable
from gateway.legs.accept import from_query, is_api_key, presented_credential, unavailable_response

MAX_BODY_BYTES = 1024


def routes(core: CallCore) -> list[web.RouteDef]:
    async def mint(request: web.Request) -> web.Response:
        keys = core.config.server.api_keys
        # a token cannot mint tokens, and a key is taken from the Authorization header only (URLs end up in logs)
        if keys and (from_query(request) or not is_api_key(core, presented_credential(request))):
            core.metrics.errors.labels(code=P.UNAUTHORIZED).inc()
            return web.json_response(
                P.error_event(P.UNAUTHORIZED, "POST /v1/tokens takes an API key (Authorization: Bearer <key>)"),
                status=401,
            )
        ttl = None
        if request.can_read_body:
            raw = await request.content.read(MAX_BODY_BYTES + 1)
            if len(raw) > MAX_BODY_BYTES:
                return web.json_response(
                    P.error_event(P.TOO_LARGE, f"the body may be at most {MAX_BODY_BYTES} bytes"), status=413
                )
            if raw.strip():
                try:
                    body = P.loads_json(raw)
                except ValueError:
                    return web.json_response(
                        P.error_event(P.BAD_JSON, 'the body must be JSON: {"ttl_s": N} or empty'), status=400
                    )
                ttl = body.get("ttl_s") if isinstance(body, dict) else "bad"
                if ttl is not None and (
                    isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0
                ):
                    return web.json_response(
                        P.error_event(P.BAD_MESSAGE, "ttl_s must be a positive number of seconds"), status=400
                    )
        token, expires = core.tokens.mint(ttl)
        if core.cluster is not None:  # single use across the plane: the spending door takes it with GETDEL
            try:
                await core.cluster.token_minted(core.tokens.token_id(token), expires)
            except ClusterUnavailable as exc:
                core.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
                return unavailable_response(exc)
        return web.json_response(
            {"token": token, "expires_at": expires, "expires_in": round(expires - time.time(), 3)},
            headers={"Cache-Control": "no-store"},
        )

    return [web.post("/v1/tokens", mint)]
