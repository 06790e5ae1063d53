"""In a call plane, a SIP call is owned by the node that answered it: the agent's control socket that lands on
another node is forwarded there, and RTP never leaves it. An agent that attached first elsewhere gets the
INVITE refused (RTP cannot be forwarded), with the reason."""

from __future__ import annotations

import json
import uuid

import pytest
import websockets

from tests.cluster.harness import Node, Redis, free_port
from tests.conftest import CLUSTER_SECRET_ENV
from tests.sip.sipp import require
from tests.sip.udp_caller import UdpCaller

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


def config(redis_url: str, sip_port: int) -> dict:
    return {
        "server": {"limits": {"drain_timeout_s": 1}},
        "engine": {"kind": "simulated"},
        "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
        "playout": {"prebuffer_ms": 40},
        "telephony": {"unknown_call_timeout_s": 10},
        "sip": {"port": sip_port, "host": "127.0.0.1", "allow": ["127.0.0.1"], "rtp_ports": "45000-45999"},
        "cluster": {"redis_url": redis_url, "claim_ttl_s": 3.0, "secret_env": CLUSTER_SECRET_ENV},
    }


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    require("redis-server")  # under CI=true a missing one fails the test
    tmp = tmp_path_factory.mktemp("sip-plane")
    redis = Redis(tmp)
    redis.start()
    nodes = []
    for name, host in (("s1", "127.0.0.2"), ("s2", "127.0.0.3")):
        sip_port = free_port("127.0.0.1")
        node = Node(name, host, tmp, config(redis.url, sip_port))
        node.sip_port = sip_port
        node.start(wait=False)
        nodes.append(node)
    for node in nodes:
        node.wait_ready()
    yield nodes
    for node in nodes:
        node.stop()
    redis.stop()


async def control_events(ws, until: str, timeout: float = 10.0) -> list[dict]:
    import asyncio

    events = []
    async with asyncio.timeout(timeout):
        while True:
            events.append(json.loads(await ws.recv()))
            if events[-1]["type"] == until:
                return events


async def test_the_agent_on_another_node_is_forwarded_to_the_node_that_answered(two_nodes):
    answering, other = two_nodes
    caller = UdpCaller()
    try:
        call_id = f"plane-{uuid.uuid4().hex}"
        await caller.call(answering.sip_port, call_id)
        async with websockets.connect(other.ws + "/v1/control") as ws:  # lands on the other node
            await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            events = await control_events(ws, "call.media")
            assert events[-1]["leg"] == "sip"
            await ws.send(
                json.dumps({"type": "text", "turn_id": "t1", "text": "Hello across the plane.", "final": True})
            )
            done = (await control_events(ws, "turn.done"))[-1]
            assert done["played_ms"] > 200
        assert other.metric("voxgate_cluster_forwards_total") >= 1
    finally:
        caller.close()


async def test_an_invite_for_a_call_owned_elsewhere_is_refused(two_nodes):
    answering, other = two_nodes
    caller = UdpCaller()
    try:
        call_id = f"first-{uuid.uuid4().hex}"
        async with websockets.connect(other.ws + "/v1/control") as ws:
            await ws.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            await control_events(ws, "call.attached")
            refused = await caller.final_response(
                answering.sip_port, f"sip-{uuid.uuid4().hex}", extra=f"X-Call-Id: {call_id}\r\n"
            )
        assert refused.startswith("SIP/2.0 486") and "X-Voxgate-Reason: call_busy" in refused
    finally:
        caller.close()
