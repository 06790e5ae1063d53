"""The built-in agent on a real gateway: `user.text` → OpenAI-compatible SSE server → a spoken turn.

LLM failures (401, 500, dropped connection) reach the caller as `error` events
with code `llm_error`, and the session lives on.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from aiohttp import web

from gateway.config import load_config
from gateway.app import Gateway
from tests.llm.test_openai_chat import KEY, FakeOpenAi

KEY_ENV = "VOXGATE_TEST_AGENT_KEY"


@pytest.fixture
async def llm_url():
    fake = FakeOpenAi()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield fake, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    await runner.cleanup()


@pytest.fixture
async def start_agent_gateway(monkeypatch):
    gateways = []

    async def start(llm: dict, key: str = KEY) -> Gateway:
        monkeypatch.setenv(KEY_ENV, key)
        cfg = load_config(
            None,
            {
                "server": {"host": "127.0.0.1", "port": 0},
                "engine": {"kind": "simulated"},
                "simulated": {"first_packet_ms": 10, "ms_per_char": 10},
                "llm": {"kind": "openai", "api_key_env": KEY_ENV, "system_prompt": "Be brief.", **llm},
            },
        )
        gw = Gateway(cfg)
        await gw.start()
        gateways.append(gw)
        return gw

    yield start
    for gw in gateways:
        await gw.stop()


class WsCaller:
    def __init__(self, ws):
        self.ws = ws

    async def send(self, msg: dict) -> None:
        await self.ws.send(json.dumps(msg))

    async def until(self, type_: str, timeout: float = 10.0, **match) -> dict:
        async def wait() -> dict:
            while True:
                raw = await self.ws.recv()
                if isinstance(raw, bytes):
                    continue
                msg = json.loads(raw)
                if msg["type"] == type_ and all(msg.get(k) == v for k, v in match.items()):
                    return msg

        return await asyncio.wait_for(wait(), timeout)


@pytest.fixture
async def call():
    sockets = []

    async def open_call(gw: Gateway) -> WsCaller:
        ws = await websockets.connect(f"ws://127.0.0.1:{gw.port}/v1/ws", max_size=None)
        sockets.append(ws)
        caller = WsCaller(ws)
        await caller.send({"type": "session.start"})
        await caller.until("session.started")
        return caller

    yield open_call
    for ws in sockets:
        await ws.close()


async def test_reply_is_spoken_and_the_history_goes_to_the_next_request(llm_url, start_agent_gateway, call):
    fake, url = llm_url
    gw = await start_agent_gateway({"base_url": url, "model": "good"})
    caller = await call(gw)
    await caller.send({"type": "user.text", "text": "Hi!"})
    await caller.until("agent.text", turn_id="agent-1")
    await caller.until("audio.start", turn_id="agent-1")
    done = await caller.until("turn.done", turn_id="agent-1")
    assert done["played_text"] == "Hello there. How can I help?"
    await caller.send({"type": "user.text", "text": "Bye."})
    await caller.until("turn.done", turn_id="agent-2")
    assert fake.requests[1]["body"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello there. How can I help?"},
        {"role": "user", "content": "Bye."},
    ]


async def test_barge_in_closes_the_llm_stream(llm_url, start_agent_gateway, call):
    fake, url = llm_url
    gw = await start_agent_gateway({"base_url": url, "model": "endless"})
    caller = await call(gw)
    await caller.send({"type": "user.text", "text": "Talk forever."})
    await caller.until("audio.start", turn_id="agent-1")
    await asyncio.sleep(0.6)
    await caller.send({"type": "interrupt"})
    done = await caller.until("turn.done", turn_id="agent-1")
    assert done["interrupted"] is True and done["played_text"]
    await asyncio.wait_for(fake.hung_up.wait(), 5)  # the HTTP stream was closed, not left running
    agent = gw.agents.agents[next(iter(gw.sessions))]
    assert agent.conversation.history[-1] == {"role": "assistant", "content": done["played_text"]}


@pytest.mark.parametrize(
    "model, key, words",
    [("good", "sk-wrong", "401"), ("boom", KEY, "500"), ("dropped", KEY, "connection")],
)
async def test_llm_failures_become_error_events_and_the_call_goes_on(
    llm_url, start_agent_gateway, call, model, key, words
):
    _, url = llm_url
    gw = await start_agent_gateway({"base_url": url, "model": model}, key=key)
    caller = await call(gw)
    await caller.send({"type": "user.text", "text": "Hi!"})
    error = await caller.until("error")
    assert error["code"] == "llm_error" and words in error["message"]
    await caller.send({"type": "text", "turn_id": "direct", "text": "Still talking.", "final": True})
    assert (await caller.until("turn.done", turn_id="direct"))["interrupted"] is False


async def test_without_an_agent_user_text_is_no_agent(start_agent_gateway, call, monkeypatch):
    cfg = load_config(None, {"server": {"host": "127.0.0.1", "port": 0}, "engine": {"kind": "simulated"}})
    gw = Gateway(cfg)
    assert gw.agents is None
    await gw.start()
    try:
        caller = await call(gw)
        await caller.send({"type": "user.text", "text": "Hi!"})
        assert (await caller.until("error"))["code"] == "no_agent"
    finally:
        await gw.stop()


def test_a_missing_key_stops_the_start_with_a_clear_error(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = load_config(
        None, {"llm": {"kind": "openai", "base_url": "http://x/v1", "model": "m", "api_key_env": KEY_ENV}}
    )
    with pytest.raises(ValueError, match=KEY_ENV):
        Gateway(cfg, engine=_NoEngine())


class _NoEngine:
    name = "none"

    def stats(self) -> dict:
        return {"queued": 0, "active": 0}


async def test_a_model_that_fails_unexpectedly_mid_reply_ends_its_turn_and_the_call_goes_on(call):
    class BrokenModel:
        async def stream_reply(self, messages):
            yield "Half a reply, "
            raise RuntimeError("model exploded")

    cfg = load_config(
        None,
        {
            "server": {"host": "127.0.0.1", "port": 0},
            "engine": {"kind": "simulated"},
            "simulated": {"first_packet_ms": 10, "ms_per_char": 10},
            "llm": {"kind": "simulated"},
        },
    )
    gw = Gateway(cfg)
    service = gw.agents
    service.make_model = BrokenModel
    await gw.start()
    try:
        caller = await call(gw)
        await caller.send({"type": "user.text", "text": "Hi!"})
        error = await caller.until("error")
        assert error["code"] == "llm_error" and "model exploded" in error["message"]
        done = await caller.until("turn.done")  # the half reply still plays and its turn ends
        assert done["interrupted"] is False and done["played_text"] == "Half a reply,"
        await caller.send({"type": "text", "turn_id": "direct", "text": "Still talking.", "final": True})
        assert (await caller.until("turn.done", turn_id="direct"))["interrupted"] is False
    finally:
        await gw.stop()
