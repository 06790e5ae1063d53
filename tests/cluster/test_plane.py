"""Many gateways, one call plane: a real redis-server and haproxy in front of gateway processes on loopback.

One plane (Redis, two nodes, HAProxy with a round-robin and a call-id-hashing frontend) serves the whole
module; the tests that restart or kill things run last and bring up their own extra nodes.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import time
import uuid

import pytest
import websockets

from tests.conftest import CLUSTER_SECRET_ENV
from tests.cluster.harness import NEEDS, HAProxy, Node, Redis, http_json, speak_one_turn, wait_until
from tests.telephony.clients import AudioSocketClient, Control, TwilioClient, is_silent, tone_ulaw
from tests.telephony.wire_clients import VonageClient

pytestmark = pytest.mark.skipif(
    bool(NEEDS), reason=f"needs {', '.join(NEEDS)} (scripts/install_test_deps.sh installs them)"
)

KEY = "plane-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TTL_S = 3.0
LONG = "This second turn is long enough to be cut off by the caller. " * 4


def node_config(redis_url: str, **extra) -> dict:
    cfg = {
        "server": {
            "api_keys": [KEY],
            "max_sessions": 200,
            "limits": {"max_connections_per_ip": 60, "drain_timeout_s": 15},
        },
        "engine": {"kind": "simulated"},
        "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
        "playout": {"prebuffer_ms": 40},
        "telephony": {"unknown_call_timeout_s": 1.5, "twilio_allow_unsigned": True},
        "cluster": {"redis_url": redis_url, "claim_ttl_s": TTL_S, "secret_env": CLUSTER_SECRET_ENV},
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
    # outside the balancer: n3 is killed, n4 drained by the last tests (started now, alongside)
    p.extra = [p.node("n3", "127.0.0.4"), p.node("n4", "127.0.0.5")]
    for node in p.nodes + p.extra:
        node.wait_ready()
    p.haproxy = HAProxy(p.tmp, p.nodes)
    p.haproxy.start()
    yield p
    p.stop()
    gc.collect()  # sockets the tests left to the collector close now, not inside a later test


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
        self.tw = TwilioClient(
            await websockets.connect(f"{base}/v1/twilio{self.suffix}", compression=None),
            f"MZ{self.call_id}",
            f"CA{self.call_id}",
        )
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
            # the order each kind of event first came in (how many dropped-mark echoes follow a clear is timing, and
            # an underrun is the shared machine's CPU, not the plane: both are left out)
            "events": list(
                dict.fromkeys(
                    e["type"]
                    for e in control.events
                    if e["type"] not in ("mark", "audio.start", "audio.end", "underrun")
                )
            ),
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
    http_json(
        rr.replace("ws://", "http://") + "/healthz"
    )  # one request between: each media leg lands on the other node
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


class AudioSocketCall:
    """The same script over Asterisk's AudioSocket (TCP): attach, a turn heard, DTMF, a long turn interrupted, hangup."""

    def __init__(self):
        self.uuid = uuid.uuid4()
        self.call_id = str(self.uuid)

    async def open_control(self, base: str) -> None:
        self.control = Control(await websockets.connect(f"{base}/v1/control", additional_headers=AUTH))
        await self.control.attach(self.call_id)

    async def open_media(self, host: str, port: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        self.asterisk = AudioSocketClient(reader, writer, self.uuid)
        self.asterisk.send(0x01, self.uuid.bytes)
        self.media = await self.control.expect("call.media", timeout=10)

    async def run(self) -> dict:
        control, asterisk = self.control, self.asterisk
        heard = []

        async def listen() -> None:
            try:
                while True:
                    kind, payload, _ = await asterisk.read(10)
                    if kind == 0x10 and not is_silent(payload):
                        heard.append(payload)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                pass

        listener = asyncio.ensure_future(listen())
        asterisk.send(0x10, b"\x01\x00" * 160)
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello there, caller.", "final": True})
        done1 = await control.expect("turn.done", turn_id="t1", timeout=10)
        asterisk.send(0x03, b"4")
        dtmf = await control.expect("dtmf")
        await control.send({"type": "text", "turn_id": "t2", "text": LONG, "final": True})
        await control.expect("audio.start", turn_id="t2", timeout=10)
        await control.send({"type": "interrupt"})
        done2 = await control.expect("turn.done", turn_id="t2", timeout=10)
        asterisk.send(0x00)
        await control.expect_closed()
        await asyncio.wait_for(listener, 10)
        return {
            "media": (self.media["state"], self.media["leg"]),
            "done1": (done1["interrupted"], done1["played_text"]),
            "dtmf": dtmf["digit"],
            "done2": done2["interrupted"],
            "heard": len(heard) > 10,
            "events": list(
                dict.fromkeys(
                    e["type"]
                    for e in control.events
                    if e["type"] not in ("mark", "audio.start", "audio.end", "underrun")
                )
            ),
        }


def owner_of(plane, call_id: str) -> bytes | None:
    return plane.redis.client().get(f"voxgate:call:{call_id}")


async def test_audiosocket_calls_whose_legs_land_apart_meet_through_the_tcp_hop(plane):
    n1, _ = plane.nodes
    single = AudioSocketCall()
    await single.open_control(n1.ws)
    await single.open_media(n1.host, n1.audiosocket_port)
    single = await single.run()
    assert single["heard"] and single["dtmf"] == "4" and single["done2"] is True
    calls = [AudioSocketCall() for _ in range(4)]
    for call in calls:
        await call.open_control(plane.haproxy.rr)
    first_owner = await wait_until(lambda: owner_of(plane, calls[0].call_id))
    for _ in range(2):  # HAProxy's TCP round robin keeps its own turn: probe it until the next connection lands apart
        probe = uuid.uuid4()
        reader, writer = await asyncio.open_connection(plane.haproxy.host, plane.haproxy.audiosocket_port)
        writer.write(bytes([0x01, 0, 16]) + probe.bytes)
        landed = await wait_until(lambda: owner_of(plane, str(probe)))
        writer.write(bytes([0x00, 0, 0]))
        writer.close()
        if landed == first_owner:
            break
    before = forwards(plane.nodes)
    for call in calls:
        await call.open_media(plane.haproxy.host, plane.haproxy.audiosocket_port)
    results = await asyncio.gather(*(call.run() for call in calls))
    assert all(got == single for got in results), results
    assert forwards(plane.nodes) - before == len(calls)


async def test_a_websocket_wire_whose_legs_land_apart_meets_through_the_hop(plane):
    async def vonage_call(base: str, call_id: str) -> dict:
        control = Control(await websockets.connect(f"{base}/v1/control", additional_headers=AUTH))
        await control.attach(call_id)
        return control

    async def connect(control: Control, base: str, call_id: str) -> VonageClient:
        vg = VonageClient(
            await websockets.connect(f"{base}/v1/vonage", compression=None, additional_headers=AUTH), 16000
        )
        await vg.send({"event": "websocket:connected", "content-type": "audio/l16;rate=16000", "call_id": call_id})
        return vg

    async def run(control: Control, vg: VonageClient) -> dict:
        media = await control.expect("call.media", timeout=10)
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello over Vonage.", "final": True})
        mark = await control.expect("call.mark", timeout=10)
        done = await control.expect("turn.done", turn_id="t1", timeout=10)
        await control.send({"type": "text", "turn_id": "t2", "text": LONG, "final": True})
        await control.expect("call.mark", turn_id="t2", chunk=0, timeout=10)
        await control.send({"type": "interrupt"})
        done2 = await control.expect("turn.done", turn_id="t2", timeout=10)
        await wait_until(lambda: vg.commands("clear"), timeout=5)
        await vg.close()
        await control.expect_closed()
        return {
            "media": media["leg"],
            "mark": (mark["chunk"], mark["status"]),
            "done": (done["interrupted"], done["played_text"]),
            "done2": done2["interrupted"],
            "violations": vg.violations,
        }

    n1, _ = plane.nodes
    control = await vonage_call(n1.ws, "vonage-single")
    single = await run(control, await connect(control, n1.ws, "vonage-single"))
    assert single["done2"] is True and not single["violations"]
    ids = [f"vonage-rr-{i}" for i in range(4)]
    controls = [await vonage_call(plane.haproxy.rr, i) for i in ids]
    http_json(plane.haproxy.rr.replace("ws://", "http://") + "/healthz")  # the media legs land on the other nodes
    before = forwards(plane.nodes)
    legs = [await connect(c, plane.haproxy.rr, i) for c, i in zip(controls, ids)]  # one by one: round robin's order
    results = await asyncio.gather(*(run(c, vg) for c, vg in zip(controls, legs)))
    assert all(got == single for got in results), results
    assert forwards(plane.nodes) - before == len(ids)


async def test_the_balancer_drops_a_callers_hop_header_and_a_node_refuses_one_it_gets(plane):
    """Only nodes send X-Voxgate-Hop: the balancer (configured as docs/cluster.md shows) removes a caller's, and a
    node reached directly refuses a request carrying a hop that does not verify instead of serving it."""
    forged = {"X-Voxgate-Hop": "v2;n1;0;0;call;" + "0" * 64, **AUTH}
    via_balancer = plane.haproxy.rr.replace("ws://", "http://")
    assert http_json(via_balancer + "/v1/voices", headers=forged)[0] == 200
    status, body = http_json(plane.nodes[0].url + "/v1/voices", headers=forged)
    assert status == 403 and "X-Voxgate-Hop" in body["message"]


# ---------------------------------------------------------------- shared locks and state
async def native_session(node: Node, token: str | None = None, voice: str | None = None, **connect) -> dict:
    """Open /v1/ws, start a session (optionally with a voice), speak one short turn; returns session.started."""
    url = f"{node.ws}/v1/ws" + (f"?token={token}" if token else "")
    return await speak_one_turn(url, "Hello.", voice, additional_headers=None if token else AUTH, **connect)


async def test_a_token_minted_on_one_node_is_spent_on_another_and_only_once(plane):
    n1, n2 = plane.nodes
    status, body = http_json(n1.url + "/v1/tokens", "POST", b"", AUTH)
    assert status == 200
    token = body["token"]
    assert (await native_session(n2, token=token))["audio_bytes"] > 0  # spent on n2
    for node in (n1, n2):  # and refused everywhere after
        with pytest.raises(websockets.InvalidStatus) as refused:
            await native_session(node, token=token)
        assert refused.value.response.status_code == 401 and b"already used" in refused.value.response.body


async def test_per_ip_caps_hold_across_nodes(plane):
    n1, n2 = plane.nodes
    cap = 60  # server.limits.max_connections_per_ip; this test's sockets come from their own address
    opened = []
    for i in range(cap):
        node = (n1, n2)[i % 2]
        opened.append(
            await websockets.connect(f"{node.ws}/v1/ws", additional_headers=AUTH, local_addr=("127.0.0.9", 0))
        )
    try:  # each node holds only half the cap, yet the next socket is refused on either
        for node in (n1, n2):
            extra = await websockets.connect(f"{node.ws}/v1/ws", additional_headers=AUTH, local_addr=("127.0.0.9", 0))
            refusal = json.loads(await asyncio.wait_for(extra.recv(), 5))
            assert refusal["code"] == "rate_limited", refusal
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(extra.recv(), 5)
            assert extra.close_code == 1013
        await opened.pop().close()  # one closes on n2: n1 takes one again
        await asyncio.sleep(0.2)
        again = await websockets.connect(f"{n1.ws}/v1/ws", additional_headers=AUTH, local_addr=("127.0.0.9", 0))
        await again.send(json.dumps({"type": "session.start"}))
        assert json.loads(await asyncio.wait_for(again.recv(), 5))["type"] == "session.started"
        opened.append(again)
    finally:
        for ws in opened:
            await ws.close()


def reference_wav() -> bytes:
    import io
    import wave

    import numpy as np

    t = np.arange(int(1.5 * 16000)) / 16000
    pcm = (np.sin(2 * np.pi * 180 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 9000).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def upload_voice(node: Node, name: str) -> tuple[int, dict]:
    boundary = "voxgateplane"
    parts = [("name", None, name.encode()), ("x_vector_only", None, b"true"), ("audio", "ref.wav", reference_wav())]
    body = b""
    for field, filename, data in parts:
        disposition = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return http_json(
        node.url + "/v1/voices", "POST", body, {**AUTH, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    )


def voices(node: Node) -> dict:
    return {v["name"]: v for v in http_json(node.url + "/v1/voices")[1]["voices"]}


async def test_a_voice_uploaded_on_one_node_speaks_on_another_and_survives_a_restart(plane):
    n1, n2 = plane.nodes
    status, body = upload_voice(n1, "shared-voice")
    assert status == 201, body
    assert voices(n2)["shared-voice"]["source"] == "uploaded" and voices(n1).keys() == voices(n2).keys()
    started = await native_session(n2, voice="shared-voice")  # the simulated engine's clone path on the other node
    assert started["voice"] == "shared-voice" and started["audio_bytes"] > 0
    n2.stop()  # n2 keeps no voices on disk: after its restart the voice comes from Redis
    n2.start()
    assert "shared-voice" in voices(n2)
    assert (await native_session(n2, voice="shared-voice"))["audio_bytes"] > 0
    assert (
        http_json(n2.url + "/v1/voices/shared-voice", "DELETE", None, AUTH)[0] == 200
    )  # deleted on n2: gone on n1 too
    assert "shared-voice" not in voices(n1)


# ---------------------------------------------------------------- failures: Redis, a node killed, a node draining
class PlayingCall:
    """A call whose two legs reach `node` directly, playing a long turn; counts the media frames as they come."""

    def __init__(self, call_id: str):
        self.call_id = call_id
        self.frames: list[float] = []

    async def start(self, node: Node) -> "PlayingCall":
        self.control = Control(await websockets.connect(f"{node.ws}/v1/control", additional_headers=AUTH))
        await self.control.attach(self.call_id)
        self.tw = TwilioClient(
            await websockets.connect(f"{node.ws}/v1/twilio", compression=None), f"MZ{self.call_id}", f"CA{self.call_id}"
        )
        self.tw.echo_marks(0.0)
        await self.tw.start(params={"call_id": self.call_id})
        await self.control.expect("call.media", timeout=10)
        await self.control.send({"type": "text", "turn_id": "long", "text": LONG * 3, "final": True})
        self._reader = asyncio.ensure_future(self._count())
        await wait_until(lambda: len(self.frames) > 5, timeout=10)
        return self

    async def _count(self) -> None:
        while True:
            msg, at = await self.tw._inbox.get()
            if msg.get("event") == "media":
                self.frames.append(at)

    def frames_between(self, t0: float, t1: float) -> int:
        return sum(t0 <= t < t1 for t in self.frames)

    async def end(self) -> None:
        self._reader.cancel()
        await self.tw.stop()
        await self.control.expect_closed()


def underruns(node: Node) -> float:
    """Gaps the clock or the socket made (`cause` clock / network): what a stall on Redis would be. An `engine`
    gap is the SimulatedEngine late on this shared machine's CPU, not the plane."""
    return node.metric("voxgate_underruns_total", 'cause="clock"') + node.metric(
        "voxgate_underruns_total", 'cause="network"'
    )


def owned_by(plane: Plane, node_id: str) -> list[bytes]:
    r = plane.redis.client()
    return [k for k in r.scan_iter(match="voxgate:call:*") if r.get(k) == node_id.encode()]


async def test_redis_restarted_mid_call_the_call_plays_on_new_calls_wait_for_it(plane):
    n1, n2 = plane.nodes
    call = await PlayingCall("through-redis-restart").start(n2)
    gaps_before = underruns(n2)
    plane.redis.stop()  # SIGKILL: everything in it is lost (no persistence in this test)
    t_down = time.monotonic()
    ready = await wait_until(lambda: (lambda r: r if r[0] == 503 else None)(http_json(n2.url + "/readyz")), timeout=5)
    assert "redis" in ready[1]["reason"] and ready[1]["cluster"]["problem"]
    control = Control(await websockets.connect(f"{n1.ws}/v1/control", additional_headers=AUTH))
    await control.send({"type": "call.attach", "call_id": "during-outage"})
    assert (await control.expect("error"))["code"] == "cluster_unavailable"
    await control.expect_closed()
    assert control.ws.close_code == 1013
    with pytest.raises(websockets.InvalidStatus) as refused:  # a path door answers before the upgrade
        await websockets.connect(f"{n1.ws}/v1/twilio/during-outage")
    assert refused.value.response.status_code == 503 and b"cluster_unavailable" in refused.value.response.body
    await asyncio.sleep(max(0.0, 1.5 - (time.monotonic() - t_down)))
    plane.redis.start()
    t_up = time.monotonic()
    for node in (n1, n2):
        await wait_until(lambda: http_json(node.url + "/readyz")[0] == 200, timeout=5)
    # the call kept playing while Redis was gone, without a gap, and its claim is back
    assert call.frames_between(t_down, t_up) >= 0.5 * (t_up - t_down) / 0.020
    assert underruns(n2) == gaps_before
    await wait_until(lambda: plane.redis.client().get("voxgate:call:through-redis-restart") == b"n2", timeout=5)
    await call.end()
    got = await whole_call(plane.haproxy.rr, "after-restart")  # and a new call, its legs split, works again
    assert got["done1"][0] is False and got["clear"]


async def test_a_node_killed_mid_call_leaves_other_calls_untouched_and_its_claims_expire(plane):
    n1, n2 = plane.nodes
    n3 = plane.extra[0]
    victim = await PlayingCall("on-n3").start(n3)
    survivor = await PlayingCall("on-n2").start(n2)
    gaps_before = underruns(n2)
    await wait_until(lambda: len(owned_by(plane, "n3")) == 3, timeout=2)  # the call id, the callSid and the streamSid
    n3.kill(signal.SIGKILL)
    t_kill = time.monotonic()
    # a late leg of the dead node's call: the same unknown_call as for a call that never existed
    late = Control(await websockets.connect(f"{n2.ws}/v1/control", additional_headers=AUTH))
    await late.attach("on-n3")
    assert (await late.expect("error", timeout=5))["code"] == "unknown_call"
    await wait_until(lambda: not owned_by(plane, "n3"), timeout=TTL_S + 2)
    assert time.monotonic() - t_kill <= TTL_S + 1.0  # within the TTL (plus a heartbeat's slack)
    await asyncio.sleep(0.5)
    now = time.monotonic()
    assert survivor.frames_between(t_kill, now) >= 0.5 * (now - t_kill) / 0.020 and underruns(n2) == gaps_before
    victim._reader.cancel()
    await survivor.end()


async def test_a_draining_node_finishes_its_calls_and_their_late_legs_still_reach_it(plane):
    n1, n2 = plane.nodes
    n4 = plane.extra[1]
    call = TwilioCall("drained")
    await call.open_control(n4.ws)  # the call is n4's
    n4.kill(signal.SIGTERM)
    await wait_until(lambda: http_json(n4.url + "/readyz")[0] == 503, timeout=5)
    assert http_json(n4.url + "/readyz")[1]["reason"] == "draining"
    assert plane.redis.client().hget("voxgate:node:n4", "draining") == b"1"
    fresh = Control(await websockets.connect(f"{n4.ws}/v1/control", additional_headers=AUTH))
    await fresh.send({"type": "call.attach", "call_id": "too-late"})
    assert (await fresh.expect("error"))["code"] == "shutting_down"
    before = n2.metric("voxgate_cluster_forwards_total")
    await call.open_media(n2.ws)  # the media leg lands on n2 and is forwarded to the draining owner
    got = await call.run()
    assert got["done1"] == (False, "Hello there, caller.") and got["clear"]
    assert n2.metric("voxgate_cluster_forwards_total") == before + 1
    assert await asyncio.to_thread(n4.proc.wait, 10) == 0  # its last call over, the node exits


def test_redis_unreachable_at_start_is_a_one_line_refusal_naming_the_url(tmp_path):
    import subprocess
    import sys

    from tests.cluster.harness import ROOT, free_port

    port = free_port("127.0.0.1")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"engine: {{kind: simulated}}\nserver: {{host: 127.0.0.6, port: 0}}\ncluster: {{redis_url: 'redis://127.0.0.1:{port}/0', "
        f"secret_env: {CLUSTER_SECRET_ENV}}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg), "--log-level", "ERROR"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and f"redis://127.0.0.1:{port}/0" in lines[0] and "unreachable" in lines[0], out.stdout
