"""`voxgate engine`: one engine (qwen3, simulated or espeak) served to gateways over a socket.

It reads the same `engine:`, `simulated:` and `voices:` sections as `voxgate
serve` (cloned voices in `voices:` are registered before the first gateway
connects), serves `--listen tcp://HOST:PORT | ipc://PATH` (tts.service), and
answers `/healthz`, `/readyz` and `/metrics` on `--http-port`. SIGTERM drains:
no new requests, the running ones finish (up to server.limits.drain_timeout_s),
then it exits.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gateway.command_args import engine_overrides, say, setup_logging
from gateway.config import Config, ConfigError, load_config
from gateway.runtime_stats import RuntimeCollector
from gateway.stop_signals import stop_on_signals
from tts import EngineError, VoiceClone, build_engine

log = logging.getLogger("voxgate.engine")

STEP_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.5, 1.0)


def _engine_choice(config: Config):
    from gateway.app import engine_choice  # the one mapping from config sections to engine settings

    return engine_choice(config)


class EngineMetrics:
    """The engine process's /metrics: step time, batch, queue, memory, vocoder, requests by outcome."""

    def __init__(self, server):
        self.server = server
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.registry.register(RuntimeCollector())
        # every step's duration where the engine keeps them (qwen3: `recent_step_s`), read at each scrape
        self.step_seconds = Histogram(
            "voxgate_engine_step_seconds",
            "Duration of each engine step (one batched frame)",
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self._steps_seen = 0

    def _observe_steps(self) -> None:
        recent = getattr(self.server.engine, "recent_step_s", None)
        if recent is None:
            return
        total = int(self.server.engine.stats().get("steps", 0) or 0)
        fresh = min(total - self._steps_seen, len(recent))
        for seconds in list(recent)[len(recent) - fresh :] if fresh > 0 else ():
            self.step_seconds.observe(seconds)
        self._steps_seen = total

    def describe(self):
        return []

    def collect(self):
        srv, engine = self.server, self.server.engine
        stats = engine.stats()
        info = GaugeMetricFamily(
            "voxgate_engine_info", "The engine this process serves", labels=["kind", "vocoder", "engine_id"]
        )
        info.add_metric([engine.name, str(getattr(engine, "vocoder_name", None) or "none"), srv.engine_id], 1.0)
        yield info
        gauges = {
            "voxgate_engine_active_requests": ("Requests the engine is running", stats.get("active", 0)),
            "voxgate_engine_batch_size": (
                "Streams in the engine's batch now (its active requests)",
                stats.get("active", 0),
            ),
            "voxgate_engine_queue_depth": ("Requests waiting for a slot", stats.get("queued", 0)),
            "voxgate_engine_slots": ("Requests it runs at once (max_batch; 0: no fixed limit)", srv.slots),
            "voxgate_engine_gateways": ("Gateways connected", srv.gateways),
            "voxgate_engine_streams": ("Streams open for gateways", srv.open_streams),
            "voxgate_engine_ready": ("1 while it takes requests (healthy, not draining)", float(srv.ready() is None)),
        }
        for name, (text, value) in gauges.items():
            yield GaugeMetricFamily(name, text, value=float(value))
        timings = getattr(engine, "timings", None) or {}
        steps = CounterMetricFamily("voxgate_engine_steps", "Engine steps (rate: steps per second)")
        steps.add_metric([], float(stats.get("steps", 0) or 0))
        yield steps
        step_s = CounterMetricFamily(
            "voxgate_engine_stage_seconds",
            "Time in each stage of the step loop (rate(step)/rate(steps): the mean step time)",
            labels=["stage"],
        )
        for stage, seconds in sorted(timings.items()):
            step_s.add_metric([stage], float(seconds))
        yield step_s
        memory = GaugeMetricFamily("voxgate_engine_memory_bytes", "Engine memory at load, by part", labels=["part"])
        for part, value in sorted((getattr(engine, "memory", None) or {}).items()):
            if isinstance(value, (int, float)):
                memory.add_metric([part], float(value))
        yield memory
        outcomes = CounterMetricFamily(
            "voxgate_engine_requests", "Requests from gateways by outcome", labels=["outcome"]
        )
        for outcome in ("completed", "failed", "cancelled", "refused", "expired"):
            outcomes.add_metric([outcome], float(srv.counters[outcome]))
        yield outcomes
        wire = CounterMetricFamily("voxgate_engine_wire_messages", "Wire messages", labels=["direction"])
        wire.add_metric(["in"], float(srv.counters["messages_in"]))
        wire.add_metric(["out"], float(srv.counters["messages_out"]))
        yield wire
        pcm = CounterMetricFamily("voxgate_engine_pcm_bytes", "PCM bytes sent to gateways")
        pcm.add_metric([], float(srv.counters["pcm_bytes_out"]))
        yield pcm
        dropped = CounterMetricFamily(
            "voxgate_engine_gateways_dropped",
            "Gateways the engine dropped (their streams "
            "freed), by why: silent past a heartbeat, connection gone, not reading",
            labels=["reason"],
        )
        for key in sorted(k for k in srv.counters if k.startswith("dropped_")):
            dropped.add_metric([key[len("dropped_") :]], float(srv.counters[key]))
        yield dropped
        family = GaugeMetricFamily("voxgate_engine_stat", "Engine counters as the engine reports them", labels=["name"])
        for name, value in sorted(stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                family.add_metric([name], float(value))
        yield family

    def render(self) -> bytes:
        self._observe_steps()
        return generate_latest(self.registry)


def metric_names() -> set[str]:
    """The metric families `voxgate engine` exports (deploy tests check dashboards against them)."""
    from tts import EngineChoice

    class _Idle:  # an EngineServer's face, without a socket
        engine, engine_id, gateways, open_streams, slots, draining = (
            build_engine(EngineChoice("simulated")),
            "-",
            0,
            0,
            0,
            False,
        )
        counters = {
            k: 0
            for k in (
                "completed",
                "failed",
                "cancelled",
                "refused",
                "expired",
                "messages_in",
                "messages_out",
                "pcm_bytes_out",
            )
        }

        def ready(self):
            return None

    return {m.name for m in EngineMetrics(_Idle()).registry.collect()}


def http_routes(server, metrics: EngineMetrics) -> list[web.RouteDef]:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "engine": server.engine.name, "engine_id": server.engine_id})

    async def readyz(request: web.Request) -> web.Response:
        why = server.ready()
        body = {
            "ready": why is None,
            "engine": server.engine.name,
            "gateways": server.gateways,
            "streams": server.open_streams,
        }
        if why:
            body["reason"] = why
        return web.json_response(body, status=200 if why is None else 503)

    async def metrics_route(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_route)]


