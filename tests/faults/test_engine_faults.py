"""The engine failing on purpose (SimulatedEngine.inject_fault): raising mid-step, hanging, dying.

A real gateway on loopback, real native-WS clients. Whatever the engine does,
the affected chunk fails with `engine_error`, its turn still ends
(`turn.done`: no session hangs), and the gateway says whether it can take
new calls: it goes on after a step that raised; while the worker hangs or
after it died, /readyz answers 503 and `session.start` gets `engine_unavailable`.
"""

from __future__ import annotations

import asyncio

import aiohttp

from tests.conftest import Client

LONG = "This reply is long enough to still be speaking when the engine fails underneath it, on purpose. " * 2
SLOW = {"simulated": {"stream_rtf": 0.5, "packet_ms": 80, "first_packet_ms": 20}, "engine": {"stall_timeout_s": 0.8}}


async def _ready(gw) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{gw.port}/readyz") as r:
        return r.status, await r.json()


async def _speaking(gw) -> Client:
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
    await c.until("audio.start", timeout=10)
    return c


async def _engine_error_and_turn_end(c: Client) -> tuple[dict, dict]:
    err = await c.until("error", timeout=10)
    done = await c.until("turn.done", turn_id="t1", timeout=10)
    return err, done


async def test_a_step_that_raises_fails_its_chunks_and_the_engine_goes_on(start_gateway):
    gw = await start_gateway(SLOW)
    c = await _speaking(gw)
    gw.engine.inject_fault("raise")
    err, done = await _engine_error_and_turn_end(c)
    assert err["code"] == "engine_error" and "step failed" in err["message"]
    assert done["played_ms"] > 0
    assert (await _ready(gw))[0] == 200
    await c.send({"type": "text", "turn_id": "t2", "text": "And the next turn plays.", "final": True})
    done2 = await c.until("turn.done", turn_id="t2", timeout=10)
    assert done2["gaps"]["audible"] == 0 and done2["played_text"] == "And the next turn plays."
    await c.close()


async def test_a_hung_engine_fails_the_chunk_and_readyz_says_so_until_it_recovers(start_gateway):
    gw = await start_gateway(SLOW)
    gw.engine.stall_after_s = 0.5
    c = await _speaking(gw)
    gw.engine.inject_fault("hang", seconds=3.0)
    err, done = await _engine_error_and_turn_end(c)
    assert (
        err["code"] == "engine_error" and "stall_timeout_s" in err["message"]
    )  # the watchdog, not the engine, ended it
    status, body = await _ready(gw)
    assert status == 503 and "hung" in body["engine_health"]
    late = await Client.connect(gw)
    await late.send({"type": "session.start"})
    refused = await late.until("error")
    assert refused["code"] == "engine_unavailable"
    for _ in range(60):  # the hang ends after 3 s: the engine serves again
        if (await _ready(gw))[0] == 200:
            break
        await asyncio.sleep(0.1)
    assert (await _ready(gw))[0] == 200
    await late.start()
    await late.send({"type": "text", "turn_id": "a", "text": "Back again.", "final": True})
    assert (await late.until("turn.done", turn_id="a"))["played_text"] == "Back again."
    await c.close()
    await late.close()


async def test_a_dead_engine_worker_fails_what_it_held_and_new_sessions_are_refused(start_gateway):
    gw = await start_gateway(SLOW)
    c = await _speaking(gw)
    other = await Client.connect(gw)
    await other.start()  # a session that was idle when the engine died
    gw.engine.inject_fault("die")
    err, done = await _engine_error_and_turn_end(c)
    assert err["code"] == "engine_error" and "worker stopped" in err["message"]
    status, body = await _ready(gw)
    assert status == 503 and "worker stopped" in body["engine_health"]
    await other.send({"type": "text", "turn_id": "x", "text": "Anyone there?", "final": True})
    assert (await other.until("error"))["code"] == "engine_unavailable"
    assert (await other.until("turn.done", turn_id="x"))["played_ms"] == 0  # its turn ends too, silent
    late = await Client.connect(gw)
    await late.send({"type": "session.start"})
    assert (await late.until("error"))["code"] == "engine_unavailable"
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{gw.port}/metrics") as r:
        assert r.status == 200  # the gateway itself still serves
    for client in (c, other, late):
        await client.close()
