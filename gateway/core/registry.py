"""The session registry: every open session by id, the capacity limit, and session creation."""

from __future__ import annotations

import re
import uuid
from typing import Callable

from audio.encode import OutputFormat
from gateway import protocol as P
from gateway.config import Config
from gateway.core.session import Session
from gateway.metrics import GatewayMetrics
from tts import Engine

_LANGUAGE = re.compile(r"auto|[a-z]{2}")


def engine_health(engine) -> str | None:
    """None while the engine serves; else why not (engines written before `Engine.health` count as healthy)."""
    health = getattr(engine, "health", None)
    return health() if health is not None else None


class SessionRegistry:
    def __init__(
        self,
        config: Config,
        engine: Engine,
        metrics: GatewayMetrics,
        on_closed: Callable[[Session], None] | None = None,
    ):
        self.config = config
        self.engine = engine
        self.metrics = metrics
        self.sessions: dict[str, Session] = {}
        self._on_closed = on_closed

    def __len__(self) -> int:
        return len(self.sessions)

    def full(self, waiting: int = 0) -> bool:
        """True when `waiting` more sessions (connections not yet started) would exceed server.max_sessions."""
        return len(self.sessions) + waiting >= self.config.server.max_sessions

    def capacity_error(self) -> P.ProtocolError:
        return P.ProtocolError(
            P.AT_CAPACITY, f"the gateway holds its maximum of {self.config.server.max_sessions} sessions"
        )

    def new_session(
        self,
        leg_name: str,
        voice: str | None,
        language: str,
        instruct: str | None,
        output: OutputFormat,
        session_id: str | None = None,
        headless: bool = False,
        unpaced: bool = False,
    ) -> Session:
        """Validates the session.start fields and registers a session (the caller attaches legs)."""
        voice = self.config.resolve_voice(voice) if voice else self.config.default_voice_name
        if voice not in self.config.voices:
            raise P.ProtocolError(P.UNKNOWN_VOICE, f"unknown voice {voice!r}; GET /v1/voices lists them")
        if not _LANGUAGE.fullmatch(language):
            raise P.ProtocolError(P.BAD_MESSAGE, f"language must be 'auto' or an ISO 639-1 code, not {language!r}")
        if self.full():
            raise self.capacity_error()
        unhealthy = engine_health(self.engine)
        if unhealthy:
            raise P.ProtocolError(P.ENGINE_UNAVAILABLE, f"the engine cannot serve: {unhealthy}")
        session = Session(
            session_id or uuid.uuid4().hex[:16],
            self.config,
            self.engine,
            self.metrics,
            voice,
            language,
            instruct,
            output,
            on_closed=self._closed,
            headless=headless,
            unpaced=unpaced,
        )
        self.sessions[session.session_id] = session
        self.metrics.sessions_active.set(len(self.sessions))
        self.metrics.sessions_total.labels(leg=leg_name).inc()
        return session

    def _closed(self, session: Session) -> None:
        self.sessions.pop(session.session_id, None)
        self.metrics.sessions_active.set(len(self.sessions))
        if self._on_closed is not None:
            self._on_closed(session)
