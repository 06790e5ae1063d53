"""The assembly: builds the engine, the call core, the legs and the HTTP routes, and runs the server.

This is the one module that knows every part. Arrows point down from here:

    app ──► legs/ (one adapter per way a call arrives) ──► wire/ (pure encode/decode)
     │        └──────────────┐
     ├──► http/ (health, metrics, voices)
     ├──► agent/ (built-in LLM agent)
     └──► core/ (sessions, turns, playback, registries, clock) ──► tts (public face) ──► audio

aiohttp, not `websockets`, serves: the HTTP routes need POST on the same
port (WebRTC signalling), which `websockets`' server cannot take; aiohttp
serves plain HTTP routes and WebSocket upgrades side by side. `websockets`
stays the client for tests and the load tester.

Adding a provider (e.g. Telnyx): write `gateway/wire/telnyx.py` (its
messages, encoded and decoded, no sockets), write `gateway/legs/telnyx.py`
with `install(core, host)` (its route or server, adapting the wire to the
core: `core.calls.connect_media(...)`, `call.inbound.push(...)`,
`session.attach_media(leg)`), and add its module to `LEGS` below. That is
the whole registration. A leg tells the core what its far end can do with
attributes (`gateway/core/contracts.py`): `congested()` (the next frame will
be skipped: a `network` gap), `absorbs_bursts = False` (no far-end buffer:
the clock never bursts to it), `confirms_playback = True` (its far end
confirms marks: report each with `session.playback_confirmed(mark_id)`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable

from aiohttp import web

from gateway import protocol as P
from gateway.agent import agent
from gateway.cluster.plane import ClusterUnavailable
from gateway.command_args import engine_overrides, say, setup_logging
from gateway.config import Config, ConfigError, load_config
from gateway.core import CallCore
from gateway.core.voice_store import VoiceStore
from gateway.http import health, openai_speech, tokens, voices
from gateway.http.errors import coded_errors_middleware
from gateway.http.guard import cors_headers, guard_middleware
from gateway.http.log_filter import quiet_malformed_requests
from gateway.runtime_stats import settle_gc
from gateway.stop_signals import stop_on_signals
from tts import Engine, EngineChoice, EngineError, build_engine, resolve_engine_kind

log = logging.getLogger("voxgate.app")


@dataclass(frozen=True)
class Leg:
    module: str  # a module of gateway/legs/ with `install(core, host)`
    extra: str | None = None  # the pip extra it needs; without it the leg is off (logged), the gateway serves on


# The legs, installed in this order. One line per way a call arrives.
LEGS: tuple[Leg, ...] = (
    Leg("gateway.legs.native_ws"),  # /v1/ws
    Leg("gateway.legs.control"),  # /v1/control (the agent's side of a telephony call)
    Leg("gateway.legs.twilio"),  # /v1/twilio
    Leg("gateway.legs.audiosocket"),  # Asterisk AudioSocket on telephony.audiosocket_port
    Leg("gateway.legs.sip"),  # direct SIP (UDP) on sip.port, RTP on sip.rtp_ports
    Leg("gateway.legs.asterisk"),  # /v1/asterisk (chan_websocket)
    Leg("gateway.legs.telnyx"),  # /v1/telnyx
    Leg("gateway.legs.vonage"),  # /v1/vonage
    Leg("gateway.legs.jambonz"),  # /v1/jambonz
    Leg("gateway.legs.webrtc", extra="webrtc"),  # /v1/webrtc/offer and the demo page
)


def engine_choice(config: Config) -> EngineChoice:
    """The gateway config's `engine` and `simulated` sections as plain engine settings."""
    e = config.engine
    simulated = {name: getattr(config.simulated, name) for name in config.simulated.__dataclass_fields__}
    voice_cache = e.voice_cache or (
        os.path.join(config.server.voices_dir, "cache")
        if config.server.voices_dir
        else os.path.join(os.path.expanduser("~"), ".cache", "voxgate", "voices")
    )
    return EngineChoice(
        kind=e.kind,
        model_dir=e.model_dir,
        device=e.device,
        dtype=e.dtype,
        max_batch=e.max_batch,
        max_queued=e.max_queued,
        vocoder=e.vocoder,
        vocoder_cache=e.vocoder_cache,
        aligner_dir=e.aligner_dir,
        voice_cache_dir=voice_cache,
        simulated=simulated,
        endpoints=list(e.endpoints),
        connect_timeout_s=e.connect_timeout_s,
        discover=engine_discovery(config),
        model=e.model,
        api_key_env=e.api_key_env,
        sample_rate=e.sample_rate,
        task_type=e.task_type,
        tcp_connect_timeout_s=e.tcp_connect_timeout_s,
        first_byte_timeout_s=e.first_byte_timeout_s,
        stream_stall_timeout_s=e.stream_stall_timeout_s,
        speech_transport=e.speech_transport,
        # openai-speech: the names sent as `voice` must be voices the servers list (clones are sent whole)
        voices_required=[v.speaker or name for name, v in config.voices.items() if not v.ref_audio],
    )