def default_http_host(listen: str) -> str:
    """The HTTP port listens where the engine socket does (tcp), on loopback for ipc://."""
    if listen.startswith("tcp://"):
        host = listen[len("tcp://") :].rpartition(":")[0].strip("[]")
        return "0.0.0.0" if host in ("*", "") else host
    return "127.0.0.1"


async def register_config_voices(engine, config: Config) -> None:
    for name, voice in config.voices.items():
        if voice.ref_audio:
            with open(voice.ref_audio, "rb") as f:
                data = f.read()
            try:
                await engine.add_voice(VoiceClone(name, data, voice.ref_text, voice.x_vector_only))
            except EngineError as exc:
                raise ValueError(f"{config.source}: voices.{name}: {exc.message}") from exc


def advertised_endpoint(listen: str, advertise: str | None) -> str:
    """Where gateways reach this engine: --advertise, else the --listen endpoint when it names a host."""
    if advertise:
        return advertise
    host = listen[len("tcp://") :].rpartition(":")[0].strip("[]") if listen.startswith("tcp://") else "ipc"
    if host in ("*", "", "0.0.0.0", "::"):
        raise ValueError(
            f"--listen {listen} names no address gateways can reach; pass --advertise tcp://HOST:PORT to register in cluster.redis_url"
        )
    return listen


async def run_engine(
    config: Config,
    listen: str,
    http_port: int | None,
    http_host: str | None = None,
    heartbeat_s: float = 2.0,
    ready=None,
    advertise: str | None = None,
) -> None:
    from tts.service import EngineServer, favour_the_loop, secret_from_env  # the service's face (service extra)

    favour_the_loop()
    engine = build_engine(_engine_choice(config))
    secret = secret_from_env([listen])
    server = EngineServer(engine, listen, secret=secret, heartbeat_s=heartbeat_s)  # its checks before the engine runs
    await engine.start()
    runner = None
    registration = None
    try:
        await register_config_voices(engine, config)
        await server.start()
        if config.cluster.enabled:  # gateways with engine.kind remote and no endpoints find this engine in Redis
            from gateway.cluster.engines import EngineRegistration

            def load() -> dict:
                stats = engine.stats()
                return {
                    "engine": engine.name,
                    "active": stats.get("active", 0),
                    "queued": stats.get("queued", 0),
                    "draining": int(server.draining),
                }

            registration = EngineRegistration(
                config, server.engine_id, advertised_endpoint(server.endpoint, advertise), load
            )
            await registration.start()
        if http_port is not None:
            app = web.Application()
            app.add_routes(http_routes(server, EngineMetrics(server)))
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            site = web.TCPSite(runner, http_host or default_http_host(listen), http_port)
            await site.start()
            http_port = site._server.sockets[0].getsockname()[1]
        say(
            f"voxgate engine: {engine.name} serving on {server.endpoint}"
            + (
                f"  (health and metrics on http://{http_host or default_http_host(listen)}:{http_port})"
                if runner
                else ""
            )
        )
        gc.collect()
        gc.freeze()
        stop = stop_on_signals()
        if ready:
            ready(server, http_port)
        await stop.wait()
        timeout = config.server.limits.drain_timeout_s
        log.info("draining: %d streams may finish for up to %.0f s", server.open_streams, timeout)
        await server.drain(timeout)
    finally:
        if registration is not None:
            await registration.close()
        await server.close()
        if runner is not None:
            await runner.cleanup()
        await engine.close()


def engine_main(args) -> int:
    setup_logging(args.log_level)
    overrides: dict = {"engine": engine_overrides(args)}
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        say(f"voxgate engine: {exc}")
        return 2
    if config.engine.kind == "remote":
        say(
            f"voxgate engine: {config.source}: engine.kind: remote names other engines; `voxgate engine` serves "
            "a local one (qwen3, simulated, espeak or auto)"
        )
        return 2
    if args.http_port is not None and not 0 <= args.http_port <= 65535:
        say(f"voxgate engine: --http-port must be 0..65535 (got {args.http_port})")
        return 2
    try:
        from tts.service import check_endpoint

        check_endpoint(args.listen)
        asyncio.run(
            run_engine(
                config,
                args.listen,
                args.http_port,
                args.http_host,
                args.heartbeat_s,
                advertise=getattr(args, "advertise", None),
            )
        )
    except ImportError as exc:
        say(f"voxgate engine: needs the service extra (pip install 'voxgate[service]'): {exc}")
        return 1
    except (ValueError, OSError, EngineError) as exc:
        say(f"voxgate engine: cannot start: {exc}")
        return 1
    return 0
