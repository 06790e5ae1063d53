"""voxgate's `engine.kind: openai-speech` in front of a real vLLM-Omni serving Qwen3-TTS (the tiny checkpoint).

vLLM-Omni runs on a CPU-only machine with tools/vllm_cpu_platform (a test tool); scripts/vllm_omni_check.sh
builds its venv, starts it and runs this file with VOXGATE_VLLM_OMNI_URL set. Slow (minutes) and outside the
default CI run: without that variable every test here skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request

import numpy as np
import pytest

from tests.conftest import Client

URL = os.environ.get("VOXGATE_VLLM_OMNI_URL", "").rstrip("/")  # e.g. http://127.0.0.1:8091/v1

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not URL, reason="no vLLM-Omni server: set VOXGATE_VLLM_OMNI_URL (scripts/vllm_omni_check.sh does)"
    ),
]

TEXT = "Hello there. This call is spoken by vLLM-Omni."
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
    gw = await chained_gateway(
        [URL], {"voices": {"agent": {"speaker": "vivian", "language": "en"}}, "engine": {"connect_timeout_s": 10}}
    )
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
    gw = await chained_gateway(
        [URL], {"voices": {"agent": {"speaker": "vivian", "language": "en"}}, "engine": {"connect_timeout_s": 10}}
    )
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
