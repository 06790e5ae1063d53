"""The built-in agent: `user.text` → LLM (or its simulator) → a new turn of the session, token by token.

One `Agent` per session. It keeps the conversation, streams the reply into
the session's text leg as it arrives, and on barge-in cancels the LLM stream
and trims its last reply to `played_text` — what the caller actually heard.
It watches the session's events through `observe(event)`, which the text
leg calls for every event it sends (the agent never reaches into the playout).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import AsyncIterator, Callable, Protocol

from gateway import protocol as P
from gateway.agent.llm import Conversation, LlmError, OpenAiChat
from gateway.agent.llm_sim import LlmSimulator

log = logging.getLogger("voxgate.agent")


class ChatModel(Protocol):
    def stream_reply(self, messages: list[dict]) -> AsyncIterator[str]: ...


class SimulatedChat:
    """A canned conversational reply, streamed at an LLM's pace by `LlmSimulator` (demos, load tests)."""

    # Each reply opens with a full clause, so the first text chunk covers the time the rest takes to stream.
    EN = [
        "I hear you, and this reply comes from the simulated agent. It streams word by word, the way a real model would.",
        "Sure, the gateway turns my text into speech one sentence at a time. So you hear me before I have finished writing.",
        "That is a good question, and you can test something with it. Interrupt me while I talk, and I will stop at once.",
    ]
    RU = [
        "Я вас слышу, и это ответ симулятора агента. Он приходит по словам, как от настоящей модели.",
        "Конечно, шлюз озвучивает мой текст по одному предложению. Поэтому вы слышите меня раньше, чем я допишу.",
        "Хороший вопрос, и на нём можно кое-что проверить. Перебейте меня, пока я говорю, и я сразу замолчу.",
    ]

    def __init__(self, ttft_ms: float = 300.0, tokens_per_s: float = 40.0, seed: int | None = None):
        self.simulator = LlmSimulator(ttft_ms=ttft_ms, tokens_per_s=tokens_per_s, seed=seed)
        self._turns = itertools.count()

    def reply_for(self, user_text: str) -> str:
        russian = sum("\u0400" <= ch <= "\u04ff" for ch in user_text) > len(user_text) / 3
        replies = self.RU if russian else self.EN
        return replies[next(self._turns) % len(replies)]

    async def stream_reply(self, messages: list[dict]) -> AsyncIterator[str]:
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        async for piece in self.simulator.stream(self.reply_for(last_user)):
            yield piece


def build_chat_model(llm_config) -> ChatModel | None:
    """The configured model (`llm.kind`): OpenAI-compatible, simulated, or None for no agent."""
    if llm_config.kind == "openai":
        return OpenAiChat.from_config(llm_config)
    if llm_config.kind == "simulated":
        return SimulatedChat(ttft_ms=llm_config.ttft_ms, tokens_per_s=llm_config.tokens_per_s)
    return None