def engine_discovery(config: Config) -> bool:
    """engine.kind remote with no endpoints in a cluster: the engines are the ones registered in Redis."""
    return config.engine.kind == "remote" and not config.engine.endpoints and config.cluster.enabled


class Gateway:
    """One gateway: an engine, its call core, every leg in `LEGS`, the HTTP routes; one port."""

    def __init__(self, config: Config, engine: Engine | None = None, legs: Iterable[Leg] = LEGS):
        self.config = config
        self.supervisor = None  # engine.isolate: the engine child process
        self.engine_directory = None  # engine.kind remote found through the call plane (gateway/cluster/engines.py)
        if engine is None:
            choice = engine_choice(config)
            if config.engine.isolate:
                from gateway.engine_supervisor import EngineSupervisor

                self.supervisor = EngineSupervisor(config)
                choice = EngineChoice(kind="remote", endpoints=[self.supervisor.endpoint], connect_timeout_s=0)
            try:
                engine = build_engine(choice)
            except ValueError as exc:
                raise ValueError(f"{config.source}: {exc}") from exc
        self.engine = engine
        kind = getattr(engine, "name", None) or resolve_engine_kind(config.engine.kind, config.engine.model_dir)
        # /metrics: the vocoder backend actually serving (auto resolves at load), else what was asked for
        vocoder = (
            (lambda: getattr(engine, "vocoder_name", None) or config.engine.vocoder) if kind == "qwen3" else "none"
        )
        self.core = CallCore(config, engine, kind, vocoder)
        if hasattr(engine, "endpoint_stats"):  # openai-speech: its servers on /metrics
            self.core.metrics.watch_speech_endpoints(engine.endpoint_stats)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.reuse_port = False  # `serve --workers`: the port is shared with the other workers (SO_REUSEPORT)
        self.extra_sockets: list = []  # more bound sockets to serve on (a worker's own address)
        self._on_start: list[Callable[[], Awaitable[None]]] = []
        self._on_stop: list[Callable[[], Awaitable[None]]] = []
        # the guard (Origin allowlist, per-IP caps) runs before every route and upgrade; aiohttp's own refusals
        # (no route, wrong method) get coded JSON bodies like every other error
        middlewares = [guard_middleware(self.core), coded_errors_middleware(self.core)]
        self.app = web.Application(client_max_size=config.server.limits.max_message_bytes * 4, middlewares=middlewares)
        self.app.on_response_prepare.append(cors_headers(self.core))  # pages on listed origins may read the answers
        quiet_malformed_requests()
        self.voices = VoiceStore(config, engine)  # cloned voices: the config's and the uploaded (server.voices_dir)
        self.add_routes(
            health.routes(self.core)
            + voices.routes(self.core, self.voices)
            + openai_speech.routes(self.core)
            + tokens.routes(self.core)
        )
        self.on_stop(self.core.calls.shutdown)  # first: end calls while the server still reads (clean close handshakes)
        self.legs: dict[str, object] = {}  # leg module -> what its install returned (endpoint, server, …)
        for leg in legs:
            self._install(leg)
        self.agents = agent.install(self.core, self)  # the built-in agent, when `llm` is configured
        if not config.server.api_keys:
            log.warning("no server.api_keys configured: the gateway is OPEN to anyone who can reach it")

    def _install(self, leg: Leg) -> None:
        try:
            module = importlib.import_module(leg.module)
        except ImportError as exc:
            if leg.extra is None:
                raise
            log.warning("%s is off (%s): pip install 'voxgate[%s]'", leg.module, exc, leg.extra)
            return
        self.legs[leg.module] = module.install(self.core, self)

    # ------------------------------------------------------------ the LegHost face
    def add_routes(self, routes) -> None:
        self.app.add_routes(routes)

    def on_start(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._on_start.append(fn)

    def on_stop(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._on_stop.append(fn)

    # ------------------------------------------------------------ what tests and operators read
    @property
    def sessions(self):
        return self.core.sessions

    @property
    def calls(self):
        return self.core.calls

    @property
    def metrics(self):
        return self.core.metrics

    @property
    def clock(self):
        return self.core.clock

    @property
    def engine_kind(self) -> str:
        return self.core.engine_kind

    @property
    def accepting(self) -> bool:
        return self.core.accepting

    @property
    def audiosocket(self):
        """The AudioSocket server (its `port`), or None when telephony.audiosocket_port is unset."""
        return self.legs.get("gateway.legs.audiosocket")

    @property
    def url(self) -> str:
        return f"http://{self.config.server.host}:{self.port}"

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str | None = None, port: int | None = None) -> int:
        if self.config.server.log_dir:
            try:
                os.makedirs(self.config.server.log_dir, exist_ok=True)
            except OSError as exc:
                raise ValueError(
                    f"{self.config.source}: server.log_dir: cannot create {self.config.server.log_dir!r}: {exc.strerror}"
                ) from exc
        if any(v.stress for v in self.config.voices.values()):
            from tts.frontend.stress import warm_up  # load the stress model now, not on a caller's first chunk

            await asyncio.to_thread(warm_up)
        self.core.voice.check()  # a barge_in detector that cannot load is a start-up error
        if self.supervisor is not None:
            await self.supervisor.start()
        if engine_discovery(self.config) and hasattr(self.engine, "set_endpoints"):
            from gateway.cluster.engines import EngineDirectory

            self.engine_directory = EngineDirectory(self.config, self.engine.set_endpoints)
            await self.engine_directory.start()  # the engines registered now; the start waits for one as with a list
        await self.engine.start()
        if self.supervisor is not None:
            try:
                await self.supervisor.wait_ready(self.engine, self.config.engine.isolate_start_timeout_s)
            except BaseException:
                await self.engine.close()
                await self.supervisor.stop()
                raise
        try:
            await self.voices.start()  # a cloned voice that cannot be prepared refuses the start, naming it
        except BaseException:
            await self.engine.close()
            raise
        self.core.clock.start()
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            host or self.config.server.host,
            self.config.server.port if port is None else port,
            reuse_port=self.reuse_port or None,
        )
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        for sock in self.extra_sockets:
            await web.SockSite(self._runner, sock).start()
        for fn in self._on_start:
            await fn()
        if (
            self.core.cluster is not None
        ):  # joins the plane once its ports are known; Redis unreachable refuses the start
            if self.audiosocket is not None:
                self.core.cluster.audiosocket = f"{self.audiosocket.host}:{self.audiosocket.port}"
            try:
                await self.core.cluster.start(host or self.config.server.host, self.port)
                self.voices.plane = self.core.cluster
                try:
                    await self.voices.share_local()
                except ClusterUnavailable as exc:
                    raise ValueError(f"cluster: the shared voices could not be read: {exc}") from None
                self.core.cluster.on_heartbeat.append(self.voices.sync)
            except BaseException:
                await self.stop()
                raise
        self.core.accepting = True
        return self.port

    async def drain(self, timeout: float | None = None) -> None:
        """Stop accepting, let open turns finish (up to the timeout), then close everything with 1001.

        In a cluster the node is marked draining in Redis (/readyz turns 503, balancers stop sending it new calls)
        and its calls themselves may finish: their late or reconnecting legs still reach it, directly or
        forwarded by another node; only new calls are refused."""
        timeout = self.config.server.limits.drain_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if self.core.cluster is not None:
            self.core.draining = True
            await self.core.cluster.set_draining()
            while time.monotonic() < deadline and (len(self.calls) or self.core.cluster.forwarded_legs):
                await asyncio.sleep(0.05)
        self.core.accepting = False
        while time.monotonic() < deadline and any(s.active_turns for s in self.sessions.values()):
            await asyncio.sleep(0.05)
        for session in list(self.sessions.values()):
            await session.close(P.error_event(P.SHUTTING_DOWN, "the gateway is shutting down"))

    async def stop(self) -> None:
        self.core.accepting = False
        for session in list(self.sessions.values()):
            await session.close()
        for fn in self._on_stop:
            await fn()
        await self.core.voice.close()
        if self.core.cluster is not None:
            from gateway.cluster import forward

            await forward.close(self.core)
            await self.core.cluster.close()
        await self.core.clock.stop()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None
        if self.engine_directory is not None:
            await self.engine_directory.close()
        await self.engine.close()
        if self.supervisor is not None:
            await self.supervisor.stop(self.config.server.limits.drain_timeout_s + 5)


