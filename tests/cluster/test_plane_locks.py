"""Two in-process gateways sharing a real redis-server: the plane-wide per-IP rate, and an AudioSocket leg
forwarded to an owner whose `audiosocket_allow` would refuse the forwarding node (the signed hop frame lets it in)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import websockets

from gateway.app import Gateway
from tests.conftest import CLUSTER_SECRET_ENV
from tests.cluster.harness import NEEDS, Redis
from tests.telephony.clients import AudioSocketClient, Control
from tests.telephony.conftest import FAST, merge, started_gateways

pytestmark = pytest.mark.skipif(
    bool(NEEDS), reason=f"needs {', '.join(NEEDS)} (scripts/install_test_deps.sh installs them)"
)


@pytest.fixture
async def pair(tmp_path):
    redis = Redis(tmp_path)
    redis.start()
    async with started_gateways() as start:

        async def make(host: str, name: str, **extra) -> Gateway:
            own = {
                "server": {"host": host},
                "cluster": {
                    "redis_url": redis.url,
                    "node_id": name,
                    "claim_ttl_s": 3,
                    "secret_env": CLUSTER_SECRET_ENV,
                },
            }
            return await start(merge(merge(FAST, own), extra))

        yield make
    redis.stop()


async def test_the_per_ip_rate_counts_every_node(pair):
    limits = {"server": {"limits": {"connections_per_ip_per_s": 3}}}
    g1, g2 = await pair("127.0.0.2", "a", **limits), await pair("127.0.0.3", "b", **limits)
    answers = []
    for gw in (g1, g2, g1, g2):  # four in well under a second, two on each node: each alone would take them
        ws = await websockets.connect(f"ws://{gw.config.server.host}:{gw.port}/v1/ws", local_addr=("127.0.0.9", 0))
        try:
            await ws.send(json.dumps({"type": "session.start"}))
        except websockets.ConnectionClosed:
            pass  # refused: the event came first, then the close
        answers.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
        await ws.close()
    assert [a["type"] for a in answers[:3]] == ["session.started"] * 3
    assert answers[3]["type"] == "error" and answers[3]["code"] == "rate_limited"


async def test_the_per_ip_rate_is_a_sliding_second_not_a_calendar_one(pair, monkeypatch):
    """Three opens late in one second and a fourth early in the next are four within a second: refused. (A counter
    per calendar second let it through, and this file's test above failed whenever its four crossed a boundary.)"""
    import gateway.cluster.plane as plane_module

    plane = (await pair("127.0.0.2", "a")).core.cluster
    now = [1_000_000.90]
    monkeypatch.setattr(plane_module.time, "time", lambda: now[0])
    for at in (1_000_000.90, 1_000_000.92, 1_000_000.95):
        now[0] = at
        assert await plane.peer_open("10.9.9.9", 0, 3) is None
    now[0] = 1_000_001.10  # a new calendar second, 0.2 s after the first open
    assert await plane.peer_open("10.9.9.9", 0, 3) == "rate"
    now[0] = 1_000_001.91  # a second after the first open: it no longer counts
    assert await plane.peer_open("10.9.9.9", 0, 3) is None
    assert await plane.peer_open("10.9.9.8", 0, 3) is None  # another address has its own second


async def test_an_audiosocket_hop_passes_an_owner_that_would_refuse_the_forwarding_node(pair):
    owner = await pair("127.0.0.2", "owner", telephony={"audiosocket_port": 0, "audiosocket_allow": ["10.0.0.0/8"]})
    relay = await pair("127.0.0.3", "relay", telephony={"audiosocket_port": 0})
    call = uuid.uuid4()
    control = Control(await websockets.connect(f"ws://127.0.0.2:{owner.port}/v1/control"))
    await control.attach(str(call))  # the call is the owner's
    reader, writer = await asyncio.open_connection("127.0.0.2", owner.audiosocket.port)  # straight to it: refused
    writer.write(bytes([0x01, 0, 16]) + call.bytes)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    reader, writer = await asyncio.open_connection("127.0.0.3", relay.audiosocket.port)  # through the relay: let in
    asterisk = AudioSocketClient(reader, writer, call)
    asterisk.send(0x01, call.bytes)
    assert (await control.expect("call.media", timeout=5))["leg"] == "audiosocket"
    await control.send({"type": "text", "turn_id": "t1", "text": "Hello through the hop.", "final": True})
    kind, payload, _ = await asterisk.read(5)
    assert kind == 0x10 and len(payload) == 320
    assert relay.metrics.cluster_forwards.labels(door="audiosocket")._value.get() == 1
    asterisk.close()


async def test_uploads_lost_with_a_redis_restart_are_shared_again_and_a_deletion_reaches_every_node(pair, tmp_path):
    import aiohttp

    from tests.cluster.harness import wait_until
    from tests.cluster.test_plane import reference_wav

    g1 = await pair("127.0.0.2", "keeper", server={"voices_dir": str(tmp_path / "voices")})
    g2 = await pair("127.0.0.3", "other")
    form = aiohttp.FormData()
    form.add_field("name", "kept")
    form.add_field("x_vector_only", "true")
    form.add_field("audio", reference_wav(), filename="ref.wav", content_type="audio/wav")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.2:{g1.port}/v1/voices", data=form) as r:
            assert r.status == 201, await r.text()

        async def names(gw) -> set[str]:
            async with http.get(f"http://{gw.config.server.host}:{gw.port}/v1/voices") as r:
                return {v["name"] for v in (await r.json())["voices"]}

        assert "kept" in await names(g2)
        import redis as redis_lib

        r = redis_lib.Redis.from_url(g1.config.cluster.redis_url)
        r.flushall()  # what a restarted Redis without persistence holds: nothing
        await wait_until(lambda: r.sismember("voxgate:voices", "kept"), timeout=5)  # the keeper shared it again
        assert "kept" in await names(g2) and "kept" in await names(g1)
        async with http.delete(f"http://127.0.0.3:{g2.port}/v1/voices/kept") as resp:  # deleted on purpose, elsewhere
            assert resp.status == 200
        assert "kept" not in await names(g1)  # the tombstone: the keeper drops it rather than share it again
        await asyncio.sleep(1.2)  # a heartbeat later it stays gone
        assert not r.sismember("voxgate:voices", "kept") and "kept" not in await names(g1)
        r.close()


async def test_a_wildcard_audiosocket_bind_is_advertised_at_the_nodes_own_address(pair):
    """A pod binds AudioSocket on 0.0.0.0 and every pod uses the same port: the plane must carry the pod's
    own address (from cluster.advertise_url), or a forwarding node would dial 0.0.0.0 and reach itself."""
    from gateway.cluster.plane import reachable_audiosocket

    node = await pair(
        "127.0.0.2",
        "wild",
        telephony={"audiosocket_port": 0, "audiosocket_host": "0.0.0.0"},
        cluster={"advertise_url": "http://127.0.0.6:8080"},
    )
    owner = await node.core.cluster.owner("wild")
    assert owner.audiosocket == f"127.0.0.6:{node.audiosocket.port}"
    named = await pair("127.0.0.3", "named", telephony={"audiosocket_port": 0})  # a real bind host stays as bound
    assert (await named.core.cluster.owner("named")).audiosocket == f"127.0.0.3:{named.audiosocket.port}"
    assert reachable_audiosocket(":::9092", "http://[fd00::7]:8080") == "fd00::7:9092"
    assert reachable_audiosocket("10.0.0.9:9092", "http://pod-a:8080") == "10.0.0.9:9092"
