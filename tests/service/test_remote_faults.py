"""Engines as their own processes, broken for real: SIGKILL mid-turn, none left, restarted; a gateway killed.

Real `voxgate engine` processes on loopback tcp:// (CURVE, shared secret), a real gateway with
`engine.kind: remote`, real native-WS clients. The stall watchdog is set long (10 s) so that what ends a chunk
is the link noticing the engine is gone, not the watchdog.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import aiohttp
import pytest
import yaml

pytest.importorskip("zmq")

from tests.conftest import Client  # noqa: E402
from tests.service.engines import ROOT, SECRET, EngineProcess, env, free_port  # noqa: E402

LONG = "This reply is long enough to still be speaking when its engine is killed underneath it, on purpose. " * 2
STALL_S = 10.0


async def ready(gw_port: int) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{gw_port}/readyz") as r:
        return r.status, await r.json()


async def wait_for(cond, timeout: float, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await cond()
        if value:
            return value
        await asyncio.sleep(step)
    return await cond()


@pytest.fixture
def engines(tmp_path):
    started: list[EngineProcess] = []

    def make(name: str, **kw) -> EngineProcess:
        e = EngineProcess(tmp_path, name, **kw)
        started.append(e)
        return e.start()

    yield make
    for e in started:
        e.stop()


def remote(*endpoints: str) -> dict:
    return {
        "engine": {"kind": "remote", "endpoints": list(endpoints), "stall_timeout_s": STALL_S, "connect_timeout_s": 10}
    }


async def test_a_killed_engine_fails_its_chunks_at_once_the_session_moves_on_and_a_restart_is_found(
    engines, start_gateway, monkeypatch
):
    monkeypatch.setenv("VOXGATE_ENGINE_SECRET", SECRET)
    a, b = engines("a"), engines("b")
    await asyncio.gather(a.wait_ready(), b.wait_ready())
    gw = await start_gateway(remote(a.endpoint, b.endpoint))
    assert (await ready(gw.port))[0] == 200

    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
    await c.until("audio.start", timeout=10)
    holder, other = (a, b) if await asyncio.to_thread(a.streams) >= 1 else (b, a)
    # the session's chunks in flight (two) all sit on one engine: it sticks to it
    assert await asyncio.to_thread(holder.streams) >= 1 and await asyncio.to_thread(other.streams) == 0

    killed_at = time.monotonic()
    holder.kill(signal.SIGKILL)
    err = await c.until("error", timeout=STALL_S)
    noticed_s = time.monotonic() - killed_at
    print(f"engine SIGKILL -> engine_error at the client: {noticed_s * 1000:.0f} ms")
    assert err["code"] == "engine_error" and "lost the connection" in err["message"], err
    assert noticed_s < STALL_S / 2, noticed_s  # the link saw it, not the stall watchdog (measured: well under 1 s)
    done = await c.until("turn.done", turn_id="t1", timeout=10)
    assert done["played_ms"] > 0

    # the same session's next turn plays on the engine that is left
    await c.send({"type": "text", "turn_id": "t2", "text": "And the next turn plays elsewhere.", "final": True})
    done2 = await c.until("turn.done", turn_id="t2", timeout=20)
    assert done2["played_text"] == "And the next turn plays elsewhere." and not done2["interrupted"]
    assert (await ready(gw.port))[0] == 200

    # no engine left: not ready, and new sessions are refused with engine_unavailable
    other.kill(signal.SIGKILL)
    status, body = await wait_for(lambda: _not_ready(gw.port), 5)
    assert status == 503 and "no engine serves" in body["engine_health"]
    late = await Client.connect(gw)
    await late.send({"type": "session.start"})
    assert (await late.until("error"))["code"] == "engine_unavailable"

    # an engine started again on its address is found without a gateway restart
    holder.start()
    assert await wait_for(lambda: _is_ready(gw.port), 30)
    fresh = await Client.connect(gw)
    await fresh.start()
    await fresh.send({"type": "text", "turn_id": "r", "text": "Back again.", "final": True})
    assert (await fresh.until("turn.done", turn_id="r", timeout=20))["played_text"] == "Back again."
    for client in (c, late, fresh):
        await client.close()


async def _not_ready(port: int):
    status, body = await ready(port)
    return (status, body) if status == 503 else None


async def _is_ready(port: int):
    return (await ready(port))[0] == 200


async def test_a_killed_gateway_has_its_streams_freed_within_one_heartbeat(engines, tmp_path):
    e = engines("e", heartbeat_s=1.0)
    await e.wait_ready()
    port = free_port()
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "server": {"host": "127.0.0.1", "port": port},
                **remote(e.endpoint),
                "voices": {"default": {"language": "en"}},
            }
        )
    )
    gw = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        class _Port:  # what Client.connect reads
            pass

        target = _Port()
        target.port = port
        assert await wait_for(lambda: _is_ready_quiet(port), 60, 0.2)
        c = await Client.connect(target)
        await c.start()
        await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        await c.until("audio.start", timeout=10)
        assert await asyncio.to_thread(e.streams) >= 1
        killed_at = time.monotonic()
        gw.send_signal(signal.SIGKILL)
        gw.wait(10)

        async def freed():
            return await asyncio.to_thread(e.streams) == 0

        assert await wait_for(freed, 3 * e.heartbeat_s, 0.02)
        freed_s = time.monotonic() - killed_at
        print(f"gateway SIGKILL -> its streams freed on the engine: {freed_s * 1000:.0f} ms")
        assert freed_s <= e.heartbeat_s * 1.5, freed_s  # within one heartbeat (a quarter beat of slack to notice)
        assert await asyncio.to_thread(e.metric, 'voxgate_engine_requests_total{outcome="expired"}') >= 1
    finally:
        if gw.poll() is None:
            gw.kill()
            gw.wait()


async def _is_ready_quiet(port: int) -> bool:
    try:
        return await _is_ready(port)
    except aiohttp.ClientError:
        return False


async def test_sigterm_drains_the_engine_running_streams_finish_new_ones_go_elsewhere_then_it_exits(engines):
    from tts import EngineError, SynthesisRequest
    from tts.service.remote import RemoteEngine

    fast = {"first_packet_ms": 0, "capacity_x": 50, "ms_per_char": 20, "stream_rtf": 0.5, "packet_ms": 80}
    a, b = engines("a", simulated=fast), engines("b", simulated=fast)
    await asyncio.gather(a.wait_ready(), b.wait_ready())
    remote = RemoteEngine([a.endpoint, b.endpoint], secret=SECRET.encode(), connect_timeout_s=10)
    await remote.start()
    try:
        assert await wait_for(lambda: _all_serving(remote), 10)
        running = remote.synthesize(SynthesisRequest(text="x" * 300, tag="s1/t/0"))  # 6 s of audio, made in 3 s
        it = aiter(running)
        await asyncio.wait_for(anext(it), 10)
        holder, other = (a, b) if running._placement[0].endpoint == a.endpoint else (b, a)
        holder.proc.terminate()  # SIGTERM
        assert await wait_for(lambda: _draining(holder), 5)
        later = remote.synthesize(SynthesisRequest(text="x" * 20, tag="s1/t/1"))  # same session: not the draining one
        chunks = [c async for c in later]
        assert (
            chunks[-1].is_last
            and await asyncio.to_thread(other.metric, 'voxgate_engine_requests_total{outcome="completed"}') == 1
        )
        rest = [c async for c in it]  # the running stream finished on the draining engine
        assert rest and rest[-1].is_last
        assert await asyncio.to_thread(holder.proc.wait, 10) == 0
        other.kill(signal.SIGKILL)
        with pytest.raises(EngineError) as refused:
            await wait_for(lambda: _refused(remote), 5)
            remote.synthesize(SynthesisRequest(text="anyone?"))
        assert refused.value.code == "engine_unavailable"
    finally:
        await remote.close()


async def _all_serving(remote) -> bool:
    return all(link.serving for link in remote.links)


async def _draining(e) -> bool:
    body = await asyncio.to_thread(e.ready)
    return bool(body) and not body["ready"] and "draining" in body.get("reason", "")


async def _refused(remote) -> bool:
    return remote.health() is not None
