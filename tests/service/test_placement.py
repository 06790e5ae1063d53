"""Several engines behind one RemoteEngine: placement by reported load, stickiness per session, refusals moving
to the next engine (overloaded only when every engine refuses), an engine that leaves and comes back, cloned
voices reaching every engine (also one that connects later).

Engine servers in this process on loopback tcp:// (real sockets, CURVE, the real wire); the engines are
SimulatedEngines. Process deaths are tests/service/test_remote_faults.py's.
"""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("zmq")

from tts import EngineError, SynthesisRequest, VoiceClone  # noqa: E402
from tts.service.remote import RemoteEngine  # noqa: E402
from tts.service.server import EngineServer  # noqa: E402
from tts.simulated import SimulatedEngine, SimulatedSettings  # noqa: E402
from tests.engine.test_engine_contract import until, wav_bytes  # noqa: E402

SECRET = b"placement-test-secret-0123456789"


class Node:
    def __init__(self, **sim):
        base = dict(first_packet_ms=0, capacity_x=200, ms_per_char=20, stream_rtf=1.0, packet_ms=80)
        self.engine = SimulatedEngine(SimulatedSettings(**{**base, **sim}))
        self.server: EngineServer | None = None
        self.endpoint = "tcp://127.0.0.1:0"

    async def start(self) -> "Node":
        if self.engine._task is None:
            await self.engine.start()
        self.server = EngineServer(self.engine, self.endpoint, secret=SECRET, heartbeat_s=1.0)
        await self.server.start()
        self.endpoint = self.server.endpoint  # the same port when started again
        return self

    async def stop_server(self) -> None:
        await self.server.close()
        self.server = None

    @property
    def streams(self) -> int:
        return self.server.open_streams if self.server else 0


@pytest.fixture
async def cluster():
    made: list = []

    async def make(*nodes: Node) -> RemoteEngine:
        for node in nodes:
            await node.start()
        remote = RemoteEngine([n.endpoint for n in nodes], secret=SECRET, connect_timeout_s=10)
        await remote.start()
        deadline = time.monotonic() + 10
        while not all(link.ready for link in remote.links) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        made.append((remote, nodes))
        return remote

    yield make
    for remote, nodes in made:
        await remote.close()
        for node in nodes:
            if node.server:
                await node.server.close()
            await node.engine.close()


async def first(stream, timeout: float = 10.0):
    return await asyncio.wait_for(anext(aiter(stream)), timeout)


def req(session: str, text: str = "x" * 200) -> SynthesisRequest:
    return SynthesisRequest(text=text, tag=f"{session}/t/0")


async def test_sessions_stick_to_their_engine_and_new_sessions_go_to_the_less_loaded(cluster):
    a, b = Node(), Node()
    remote = await cluster(a, b)
    s1 = [remote.synthesize(req("s1")) for _ in range(3)]  # one session: all on one engine
    await asyncio.gather(*(first(s) for s in s1))
    busy, idle = (a, b) if a.streams else (b, a)
    assert busy.streams == 3 and idle.streams == 0
    await until(
        lambda: all(l.load.active + l.load.queued >= (3 if l.endpoint == busy.endpoint else 0) for l in remote.links), 3
    )
    s2 = remote.synthesize(req("s2"))  # a new session: the engine with room
    await first(s2)
    assert idle.streams == 1
    more = remote.synthesize(req("s1"))  # the first session stays where it is, though busier
    await first(more)
    assert busy.streams == 4 and remote.counters["sticky"] >= 3
    for s in s1 + [s2, more]:
        s.cancel()


async def beat(remote: RemoteEngine) -> None:
    """Until every engine has reported its load again (what was placed is counted in it from then)."""
    since = time.monotonic()
    assert await until(lambda: all(l.load_at > since for l in remote.links), 5)


async def test_an_engine_that_refuses_passes_the_request_to_one_with_room(cluster):
    a, b = Node(max_queued=1), Node(max_queued=5)
    remote = await cluster(a, b)
    s0 = remote.synthesize(req("s0"))
    await first(s0)
    full, roomy = (a, b) if a.streams else (b, a)
    await beat(remote)  # its report does not say it is full (its one request runs; none waits)
    s1 = remote.synthesize(req("s0"))  # sticks to the full engine, which refuses: it moves on
    await first(s1)
    assert roomy.streams == 1 and full.streams == 1
    assert sum(l.counters["failed_over"] for l in remote.links) == 1
    for s in (s0, s1):
        s.cancel()


