"""The OpenAI-compatible streaming client against a real local SSE server."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from gateway.agent.llm import Conversation, LlmError, OpenAiChat

KEY = "sk-test-123"


def sse(obj) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def delta(text: str | None) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}


class FakeOpenAi:
    """Behaves by the model name it is asked for."""

    def __init__(self):
        self.requests: list[dict] = []
        self.hung_up = asyncio.Event()  # the client closed an endless stream

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"body": body, "auth": request.headers.get("Authorization")})
        model = body["model"]
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response(
                {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, status=401
            )
        if model == "boom":
            return web.Response(status=500, text="upstream exploded")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if model == "good":
            await resp.write(sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
            await resp.write(b": keep-alive\n\n")
            for piece in ["Hello", " there", ".", " How can", " I help?"]:
                await resp.write(sse(delta(piece)))
            await resp.write(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            await resp.write(b"data: [DONE]\n\n")
        elif model == "split":  # events split across TCP writes, CRLF line ends
            payload = f"data: {json.dumps(delta('Split'))}\r\n\r\ndata: {json.dumps(delta(' works'))}\r\n\r\ndata: [DONE]\r\n\r\n".encode()
            for i in range(0, len(payload), 7):
                await resp.write(payload[i : i + 7])
        elif model == "malformed":
            await resp.write(sse(delta("Hi")))
            await resp.write(b"data: {not json\n\n")
        elif model == "error-event":
            await resp.write(sse({"error": {"message": "rate limited"}}))
        elif model == "dropped":
            await resp.write(sse(delta("Half a")))
            request.transport.close()  # the connection dies mid-reply
            return resp
        elif model == "no-done":
            await resp.write(sse(delta("Bye")))
        elif model == "endless":  # a long reply at a few pieces per second, until the client hangs up
            try:
                await resp.write(sse(delta("This reply goes on and on. ")))
                for i in range(400):
                    await asyncio.sleep(0.05)
                    await resp.write(sse(delta(f"Part {i} of it. ")))
            except (ConnectionError, RuntimeError):
                self.hung_up.set()
                return resp
        elif model == "long-line":  # one SSE line longer than the client's line buffer
            await resp.write(sse(delta("Hi")))
            await resp.write(b"data: " + b"x" * 300_000 + b"\n\n")
        elif model == "deep":  # valid-looking JSON nested deeper than the parser's recursion limit
            await resp.write(b"data: " + b"[" * 100_000 + b"\n\n")
        elif model == "no-blank":  # data lines that never end their event
            try:
                for _ in range(200):
                    await resp.write(b"data: x\n" * 2000)
                    await asyncio.sleep(0.005)
            except (ConnectionError, RuntimeError):
                self.hung_up.set()
                return resp
        elif model == "keepalive-only":  # the connection stays busy, the reply never comes
            try:
                await resp.write(sse(delta("Wait")))
                for _ in range(60):
                    await asyncio.sleep(0.05)
                    await resp.write(b": keep-alive\n\n")
            except (ConnectionError, RuntimeError):
                return resp
        elif model == "slow":
            await resp.write(sse(delta("Wait")))
            await asyncio.sleep(1.5)
        await resp.write_eof()
        return resp


@pytest.fixture
async def llm_server():
    fake = FakeOpenAi()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield fake, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


async def collect(chat: OpenAiChat, messages=None) -> list[str]:
    try:
        return [p async for p in chat.stream_reply(messages or [{"role": "user", "content": "hi"}])]
    finally:
        await chat.close()


async def test_streams_the_reply_token_by_token_with_key_and_history(llm_server):
    fake, url = llm_server
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    pieces = await collect(OpenAiChat(url, "good", api_key=KEY), messages)
    assert pieces == ["Hello", " there", ".", " How can", " I help?"]
    sent = fake.requests[0]
    assert sent["auth"] == f"Bearer {KEY}"
    assert sent["body"]["stream"] is True and sent["body"]["messages"] == messages


async def test_events_split_across_writes_and_crlf_lines_parse(llm_server):
    _, url = llm_server
    assert await collect(OpenAiChat(url, "split", api_key=KEY)) == ["Split", " works"]


@pytest.mark.parametrize(
    "model, key, words",
    [
        ("good", "sk-wrong", ["401", "Incorrect API key"]),
        ("boom", KEY, ["500", "upstream exploded"]),
        ("malformed", KEY, ["malformed"]),
        ("error-event", KEY, ["rate limited"]),
        ("dropped", KEY, []),
        ("no-done", KEY, ["before [DONE]"]),
        ("long-line", KEY, []),
        ("deep", KEY, ["malformed"]),
        ("no-blank", KEY, ["too large"]),
    ],
)
async def test_failures_become_llm_error(llm_server, model, key, words):
    _, url = llm_server
    with pytest.raises(LlmError) as err:
        await collect(OpenAiChat(url, model, api_key=key))
    assert err.value.code == "llm_error"
    for word in words:
        assert word in err.value.message
    assert "sk-" not in err.value.message  # never leak a key


async def test_silence_past_the_timeout_is_an_llm_error(llm_server):
    _, url = llm_server
    with pytest.raises(LlmError) as err:
        await collect(OpenAiChat(url, "slow", api_key=KEY, timeout_s=0.3))
    assert "did not answer" in err.value.message


async def test_keep_alive_comments_do_not_hold_off_the_timeout(llm_server):
    _, url = llm_server
    with pytest.raises(LlmError) as err:
        await collect(OpenAiChat(url, "keepalive-only", api_key=KEY, timeout_s=0.5))
    assert "did not answer" in err.value.message


async def test_unreachable_server_is_an_llm_error():
    with pytest.raises(LlmError):
        await collect(OpenAiChat("http://127.0.0.1:9/v1", "good", timeout_s=2))


def test_key_comes_from_the_named_environment_variable(monkeypatch):
    from gateway.config import LlmConfig

    cfg = LlmConfig(kind="openai", base_url="http://x/v1", model="m", api_key_env="VOXGATE_TEST_LLM_KEY")
    monkeypatch.delenv("VOXGATE_TEST_LLM_KEY", raising=False)
    with pytest.raises(LlmError, match="VOXGATE_TEST_LLM_KEY"):
        OpenAiChat.from_config(cfg)
    monkeypatch.setenv("VOXGATE_TEST_LLM_KEY", KEY)
    assert OpenAiChat.from_config(cfg)._api_key == KEY


def test_conversation_trims_the_last_reply_to_what_was_heard():
    conv = Conversation(system_prompt="Be brief.")
    conv.add_user("Tell me a story.")
    conv.add_assistant("Once upon a time there was a king. He had three sons.")
    conv.trim_last_assistant("Once upon a time there was a king. ")
    assert conv.messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": "Once upon a time there was a king. "},
    ]
    conv.add_user("Stop.")
    conv.add_assistant("Okay.")
    conv.trim_last_assistant("")  # interrupted before any audio: as if never said
    assert conv.messages()[-1] == {"role": "user", "content": "Stop."}


def test_conversation_keeps_a_bounded_history():
    conv = Conversation(max_messages=4)
    for i in range(10):
        conv.add_user(f"q{i}")
        conv.add_assistant(f"a{i}")
    assert [m["content"] for m in conv.messages()] == ["q8", "a8", "q9", "a9"]