# ---------------------------------------------------------------- serve command
async def run_gateway(
    config: Config, ready: Callable[[Gateway], None] | None = None, setup: Callable[[Gateway], None] | None = None
) -> None:
    gateway = Gateway(config)
    if setup:  # before start: e.g. a worker of `serve --workers` shares its ports (gateway/workers.py)
        setup(gateway)
    await gateway.start()
    say(
        f"voxgate listening on {gateway.url}  (engine: {gateway.engine_kind}; native WS at ws://{config.server.host}:{gateway.port}/v1/ws)"
    )
    settle_gc()  # start-up's objects out of every GC pass, and thresholds for a server's heap (gateway/runtime_stats.py)
    stop = stop_on_signals()
    if ready:
        ready(gateway)
    await stop.wait()
    log.info("draining: letting open turns finish for up to %.0f s", config.server.limits.drain_timeout_s)
    await gateway.drain()
    await gateway.stop()


def serve_main(args) -> int:
    setup_logging(args.log_level)
    try:
        overrides: dict = {"server": {}, "engine": engine_overrides(args)}
    except ValueError as exc:
        say(f"voxgate: {exc}")
        return 2
    if args.host:
        overrides["server"]["host"] = args.host
    if args.port is not None:
        overrides["server"]["port"] = args.port
    # a pod learns its own address only at start (Kubernetes: --advertise-url http://$(POD_IP):8080)
    cluster = {key: getattr(args, key, None) for key in ("advertise_url", "node_id") if getattr(args, key, None)}
    if cluster:
        overrides["cluster"] = cluster
    if getattr(args, "sip_public_ip", None):  # Kubernetes: --sip-public-ip $(HOST_IP), the node's address
        overrides["sip"] = {"public_ip": args.sip_public_ip}
    if getattr(args, "isolate_engine", False):
        overrides["engine"]["isolate"] = True
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        say(f"voxgate: {exc}")
        return 2
    try:
        asyncio.run(run_gateway(config, getattr(args, "on_ready", None), getattr(args, "setup_gateway", None)))
    except (ValueError, OSError, EngineError) as exc:
        say(f"voxgate: cannot start: {exc}")
        return 1
    return 0