async def test_only_when_every_engine_refuses_the_caller_gets_overloaded(cluster):
    a, b = Node(max_queued=1), Node(max_queued=1)
    remote = await cluster(a, b)
    held = []
    for name in ("s0", "s1"):
        held.append(remote.synthesize(req(name)))
        await first(held[-1])
        await beat(remote)
    assert a.streams == 1 and b.streams == 1  # spread by load
    with pytest.raises(EngineError) as refused:
        await first(remote.synthesize(req("s2")))  # refused by one, then by the other
    assert refused.value.code == "overloaded"
    assert sum(l.counters["failed_over"] for l in remote.links) == 1
    for s in held:
        s.cancel()


async def test_an_engine_that_leaves_fails_its_streams_and_one_that_returns_is_used_again(cluster):
    a, b = Node(), Node()
    remote = await cluster(a, b)
    s = remote.synthesize(req("s1"))
    await first(s)
    gone, stays = (a, b) if a.streams else (b, a)
    await gone.stop_server()
    with pytest.raises(EngineError) as failed:
        async for _ in s:
            pass
    assert failed.value.code == "engine_error"
    again = remote.synthesize(req("s1"))  # the session's next request: the other engine
    await first(again)
    assert stays.streams == 1 and remote.health() is None
    again.cancel()
    await gone.start()  # back on its address
    link = next(l for l in remote.links if l.endpoint == gone.endpoint)
    assert await until(lambda: link.serving, 10)
    await until(lambda: stays.streams == 0)
    s3 = remote.synthesize(req("s3"))  # a new session: the returned engine is the idle one
    await first(s3)
    assert gone.streams == 1
    s3.cancel()


async def test_a_cloned_voice_reaches_every_engine_also_one_that_connects_later():
    a, b = await Node().start(), await Node().start()
    endpoint_b = b.endpoint
    await b.stop_server()  # b is down while the voice is added
    remote = RemoteEngine([a.endpoint, endpoint_b], secret=SECRET, connect_timeout_s=5)
    await remote.start()
    try:
        info = await remote.add_voice(VoiceClone("anna", wav_bytes(), ref_text="Hello, this is Anna."))
        assert info["name"] == "anna" and [v["name"] for v in a.engine.cloned_voices()] == ["anna"]
        assert b.engine.cloned_voices() == []
        await b.start()
        link_b = next(l for l in remote.links if l.endpoint == endpoint_b)
        assert await until(lambda: link_b.ready, 10)
        assert [v["name"] for v in b.engine.cloned_voices()] == ["anna"]  # replayed before it took requests
    finally:
        await remote.close()
        for node in (a, b):
            if node.server:
                await node.server.close()
            await node.engine.close()


async def test_a_stuck_engine_is_taken_out_of_placement_until_it_recovers(cluster):
    a, b = Node(), Node()
    remote = await cluster(a, b)
    s = remote.synthesize(req("s1"))
    await first(s)
    stuck, fine = (a, b) if a.streams else (b, a)
    stuck.engine.stall_after_s = 0.3
    stuck.engine.inject_fault("hang", seconds=2.0)  # its device makes no step for 2 s
    link = next(l for l in remote.links if l.endpoint == stuck.endpoint)
    assert await until(lambda: not link.serving, 5)  # its beats carry the engine's own health
    assert "hung" in link.load.health or "no step" in link.load.health  # the engine's own words
    moved = remote.synthesize(req("s1"))  # the session's next request: the healthy engine
    await first(moved)
    assert fine.streams == 1 and remote.health() is None
    assert await until(lambda: link.serving, 10)  # the hang ends: placed on again
    for x in (s, moved):
        x.cancel()


async def test_a_turn_with_no_engine_serving_is_engine_unavailable_not_unsupported(cluster):
    """Turn mode when every engine is gone: the same `engine_unavailable` as a sentence chunk gets (it said
    `unsupported_mode`, as if the engines had no turn mode)."""
    node = Node()
    remote = await cluster(node)
    assert remote.supports_turns
    await node.stop_server()
    assert await until(lambda: not any(link.serving for link in remote.links))
    with pytest.raises(EngineError) as err:
        remote.open_turn(req("s1"))
    assert err.value.code == "engine_unavailable", err.value
    with pytest.raises(EngineError) as err:
        remote.synthesize(req("s1"))
    assert err.value.code == "engine_unavailable"
