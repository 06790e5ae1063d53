"""Many gateways, one call plane: a real redis-server and haproxy in front of gateway processes on loopback.

One plane (Redis, two nodes, HAProxy with a round-robin and a call-id-hashing frontend) serves the whole
module; the tests that restart or kill things run last and bring up their own extra nodes.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid

import pytest
import websockets

from tests.cluster.harness import NEEDS, HAProxy, Node, Redis, http_json, wait_until
from tests.telephony.clients import Control, TwilioClient, tone_ulaw

pytestmark = pytest.mark.skipif(bool(NEEDS), reason=f"needs {', '.join(NEEDS)} (scripts/install_test_deps.sh installs them)")

KEY = "plane-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TTL_S = 3.0
LONG = "This second turn is long enough to be cut off by the caller. " * 4


def node_config(redis_url: str, **extra) -> dict:
    cfg = {
        "server": {"api_keys": [KEY], "max_sessions": 200, "limits": {"max_connections_per_ip": 60, "drain_timeout_s": 15}},
        "engine": {"kind": "simulated"},
        "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
        "playout": {"prebuffer_ms": 40},
        "telephony": {"unknown_call_timeout_s": 1.5, "twilio_allow_unsigned": True},
        "cluster": {"redis_url": redis_url, "claim_ttl_s": TTL_S},
    }
    for section, values in extra.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    return cfg


class Plane:
    def __init__(self, tmp):
        self.tmp = tmp
        self.redis = Redis(tmp)
        self.nodes: list[Node] = []
        self.extra: list[Node] = []

    def node(self, name: str, host: str, start: bool = True, **extra) -> Node:
        node = Node(name, host, self.tmp, node_config(self.redis.url, **extra))
        if start:
            node.start(wait=False)
        return node

    def stop(self) -> None:
        for node in self.nodes + self.extra:
            node.stop()
        self.haproxy.stop()
        self.redis.stop()


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    p = Plane(tmp_path_factory.mktemp("plane"))
    p.redis.start()
    p.nodes = [p.node("n1", "127.0.0.2", server={"voices_dir": str(p.tmp / "voices-n1")}), p.node("n2", "127.0.0.3")]
    for node in p.nodes:
        node.wait_ready()
    p.haproxy = HAProxy(p.tmp, p.nodes)
    p.haproxy.start()
    yield p
    p.stop()


# ---------------------------------------------------------------- one call's script, run the same everywhere
class TwilioCall:
    """Attach, connect Twilio, a short turn (mark echoed, turn.done), DTMF, a long turn interrupted after its
    first chunk played (clear), stop. `result` is what the far ends saw, timing-free."""

    def __init__(self, call_id: str, path_ids: bool = False):
        self.call_id, self.path_ids = call_id, path_ids
        self.suffix = f"/{call_id}" if path_ids else ""

    async def open_control(self, base: str) -> None:
        self.control = Control(await websockets.connect(f"{base}/v1/control{self.suffix}", additional_headers=AUTH))
        await self.control.attach(self.call_id)

    async def open_media(self, base: str) -> None:
        self.tw = TwilioClient(await websockets.connect(f"{base}/v1/twilio{self.suffix}", compression=None),
                               f"MZ{self.call_id}", f"CA{self.call_id}")
        self.tw.echo_marks(0.0)  # Twilio echoes a mark once the audio before it has played; ours plays at once
        await self.tw.start(params={} if self.path_ids else {"call_id": self.call_id})
        self.media = await self.control.expect("call.media", timeout=10)

    async def run(self) -> dict:
        control, tw = self.control, self.tw
        for _ in range(5):
            await tw.media(tone_ulaw())
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello there, caller.", "final": True})
        mark1 = await control.expect("call.mark", turn_id="t1", timeout=10)
        done1 = await control.expect("turn.done", turn_id="t1", timeout=10)
        await tw.dtmf("7")
        dtmf = await control.expect("dtmf")
        await control.send({"type": "text", "turn_id": "t2", "text": LONG, "final": True})
        await control.expect("call.mark", turn_id="t2", chunk=0, timeout=10)
        await control.send({"type": "interrupt"})
        done2 = await control.expect("turn.done", turn_id="t2", timeout=10)
        await wait_until(lambda: tw.clear_at is not None, timeout=5)
        await tw.stop()
        await control.expect_closed()
        media_sids = {m.get("streamSid") for m, _ in _drain(tw) if m.get("event") == "media"}
        return {
            "media": (self.media["state"], self.media["leg"]),
            "mark1": (mark1["chunk"], mark1["status"]),
            "done1": (done1["interrupted"], done1["played_text"]),
            "dtmf": dtmf["digit"],
            "done2": (done2["interrupted"], LONG.startswith(done2["played_text"].rstrip()), bool(done2["played_text"])),
            "clear": tw.clear_at is not None,
            "stream_sids": media_sids <= {f"MZ{self.call_id}"},
            # the order each kind of event first came in (how many dropped-mark echoes follow a clear is timing)
            "events": list(dict.fromkeys(e["type"] for e in control.events if e["type"] not in ("mark", "audio.start", "audio.end"))),
        }


async def whole_call(base: str, call_id: str, path_ids: bool = False) -> dict:
    call = TwilioCall(call_id, path_ids)
    await call.open_control(base)
    await call.open_media(base)
    return await call.run()


def _drain(tw: TwilioClient) -> list:
    out = []
    while tw._inbox is not None and not tw._inbox.empty():
        out.append(tw._inbox.get_nowait())
    return out


def forwards(nodes: list[Node]) -> float:
    return sum(n.metric("voxgate_cluster_forwards_total") for n in nodes)


# ---------------------------------------------------------------- the legs of a call meet wherever they land
async def test_twilio_calls_whose_legs_land_apart_meet_and_behave_as_on_one_node(plane):
    n1, _ = plane.nodes
    single = await whole_call(n1.ws, "single-0")  # both legs on one node
    assert single["done1"][0] is False and single["done2"][0] is True and single["clear"] and single["dtmf"] == "7"
    before = forwards(plane.nodes)
    calls = [TwilioCall(f"rr-{i}") for i in range(20)]
    rr = plane.haproxy.rr
    for call in calls:  # round robin: control sockets land n1, n2, n1, …
        await call.open_control(rr)
    http_json(rr.replace("ws://", "http://") + "/healthz")  # one request between: each media leg lands on the other node
    for call in calls:
        await call.open_media(rr)
    results = await asyncio.gather(*(call.run() for call in calls))
    for call, got in zip(calls, results):
        assert got == single, f"{call.call_id} differs from the single-node run: {got} != {single}"
    assert forwards(plane.nodes) - before == 20  # every call: its media leg went one hop to its control's node


async def test_hashing_on_the_path_call_id_lands_both_legs_on_one_node(plane):
    before = forwards(plane.nodes)
    results = await asyncio.gather(*(whole_call(plane.haproxy.hashed, f"hash-{i}", path_ids=True) for i in range(6)))
    assert all(r["done1"][0] is False and r["dtmf"] == "7" and r["clear"] for r in results)
    assert forwards(plane.nodes) == before  # no leg needed the hop
