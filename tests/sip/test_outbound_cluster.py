"""In a call plane an outbound call is owned by the node that dialled it: `POST /v1/calls` on node A claims the
call id for A before the INVITE goes out, so the agent's control socket that lands on node B is forwarded to A
(as for an inbound SIP call) and sees the call's progress and outcome, live or replayed after the fact. Real
redis-server, two gateway processes, SIPp as the far end."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from tests.cluster.harness import HAProxy, Node, Redis, free_port, http_json
from tests.conftest import CLUSTER_SECRET_ENV
from tests.sip.sipp import free_udp_port, require, run_sipp

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


def config(redis_url: str, sip_port: int, far_port: int) -> dict:
    trunk = {"name": "far", "address": f"127.0.0.1:{far_port}", "from": "sip:+15550100@voxgate.test"}
    return {
        "server": {"limits": {"drain_timeout_s": 1}},
        "engine": {"kind": "simulated"},
        "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
        "playout": {"prebuffer_ms": 40},
        "telephony": {"unknown_call_timeout_s": 10},
        "sip": {
            "port": sip_port,
            "host": "127.0.0.1",
            "allow": ["127.0.0.1"],
            "rtp_ports": "46000-46999",
            "trunks": [trunk],
        },
        "cluster": {"redis_url": redis_url, "claim_ttl_s": 3.0, "secret_env": CLUSTER_SECRET_ENV},
    }


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    require("redis-server")  # under CI=true a missing one fails the test
    require("haproxy")
    tmp = tmp_path_factory.mktemp("outbound-plane")
    redis = Redis(tmp)
    redis.start()
    far = free_udp_port()
    nodes = []
    for name, host in (("o1", "127.0.0.2"), ("o2", "127.0.0.3")):
        node = Node(name, host, tmp, config(redis.url, free_port("127.0.0.1"), far))
        node.start(wait=False)
        nodes.append(node)
    for node in nodes:
        node.wait_ready()
    balancer = HAProxy(tmp, nodes)
    balancer.start()
    yield redis, nodes, far, balancer
    balancer.stop()
    for node in nodes:
        node.stop()
    redis.stop()


def place(node: Node) -> tuple[int, dict]:
    body = json.dumps({"to": "+15551234567", "trunk": "far"}).encode()
    return http_json(node.url + "/v1/calls", "POST", body, {"Content-Type": "application/json"})


async def place_call(node: Node) -> str:
    status, answer = await asyncio.to_thread(place, node)
    assert status == 201, answer
    return answer["call_id"]


async def events_until(ws, until: tuple[str, ...], timeout: float = 15.0) -> list[dict]:
    events = []
    async with asyncio.timeout(timeout):
        while True:
            events.append(json.loads(await ws.recv()))
            if events[-1]["type"] in until:
                return events


async def test_the_agent_on_another_node_gets_the_call_the_dialling_node_placed(plane, tmp_path):
    redis, (dialler, other), far, balancer = plane
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer.xml", listen_port=far, fields=["bye"]))
    await asyncio.sleep(0.5)
    forwards = other.metric("voxgate_cluster_forwards_total")
    try:
        call_id = await place_call(dialler)
        assert redis.client().get(f"voxgate:call:{call_id}") == dialler.name.encode()  # claimed before the INVITE
        async with websockets.connect(other.ws + "/v1/control") as ws:  # the agent lands on the other node
            await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            events = await events_until(ws, ("call.answered", "call.failed", "error"))
            types = [e["type"] for e in events]
            assert types[0] == "call.attached" and types[-1] == "call.answered", events
            assert "call.progress" in types
            assert events[-1]["sip"]["direction"] == "outbound"
            turn = {"type": "text", "turn_id": "t1", "text": "Hello from the dialler.", "final": True}
            await ws.send(json.dumps(turn))
            done = (await events_until(ws, ("turn.done",)))[-1]
            assert done["played_ms"] > 200  # played on the dialling node, into the far end's RTP
            await ws.send(json.dumps({"type": "session.end"}))
    finally:
        run = await sipp  # the far port is free again for the next test
    run.assert_ok()  # our BYE reached SIPp: the call ran end to end
    assert other.metric("voxgate_cluster_forwards_total") > forwards


async def test_a_late_agent_on_another_node_learns_how_the_call_failed(plane, tmp_path):
    redis, (dialler, other), far, balancer = plane
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_busy.xml", listen_port=far))
    await asyncio.sleep(0.5)
    try:
        call_id = await place_call(dialler)
    finally:
        run = await sipp
    run.assert_ok()  # the 486 was ACKed: the call failed before any agent came
    await asyncio.sleep(4.0)  # past the claim's TTL (3 s): only the dialler's heartbeat kept it
    async with websockets.connect(f"{other.ws}/v1/control/{call_id}") as ws:  # forwarded before the upgrade
        await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
        events = await events_until(ws, ("call.failed", "error"))
        assert (events[-1].get("code"), events[-1].get("status")) == ("busy", 486), events
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "session.ended"
    assert redis.client().get(f"voxgate:call:{call_id}") == dialler.name.encode()  # kept for the next late agent


async def test_the_claim_outlives_the_session_of_an_agent_that_saw_the_call_fail(plane, tmp_path):
    """The session of the agent attached on the dialler ends with the failed call; the call's id must stay claimed
    (not released with the session) while the outcome is kept, or a later agent elsewhere would claim it itself."""
    redis, (dialler, other), far, balancer = plane
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_busy.xml", listen_port=far))
    await asyncio.sleep(0.5)
    try:
        call_id = await place_call(dialler)
        async with websockets.connect(dialler.ws + "/v1/control") as ws:
            await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            assert (await events_until(ws, ("call.failed", "error")))[-1].get("code") == "busy"
            await events_until(ws, ("session.ended",))
    finally:
        (await sipp).assert_ok()
    key = f"voxgate:call:{call_id}"
    for _ in range(30):  # longer than a heartbeat (1 s here), which would re-make a released claim
        assert redis.client().get(key) == dialler.name.encode()
        await asyncio.sleep(0.05)
    forwards = other.metric("voxgate_cluster_forwards_total")
    for _ in range(2):  # through a round-robin balancer: one of the two lands on the other node
        async with websockets.connect(balancer.rr + "/v1/control") as ws:
            await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            assert (await events_until(ws, ("call.failed", "error")))[-1].get("code") == "busy"
    assert other.metric("voxgate_cluster_forwards_total") == forwards + 1


async def test_without_redis_the_post_is_refused_with_cluster_unavailable(plane):
    redis, (dialler, _), _, _ = plane
    redis.stop()
    try:
        status, answer = await asyncio.to_thread(place, dialler)
        assert (status, answer.get("code")) == (503, "cluster_unavailable"), answer
    finally:
        redis.start()  # the same port: the nodes' heartbeats find it again