class Agent:
    """Answers `user.text` with a new turn of `session`; see the module docstring.

    Agent-side events (`agent.text`) go out through the session, to whatever
    text leg is attached now; the agent watches the session's events (a
    session observer) to trim its history after a barge-in.
    """

    def __init__(self, session, model: ChatModel, system_prompt: str | None = None):
        self.session = session
        self.model = model
        self.conversation = Conversation(
            system_prompt=system_prompt, call_details=dict(getattr(session, "call_details", {}))
        )
        session.observers.append(self.observe)
        self._ids = itertools.count(1)
        self._task: asyncio.Task | None = None
        self._streaming: str | None = None  # the turn the running reply feeds
        self._last_reply: str | None = None  # the turn whose reply is the history's last assistant message
        self._trim_to: dict[str, str] = {}  # turn -> played_text, for a reply still unwinding

    async def on_user_text(self, text: str) -> None:
        """The caller said something: stop talking, then answer it."""
        if self.session.active_turns or self._streaming:
            await self.interrupt()
        self.conversation.add_user(text)
        turn_id = f"agent-{next(self._ids)}"
        self._streaming = turn_id
        self._task = asyncio.get_running_loop().create_task(self._reply(turn_id), name=f"agent-{turn_id}")

    async def interrupt(self) -> None:
        """Barge-in: cancel the LLM stream, then the session's audio; `turn.done` trims the history."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.session.interrupt()

    def observe(self, event: dict) -> None:
        """Every session event on its way to the client."""
        if event.get("type") != "turn.done" or not event.get("interrupted"):
            return
        turn_id = event.get("turn_id")
        played = event.get("played_text") or ""
        if turn_id == self._streaming and self._task is not None and not self._task.done():
            self._trim_to[turn_id] = played  # the reply task records, then trims, as it unwinds
            self._task.cancel()
        elif turn_id == self._last_reply:
            self.conversation.trim_last_assistant(played)
            self._last_reply = None

    async def cancel(self) -> None:
        """Stop the running reply (the session is ending)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # ------------------------------------------------------------ internals
    async def _reply(self, turn_id: str) -> None:
        reply = ""
        try:
            async with contextlib.aclosing(self.model.stream_reply(self.conversation.messages())) as pieces:
                async for piece in pieces:
                    if self.session.closed:
                        return
                    reply += piece
                    self.session.add_text(turn_id, piece, False)
                    self.session.emit({"type": "agent.text", "turn_id": turn_id, "text": piece})
                    await self.session.flush_events()
            if not self.session.closed:
                self.session.add_text(turn_id, "", True)
        except LlmError as exc:
            log.warning("session %s: %s", self.session.session_id, exc.message)
            self.session.emit(P.error_event(exc.code, exc.message))
            if reply:
                self._close_turn(turn_id)
        except P.ProtocolError as exc:  # e.g. the turn limit: report it, keep the call
            if exc.code == P.TURN_CLOSED:
                pass  # the turn was interrupted (barge-in) while tokens were in flight: stop quietly
            else:
                self.session.emit(exc.event())
                if reply:
                    self._close_turn(turn_id)
        except Exception as exc:  # a model that fails in any other way: report it, keep the call
            log.exception("session %s: the agent's model failed", self.session.session_id)
            self.session.emit(P.error_event(P.LLM_ERROR, f"the agent's model failed: {exc}"))
            if reply:
                self._close_turn(turn_id)
        finally:
            self._streaming = None
            if reply:
                self.conversation.add_assistant(reply)
                self._last_reply = turn_id
                if turn_id in self._trim_to:
                    self.conversation.trim_last_assistant(self._trim_to.pop(turn_id))
                    self._last_reply = None
        await self.session.flush_events()

    def _close_turn(self, turn_id: str) -> None:
        """End the turn's text so what was already said still plays out."""
        try:
            if not self.session.closed:
                self.session.add_text(turn_id, "", True)
        except P.ProtocolError:
            pass


class AgentService:
    """Gives each session that sends `user.text` its own `Agent` (installed as `CallCore.user_text_handler`)."""

    def __init__(self, llm_config, make_model: Callable[[], ChatModel]):
        self.llm_config = llm_config
        self.make_model = make_model
        self.agents: dict[str, Agent] = {}
        self._shared: ChatModel | None = None

    async def handle_user_text(self, session, text: str) -> None:
        if not text.strip():
            raise P.ProtocolError(P.BAD_MESSAGE, "user.text: field 'text' must not be empty")
        agent = self.agents.get(session.session_id)
        if agent is None:
            agent = self.agent_for(session)
        await agent.on_user_text(text)

    def agent_for(self, session) -> Agent:
        agent = Agent(session, self._model(), self.llm_config.system_prompt)
        self.agents[session.session_id] = agent
        asyncio.get_running_loop().create_task(self._forget_when_closed(session, agent))
        return agent

    def _model(self) -> ChatModel:
        if self.llm_config.kind == "openai":
            self._shared = self._shared or self.make_model()  # one HTTP client for all sessions
            return self._shared
        return self.make_model()  # the simulator keeps per-session state

    async def _forget_when_closed(self, session, agent: Agent) -> None:
        await session.wait_closed()
        self.agents.pop(session.session_id, None)
        await agent.cancel()

    async def close(self) -> None:
        for agent in list(self.agents.values()):
            await agent.cancel()
        close = getattr(self._shared, "close", None)
        if close is not None:
            await close()


def install(core, host) -> AgentService | None:
    """Answer `user.text` with the configured LLM (`llm.kind`); None when no agent is configured.

    `core` is the `gateway.core.CallCore` (its `user_text_handler` is set), `host` the server (stop hook)."""
    cfg = core.config.llm
    if cfg.kind == "none":
        return None
    try:
        build_chat_model(cfg)  # fail at start-up on a missing key, not at the first call
    except LlmError as exc:
        raise ValueError(f"{core.config.source}: llm: {exc.message}") from exc
    service = AgentService(cfg, lambda: build_chat_model(cfg))
    core.user_text_handler = service.handle_user_text
    host.on_stop(service.close)
    return service
