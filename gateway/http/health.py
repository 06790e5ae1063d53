"""GET /healthz (alive), /readyz (ready for calls: 503 while draining, full, or the call plane's Redis is
unreachable, with the reason), /metrics (Prometheus)."""

from __future__ import annotations

from aiohttp import web

from gateway.core import CallCore
from gateway.core.registry import engine_health as registry_engine_health


def routes(core: CallCore) -> list[web.RouteDef]:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        engine_health = registry_engine_health(core.engine)
        plane = core.cluster
        cluster_problem = None if plane is None else ("draining" if core.draining else plane.problem)
        ready = (
            core.accepting
            and not core.draining
            and not core.registry.full()
            and engine_health is None
            and cluster_problem is None
        )
        body = {"ready": ready, "sessions": len(core.sessions), "engine": core.engine_kind}
        if engine_health:
            body["engine_health"] = engine_health
        endpoint_stats = getattr(core.engine, "endpoint_stats", None)
        if endpoint_stats is not None:  # openai-speech: which speech servers are up, and why the others are not
            body["endpoints"] = [
                {k: e[k] for k in ("endpoint", "up", "suspect", "why_down", "in_flight", "ttfb_p50_ms")}
                for e in endpoint_stats()
            ]
        if plane is not None:  # which node, and why the plane cannot take calls here (Redis down, draining)
            body["cluster"] = {"node_id": plane.node_id, "calls": len(core.calls), "problem": cluster_problem}
        if not ready:
            body["reason"] = (
                (engine_health and "engine: " + str(engine_health))
                or cluster_problem
                or ("full" if core.registry.full() else "not accepting calls (starting or draining)")
            )
        return web.json_response(body, status=200 if ready else 503)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=core.metrics.render(), content_type="text/plain", charset="utf-8")

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)]
