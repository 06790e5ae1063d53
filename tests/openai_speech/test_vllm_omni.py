"""voxgate's `engine.kind: openai-speech` in front of a real vLLM-Omni serving Qwen3-TTS (the tiny checkpoint).

vLLM-Omni runs on a CPU-only machine with tools/vllm_cpu_platform (a test tool); scripts/vllm_omni_check.sh
starts it (from the venv scripts/install_vllm_omni.sh builds) and runs this file with VOXGATE_VLLM_OMNI_URL set:
`.ci/run` does so as its own stage after the suite. Without that variable every test here skips.

Beside the real server: a stand-in that hangs (tests/openai_speech/misbehaving.py) and a proxy that relabels
vLLM-Omni's real audio with another Content-Type.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from tests.conftest import Client
from tests.openai_speech.misbehaving import Misbehaving

URL = os.environ.get("VOXGATE_VLLM_OMNI_URL", "").rstrip("/")  # e.g. http://127.0.0.1:8091/v1

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not URL, reason="no vLLM-Omni server: set VOXGATE_VLLM_OMNI_URL (scripts/vllm_omni_check.sh does)"
    ),
]

TEXT = "Hello there. This call is spoken by vLLM-Omni."
AGENT = {"agent": {"speaker": "vivian", "language": "en"}}
# vLLM-Omni's first audio on two busy cores is 0.3-1 s, and now and then several seconds: the tests that are not
# about the first-byte limit leave it wide, the hung-server test sets it to FIRST_BYTE_S
ENGINE = {"connect_timeout_s": 10, "first_byte_timeout_s": 30}
FIRST_BYTE_S = 5
LONG = "This turn is interrupted while vLLM-Omni still streams its first chunk. Its second chunk never plays."


def _metric(prefix: str) -> float:
    """A sample of vLLM-Omni's own /metrics (summed over the lines that start with `prefix`)."""
    root = URL.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(f"{root}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def _running_requests() -> float:
    """Speech requests vLLM-Omni's pipeline is answering now."""
    return _metric("vllm_omni:num_requests_running")


def _aborted_requests() -> float:
    return _metric('vllm_omni:requests_success_total{finished_reason="abort"')


async def _wait_for(predicate, timeout: float, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(predicate):
            return True
        await asyncio.sleep(step)
    return bool(await asyncio.to_thread(predicate))


@pytest.fixture(scope="module", autouse=True)
def warm_server():
    """One request straight to vLLM-Omni first: a fresh server's first request runs its lazy start-up (over
    10 s on two busy cores), which voxgate would rightly count against the endpoint."""
    body = json.dumps(
        {"input": "Warm up.", "voice": "vivian", "response_format": "pcm", "stream": True, "stream_format": "audio"}
    ).encode()
    req = urllib.request.Request(f"{URL}/audio/speech", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.status == 200 and len(r.read()) > 0


def _voices() -> list[str]:
    with urllib.request.urlopen(f"{URL}/audio/voices", timeout=5) as r:
        return json.loads(r.read())["voices"]


async def test_native_ws_call_speaks_through_vllm_omni(chained_gateway):
    assert "vivian" in _voices()  # the tiny checkpoint's speakers, as vLLM-Omni lists them
    gw = await chained_gateway([URL], {"voices": AGENT, "engine": ENGINE})
    c = await Client.connect(gw)
    await c.start(voice="agent")
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    start = await c.until("audio.start", timeout=120)
    done = await c.until("turn.done", timeout=300)
    assert start["turn_id"] == "t1" and start["ttfa_ms"] > 0
    assert done["interrupted"] is False and done["played_text"] == TEXT
    marks = [m for _, m in c.events if m["type"] == "mark"]
    assert len(marks) == 2  # one vLLM-Omni request per sentence
    audio = np.frombuffer(b"".join(f for _, f in c.frames), "<i2")
    assert len(audio) / 24000 >= 1.0 and np.abs(audio).max() > 1000  # real audio, not silence
    (ep,) = gw.engine.endpoint_stats()
    assert ep["up"] and ep["in_flight"] == 0 and ep["ttfb_count"] == 2 and not ep["errors"]
    print(f"\nvLLM-Omni: ttfa {start['ttfa_ms']:.0f} ms, played {done['played_ms']} ms, gaps {done['gaps']}")
    await c.ws.close()


async def test_interrupt_closes_the_vllm_omni_request(chained_gateway):
    gw = await chained_gateway([URL], {"voices": AGENT, "engine": ENGINE})
    aborted_before = _aborted_requests()
    c = await Client.connect(gw)
    await c.start(voice="agent")
    await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
    await c.until("audio.start", timeout=120)
    assert await _wait_for(lambda: _running_requests() >= 1, timeout=10)  # vLLM-Omni is still making the chunk
    await c.send({"type": "interrupt"})
    done = await c.until("turn.done", timeout=30)
    assert done["interrupted"] is True and done["played_ms"] > 0
    assert LONG.startswith(done["played_text"].rstrip(".")) and len(done["played_text"]) < len(LONG)
    # vLLM-Omni saw the disconnect: it aborts the requests (its own count of aborted requests grows, of running
    # ones goes back to 0) long before the chunk's ~5 s of audio would have been made
    assert await _wait_for(lambda: _running_requests() == 0, timeout=5), "vLLM-Omni kept generating"
    assert _aborted_requests() >= aborted_before + 1
    assert gw.engine.stats()["active"] == 0
    await c.ws.close()


def _endpoints(gw) -> dict:
    return {e["endpoint"]: e for e in gw.engine.endpoint_stats()}


async def _readyz(gw) -> dict:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp:
            return {e["endpoint"]: e for e in (await resp.json())["endpoints"]}


async def test_a_hung_server_beside_vllm_omni_costs_one_first_byte_timeout_then_vllm_omni_speaks(chained_gateway):
    hung = Misbehaving("headers")  # answers 200 audio/pcm, then nothing
    runner, hung_base = await hung.start()
    try:
        gw = await chained_gateway(
            [hung_base, URL],
            {"voices": AGENT, "engine": {**ENGINE, "first_byte_timeout_s": FIRST_BYTE_S}},
        )
        c = await Client.connect(gw)
        await c.start(voice="agent")
        sent = time.monotonic()
        await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
        await c.until("audio.start", timeout=120)
        first_audio = c.events[-1][0] - sent
        done = await c.until("turn.done", timeout=300)
        assert not c.of_type("error") and done["interrupted"] is False and done["played_text"] == TEXT
        ready = await _readyz(gw)
        assert ready[hung_base]["up"] is False and "first_byte_timeout_s" in ready[hung_base]["why_down"]
        assert ready[URL]["up"] is True
        print(f"\nhung beside vLLM-Omni: first audio {first_audio * 1000:.0f} ms after the text")
        on_hung = _endpoints(gw)[hung_base]["requests"]
        await c.send({"type": "text", "turn_id": "t2", "text": "Now only vLLM-Omni speaks.", "final": True})
        done = await c.until("turn.done", timeout=300)
        assert not c.of_type("error") and done["played_text"] == "Now only vLLM-Omni speaks."
        assert _endpoints(gw)[hung_base]["requests"] == on_hung  # the call's chunks stayed off the hung one
        await c.ws.close()
    finally:
        await runner.cleanup()


async def test_vllm_omnis_real_audio_under_another_content_type_never_plays(chained_gateway):
    """A proxy in front of vLLM-Omni that passes its real audio on as application/octet-stream."""

    async def relabel(request: web.Request) -> web.StreamResponse:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{URL}/audio/speech", data=await request.read(), headers=request.headers) as up:
                resp = web.StreamResponse(status=up.status, headers={"Content-Type": "application/octet-stream"})
                await resp.prepare(request)
                try:
                    async for data in up.content.iter_any():
                        await resp.write(data)
                    await resp.write_eof()
                except ConnectionResetError:
                    pass  # voxgate hung up on it, as it should
                return resp

    async def forward(request: web.Request) -> web.Response:
        async with aiohttp.ClientSession() as http:
            async with http.get(URL.rsplit("/v1", 1)[0] + request.path) as up:
                return web.Response(status=up.status, body=await up.read(), content_type=up.content_type)

    app = web.Application()
    app.add_routes([web.post("/v1/audio/speech", relabel), web.get("/{tail:.*}", forward)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    proxy = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    try:
        gw = await chained_gateway([proxy, URL], {"voices": AGENT, "engine": ENGINE})
        c = await Client.connect(gw)
        await c.start(voice="agent")
        await c.send({"type": "text", "turn_id": "t1", "text": "Relabelled audio.", "final": True})
        error = await c.until("error", timeout=120)
        done = await c.until("turn.done", timeout=60)
        assert error["code"] == "engine_error" and "application/octet-stream" in error["message"]
        assert done["played_ms"] == 0 and not c.frames  # vLLM-Omni's audio, but not said to be PCM: not played
        assert (await _readyz(gw))[proxy]["up"] is False
        await c.send({"type": "text", "turn_id": "t2", "text": "Straight from vLLM-Omni.", "final": True})
        done = await c.until("turn.done", timeout=300)
        assert done["played_text"] == "Straight from vLLM-Omni." and done["played_ms"] > 0
        await c.ws.close()
    finally:
        await runner.cleanup()


async def test_a_suspect_vllm_omni_comes_back_by_a_speech_probe(chained_gateway):
    gw = await chained_gateway([URL], {"voices": AGENT, "engine": ENGINE})
    gw.engine.settings.first_byte_timeout_s = 0.001  # no server answers that fast: the first chunk makes it suspect
    c = await Client.connect(gw)
    await c.start(voice="agent")
    await c.send({"type": "text", "turn_id": "t1", "text": "Too slow.", "final": True})
    error = await c.until("error", timeout=60)
    assert error["code"] == "engine_unavailable" and _endpoints(gw)[URL]["suspect"] is True
    await c.ws.close()
    gw.engine.settings.first_byte_timeout_s = 30.0  # its speech probe (voice vivian, "Hello.") now passes
    deadline = time.monotonic() + 60
    while not _endpoints(gw)[URL]["up"] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert _endpoints(gw)[URL]["up"] is True and _endpoints(gw)[URL]["suspect"] is False
    # the probe closed its request at the first byte: vLLM-Omni stops making it
    assert await _wait_for(lambda: _running_requests() == 0, timeout=10)
