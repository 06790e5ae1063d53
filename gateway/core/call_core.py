"""`CallCore`: the one object every leg works through.

It holds the config, the engine, the metrics, the shared playout clock, the
session registry, the call registry (telephony legs joined by call id) and the
hook that answers `user.text` (the built-in agent, when configured). It
imports no leg and no web framework: legs receive it, never the other way.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from audio.encode import OutputFormat
from gateway import protocol as P
from gateway.cluster.plane import ClusterPlane
from gateway.config import Config
from gateway.core.caller_voice import VoiceHub
from gateway.core.calls import CallRegistry
from gateway.core.clock import PlayoutClock
from gateway.core.registry import SessionRegistry
from gateway.core.session import Session
from gateway.core.timers import arm_max_call
from gateway.metrics import GatewayMetrics
from gateway.security.peers import PeerLimits, parse_networks
from gateway.security.tokens import SessionTokens
from tts import SAMPLE_RATE, Engine

UserTextHandler = Callable[[Session, str], Awaitable[None]]


class CallCore:
    def __init__(self, config: Config, engine: Engine, engine_kind: str, vocoder: str | Callable[[], str] = "none"):
        self.config = config
        self.engine = engine
        self.engine_kind = engine_kind
        self.metrics = GatewayMetrics(engine.stats, engine_kind, vocoder)
        self.clock = PlayoutClock(
            config.playout.frame_ms,
            on_lateness=self.metrics.clock_lateness.observe,
            on_skip=self.metrics.clock_skipped.inc,
            on_stall=self.metrics.count_stall,
            on_tick_cpu=self._count_tick,
        )
        self.registry = SessionRegistry(config, engine, self.metrics, on_closed=self.clock.remove)
        self.sessions = self.registry.sessions  # session id -> Session, every open session
        self.calls = CallRegistry(self)
        self.accepting = False  # False before start and while draining: legs refuse new calls
        self.draining = False  # cluster mode: new calls are refused, legs of this node's calls still join
        # the call plane (cluster.redis_url): None in one process, as always
        self.cluster = ClusterPlane(config, self.metrics) if config.cluster.enabled else None
        self.user_text_handler: UserTextHandler | None = None
        # the doors' locks, shared by the HTTP port and the AudioSocket port (gateway/security/)
        limits = config.server.limits
        self.peers = PeerLimits(limits.max_connections_per_ip, limits.connections_per_ip_per_s)
        self.trusted_proxies = parse_networks(config.server.trusted_proxies)
        self.tokens = SessionTokens(config.server.api_keys, config.server.token_ttl_s)
        # the caller's voice: VAD pools shared by every call, barge-in by voice, STT (gateway/core/caller_voice.py)
        self.voice = VoiceHub(config, self.metrics, on_user_text=self._user_text_from_voice)
        if self.cluster is not None:
            self.cluster.live_call_ids = self._claimed_ids
            self.cluster.local_peers = self.peers.open_counts

    def _claimed_ids(self) -> list[str]:
        """The ids this node keeps claimed in the call plane: its live calls', and the outbound calls it dialled
        while they ring and while their outcome is kept for a late attach (an agent on another node is forwarded
        here for it)."""
        return [*self.calls.ids(), *self.calls.sticky.ids()]

    def new_session(
        self,
        leg_name: str,
        voice: str | None,
        language: str,
        instruct: str | None,
        output: OutputFormat,
        session_id: str | None = None,
        unpaced: bool = False,
    ) -> Session:
        """`unpaced`: the leg sends audio as the engine makes it (gateway/core/unpaced.py), not on the clock."""
        return self.registry.new_session(leg_name, voice, language, instruct, output, session_id, unpaced=unpaced)

    def new_headless_session(self, leg_name: str, voice: str | None, language: str, instruct: str | None) -> Session:
        """A session with no media leg (the OpenAI speech route): counted against max_sessions, its turns go
        through the same frontend, chunker and engine deadlines, and `session.playout.audio()` yields its
        24 kHz PCM in order, unpaced, raising `HeadlessError` if a chunk fails (gateway/core/headless.py)."""
        return self.registry.new_session(
            leg_name, voice, language, instruct, OutputFormat("pcm16", SAMPLE_RATE), headless=True
        )

    def play(self, session: Session) -> None:
        """The session's media leg is attached: the shared clock ticks it, and its max-call timer runs.

        Text that came before (a control socket that attached first) waited for nobody: its turn's
        latency counts from now."""
        session.playout.restart_latency()
        if session.media_leg is not None and session.media_leg.clock_driven:
            self.clock.add(session)
        arm_max_call(session, self.config.server.limits.max_call_s)

    def _count_tick(self, cpu_s: float, members: int) -> None:
        self.metrics.clock_tick_cpu.inc(cpu_s)
        self.metrics.clock_member_ticks.inc(members)

    async def _user_text_from_voice(self, session: Session, text: str) -> None:
        if self.user_text_handler is not None:  # without an agent the transcript only goes to the text leg
            await self.user_text_handler(session, text)

    async def handle_user_text(self, session: Session, text: str) -> None:
        if self.user_text_handler is None:
            raise P.ProtocolError(P.NO_AGENT, "no LLM agent is configured (config section `llm`)")
        await self.user_text_handler(session, text)
