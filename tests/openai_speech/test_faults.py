"""openai-speech over several real speech servers (`voxgate serve` processes): placement, one killed mid-chunk,
one slowed, every server busy, none answering, a voice the servers lack, and turn mode refused."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config import ConfigError, load_config
from tests.conftest import Client
from tests.openai_speech.servers import SLOW_SIM
from tests.service.engines import free_port
from tts import EngineError, SynthesisRequest

TEXT = "Hello there. This is a second sentence for the other chunk."
LONG = "This turn streams for a long while from its server, so that it can be cut in the middle. " * 2


async def test_a_server_killed_mid_chunk_fails_that_chunk_and_the_call_moves_on(speech_servers, chained_gateway):
    a = await speech_servers("a", SLOW_SIM)
    b = await speech_servers("b", SLOW_SIM)
    gw = await chained_gateway([a.base, b.base])
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
    await c.until("audio.start")
    stats = {e["endpoint"]: e for e in gw.engine.endpoint_stats()}
    busy = a if stats[a.base]["in_flight"] else b  # the call's chunks stay on one server
    other = b if busy is a else a
    assert stats[busy.base]["in_flight"] >= 1 and stats[other.base]["in_flight"] == 0
    busy.kill()  # mid-chunk: the body stops in the middle
    error = await c.until("error", timeout=10)
    assert error["code"] == "engine_error" and "mid-chunk" in error["message"]
    await c.send({"type": "interrupt"})  # the rest of the turn would play from the other server; no need to wait
    done = await c.until("turn.done", timeout=10)
    assert done["turn_id"] == "t1" and done["played_ms"] > 0
    # the server that died is out; the next turn speaks on the other one, whole
    stats = {e["endpoint"]: e for e in gw.engine.endpoint_stats()}
    assert not stats[busy.base]["up"] and stats[busy.base]["errors"].get("engine_error", 0) >= 1
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp:
            ready = await resp.json()
    assert resp.status == 200 and {e["endpoint"]: e["up"] for e in ready["endpoints"]} == {
        busy.base: False,
        other.base: True,
    }
    await c.send({"type": "text", "turn_id": "t2", "text": "Still here. On the other server.", "final": True})
    done = await c.until("turn.done", timeout=15)
    assert done["interrupted"] is False and done["played_text"] == "Still here. On the other server."
    # probed back: the same server started again on its port is used again
    busy.start()
    await busy.wait_ready()
    deadline = time.monotonic() + 10
    while not {e["endpoint"]: e["up"] for e in gw.engine.endpoint_stats()}[busy.base] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert {e["endpoint"]: e["up"] for e in gw.engine.endpoint_stats()}[busy.base]
    metrics = gw.metrics.render().decode()
    assert f'voxgate_speech_endpoint_errors_total{{code="engine_error",endpoint="{busy.base}"}}' in metrics
    assert f'voxgate_speech_endpoint_up{{endpoint="{busy.base}"}} 1.0' in metrics
    await c.ws.close()


async def test_placement_by_in_flight_count_and_a_slowed_server_shows_in_its_first_byte_time(
    speech_servers, chained_gateway
):
    fast = await speech_servers("fast")
    slowed = await speech_servers(
        "slowed", {"first_packet_ms": 400, "capacity_x": 200, "ms_per_char": 40, "stream_rtf": 0.05}
    )
    gw = await chained_gateway([fast.base, slowed.base])
    clients = [await Client.connect(gw) for _ in range(4)]
    for i, c in enumerate(clients):
        await c.start()
        await c.send({"type": "text", "turn_id": f"t{i}", "text": TEXT, "final": True})
    for c in clients:
        done = await c.until("turn.done", timeout=15)
        assert done["interrupted"] is False and done["gaps"]["audible"] == 0
    stats = {e["endpoint"]: e for e in gw.engine.endpoint_stats()}
    assert stats[fast.base]["requests"] >= 2 and stats[slowed.base]["requests"] >= 2  # spread, not piled on one
    # compared within the run (the machine is shared): the slowed server's extra 400 ms shows in its first bytes
    assert (
        stats[slowed.base]["ttfb_p50_ms"] >= 400 and stats[slowed.base]["ttfb_p50_ms"] > stats[fast.base]["ttfb_p50_ms"]
    )
    for c in clients:
        await c.ws.close()


async def test_every_server_busy_is_overloaded_and_none_answering_is_engine_unavailable(
    speech_servers, chained_gateway
):
    full = await speech_servers("full", {**SLOW_SIM, "stream_rtf": 1.0}, server={"max_sessions": 1})
    gw = await chained_gateway([full.base])
    async with aiohttp.ClientSession() as http:  # someone else holds the server's only session
        holder = await http.post(
            f"{full.base}/audio/speech", json={"model": "x", "input": LONG, "response_format": "pcm"}
        )
        assert holder.status == 200
        stream = gw.engine.synthesize(SynthesisRequest(text="Hello.", tag="s1/t1/0"))
        with pytest.raises(EngineError) as err:
            async for _ in stream:
                pass
        assert err.value.code == "overloaded" and "429" in err.value.message and full.base in err.value.message
        holder.close()
    assert gw.engine.endpoint_stats()[0]["errors"] == {"overloaded": 1}

    # nothing listens on these ports: the gateway starts, says why it is not ready, and refuses with engine_unavailable
    dead = [f"http://127.0.0.1:{free_port()}/v1", f"http://127.0.0.1:{free_port()}/v1"]
    gw2 = await chained_gateway(dead, {"engine": {"connect_timeout_s": 0.5}})
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{gw2.port}/readyz") as resp:
            ready = await resp.json()
        assert resp.status == 503 and [e["up"] for e in ready["endpoints"]] == [False, False]
        assert "no speech server serves" in ready["reason"]
        async with http.post(
            f"http://127.0.0.1:{gw2.port}/v1/audio/speech", json={"model": "x", "input": "Hi."}
        ) as resp:
            body = await resp.json()
    assert resp.status == 503 and body["error"]["code"] == "engine_unavailable"


async def test_a_voice_the_server_lacks_is_refused_at_start_and_turn_mode_is_refused(speech_servers, tmp_path):
    up = await speech_servers("voices", voices={"anna": {}, "boris": {}})
    cfg = load_config(
        None,
        {
            "engine": {"kind": "openai-speech", "endpoints": [up.base]},
            "voices": {"anna": {}, "carol": {"speaker": "carla"}},
        },
    )
    gw = Gateway(cfg)
    with pytest.raises(ValueError, match=r"has no voice 'carla' \(it lists: .*anna.*boris"):
        await gw.start(host="127.0.0.1", port=0)
    await gw.stop()

    with pytest.raises(ConfigError, match="chunker.mode: turn is unsupported_mode with engine.kind: openai-speech"):
        load_config(None, {"engine": {"kind": "openai-speech", "endpoints": [up.base]}, "chunker": {"mode": "turn"}})
    with pytest.raises(ConfigError, match="http"):
        load_config(None, {"engine": {"kind": "openai-speech", "endpoints": ["tcp://127.0.0.1:5555"]}})

    gw = Gateway(
        load_config(None, {"engine": {"kind": "openai-speech", "endpoints": [up.base]}, "voices": {"anna": {}}})
    )
    await gw.start(host="127.0.0.1", port=0)
    try:
        with pytest.raises(EngineError) as err:
            gw.engine.open_turn(SynthesisRequest(text=""))
        assert err.value.code == "unsupported_mode" and "streaming text input" in err.value.message
        c = await Client.connect(gw)
        started = await c.start(mode="turn")
        assert started["mode"] == "sentence" and "streaming text input" in started["mode_note"]
        await c.send({"type": "text", "turn_id": "t1", "text": "Hello from anna.", "final": True})
        done = await c.until("turn.done")
        assert done["played_text"] == "Hello from anna."
        await c.ws.close()
    finally:
        await gw.stop()


async def test_a_bearer_token_from_the_environment_opens_a_locked_server(speech_servers, chained_gateway, monkeypatch):
    locked = await speech_servers("locked", server={"api_keys": ["s3cret-key-0123456789"]})
    monkeypatch.setenv("SPEECH_API_KEY", "s3cret-key-0123456789")
    gw = await chained_gateway([locked.base], {"engine": {"api_key_env": "SPEECH_API_KEY"}})
    assert gw.engine.endpoint_stats()[0]["flavour"] == "voxgate"  # its /v1/models answered with the token
    chunks = [c async for c in gw.engine.synthesize(SynthesisRequest(text="Hello.", tag="s/t/0"))]
    assert sum(len(c.pcm) for c in chunks) > 0

    monkeypatch.setenv("SPEECH_API_KEY", "wrong-key-0123456789")
    gw2 = await chained_gateway([locked.base], {"engine": {"api_key_env": "SPEECH_API_KEY"}})
    with pytest.raises(EngineError) as err:
        async for _ in gw2.engine.synthesize(SynthesisRequest(text="Hello.", tag="s/t/0")):
            pass
    assert err.value.code == "engine_error" and "(401)" in err.value.message and "API key" in err.value.message
    monkeypatch.delenv("SPEECH_API_KEY")
    with pytest.raises(ValueError, match="api_key_env names SPEECH_API_KEY, which is not set"):
        await chained_gateway([locked.base], {"engine": {"api_key_env": "SPEECH_API_KEY"}})


async def test_serve_speech_endpoint_runs_a_gateway_in_front_of_the_server(speech_servers, tmp_path):
    import subprocess
    import sys

    from tests.openai_speech.servers import ROOT

    up = await speech_servers("behind")
    port = free_port()
    gw = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--config",
            "configs/simulated.yaml",
            "--speech-endpoint",
            up.base,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ready = None
        async with aiohttp.ClientSession() as http:
            for _ in range(150):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
                        ready = await resp.json()
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            assert ready and ready["engine"] == "openai-speech" and ready["endpoints"][0]["endpoint"] == up.base
            async with http.post(
                f"http://127.0.0.1:{port}/v1/audio/speech",
                json={"model": "x", "input": "Hello.", "response_format": "pcm"},
            ) as resp:
                assert resp.status == 200 and len(await resp.read()) > 4800
    finally:
        gw.terminate()
        gw.wait(15)
    both = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--speech-endpoint",
            up.base,
            "--engine-endpoint",
            "ipc:///tmp/x.sock",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert both.returncode == 2 and "give one" in both.stdout + both.stderr
