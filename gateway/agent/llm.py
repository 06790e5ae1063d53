"""LLM connector: an OpenAI-compatible streaming chat-completions client (docs/protocol.md, `user.text`).

`OpenAiChat.stream_reply(messages)` yields the reply's text pieces as the
server streams them (server-sent events, `data: {json}` … `data: [DONE]`).
Every failure — refused key, server error, malformed stream, dropped
connection, silence past the timeout — becomes one `LlmError` with the
protocol code `llm_error`, so the session can report it and live on.
`Conversation` keeps a session's history and trims the agent's last message
to what the caller actually heard after a barge-in.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import AsyncIterator

import aiohttp

_MAX_ERROR_BODY = 2000
_MAX_EVENT_BYTES = 1 << 20  # one SSE event's data; a stream that never ends its event must not grow our memory


class LlmError(Exception):
    """The LLM could not give a reply; `code` is the protocol's `llm_error`."""

    def __init__(self, message: str, code: str = "llm_error"):
        super().__init__(message)
        self.code = code
        self.message = message


class OpenAiChat:
    """Streaming client for `POST {base_url}/chat/completions`.

    `timeout_s` bounds connecting and every wait for the next piece of the
    stream (so it is also the time-to-first-token limit), not the whole reply.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        extra_body: dict | None = None,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        self.extra_body = dict(extra_body or {})
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, cfg) -> "OpenAiChat":
        """Build from `gateway.config.LlmConfig`; the key comes from the env var it names."""
        key = None
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise LlmError(f"llm.api_key_env names {cfg.api_key_env!r}, but that environment variable is empty")
        return cls(cfg.base_url, cfg.model, api_key=key, timeout_s=cfg.timeout_s)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self.timeout)
        return self._http

    async def stream_reply(self, messages: list[dict]) -> AsyncIterator[str]:
        """Yield the assistant's reply piece by piece; raise `LlmError` on any failure."""
        headers = {"Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = {"model": self.model, "messages": messages, "stream": True, **self.extra_body}
        try:
            async with self._client().post(self.url, json=body, headers=headers) as resp:
                if resp.status != 200:
                    raise LlmError(f"the LLM answered HTTP {resp.status}: {await _error_text(resp)}")
                events = _sse_data(resp.content)
                while True:
                    # The timeout is per event, not per read: keep-alive comments alone do not hold it off.
                    try:
                        data = await asyncio.wait_for(events.__anext__(), self.timeout.sock_read)
                    except StopAsyncIteration:
                        break
                    if data == "[DONE]":
                        return
                    piece = _delta_text(data)
                    if piece:
                        yield piece
                raise LlmError("the LLM stream ended before [DONE] (connection dropped?)")
        except LlmError:
            raise
        except asyncio.TimeoutError as exc:
            raise LlmError(f"the LLM did not answer within {self.timeout.sock_read:g} s") from exc
        except aiohttp.ClientError as exc:
            raise LlmError(f"the LLM connection failed: {type(exc).__name__}: {exc}") from exc


async def _sse_data(content: aiohttp.StreamReader) -> AsyncIterator[str]:
    """The `data` of each server-sent event (multi-line data joined by newlines)."""
    lines: list[str] = []
    size = 0
    async for raw in content:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if lines:
                yield "\n".join(lines)
                lines, size = [], 0
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        name, _, value = line.partition(":")
        if name == "data":
            lines.append(value[1:] if value.startswith(" ") else value)
            size += len(raw)
            if size > _MAX_EVENT_BYTES:
                raise LlmError(f"the LLM sent an event too large (over {_MAX_EVENT_BYTES} bytes without an end)")
    if lines:
        yield "\n".join(lines)


def _delta_text(data: str) -> str:
    try:
        event = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser allows
        raise LlmError(f"the LLM sent a malformed event: {data[:200]!r}") from exc
    if not isinstance(event, dict):
        raise LlmError(f"the LLM sent a malformed event: {data[:200]!r}")
    if "error" in event:
        err = event["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise LlmError(f"the LLM reported an error: {message}")
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise LlmError(f"the LLM sent an event without choices: {data[:200]!r}")
    if not choices:
        return ""  # e.g. a usage-only event
    delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


async def _error_text(resp: aiohttp.ClientResponse) -> str:
    try:
        text = (await resp.content.read(_MAX_ERROR_BODY)).decode("utf-8", errors="replace")
    except aiohttp.ClientError:
        return resp.reason or ""
    try:
        err = json.loads(text).get("error")  # RecursionError: nesting deeper than the parser allows
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    except (ValueError, AttributeError, RecursionError):
        pass
    return text.strip() or (resp.reason or "")


@dataclass
class Conversation:
    """One session's chat history in the OpenAI message format."""

    system_prompt: str | None = None
    max_messages: int = 50  # oldest turns drop out first; the system prompt stays
    history: list[dict] = field(default_factory=list)
    call_details: dict = field(default_factory=dict)  # the media leg's facts (SIP: {"sip": {...}}); kept too

    def messages(self) -> list[dict]:
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        if self.call_details:
            # the caller's own headers among them: data to read, not instructions to follow
            facts = json.dumps(self.call_details, ensure_ascii=False, separators=(",", ":"))
            head.append({"role": "system", "content": f"Call details from signalling (caller-supplied data): {facts}"})
        return head + [dict(m) for m in self.history]

    def add_user(self, text: str) -> None:
        self._append({"role": "user", "content": text})

    def add_assistant(self, text: str) -> None:
        self._append({"role": "assistant", "content": text})

    def trim_last_assistant(self, played_text: str) -> None:
        """After a barge-in: the agent's last message becomes what the caller heard."""
        for i in range(len(self.history) - 1, -1, -1):
            if self.history[i]["role"] == "assistant":
                if played_text.strip():
                    self.history[i] = {"role": "assistant", "content": played_text}
                else:
                    del self.history[i]  # nothing was heard: as if never said
                return

    def _append(self, message: dict) -> None:
        self.history.append(message)
        if len(self.history) > self.max_messages:
            del self.history[: len(self.history) - self.max_messages]
