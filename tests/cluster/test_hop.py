"""The hop between nodes is single-use and bound to what it forwards: hops captured off the wire between two
real nodes (a recording TCP relay put where the owner's address is published) are replayed, moved to another
path, query or call, and must open nothing. Two in-process gateways sharing a real redis-server.

These tests use only what a sniffer sees (the bytes), never the signing code, so they judge any hop scheme.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid

import pytest
import websockets

from gateway.app import Gateway
from tests.cluster.harness import NEEDS, Redis
from tests.conftest import CLUSTER_SECRET_ENV
from tests.telephony.clients import AudioSocketClient, Control, TwilioClient
from tests.telephony.conftest import FAST, merge, started_gateways
from tests.telephony.wire_clients import VonageClient

pytestmark = pytest.mark.skipif(
    bool(NEEDS), reason=f"needs {', '.join(NEEDS)} (scripts/install_test_deps.sh installs them)"
)

KEY = "hop-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
OWNER_HOST, RELAY_HOST, SNIFFER_HOST = "127.0.0.2", "127.0.0.3", "127.0.0.4"


class Sniffer:
    """A TCP relay that records what the forwarding node sends (as a wire tap between two nodes would)."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.sent = bytearray()
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._pipe, SNIFFER_HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _pipe(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def one_way(src, dst, record: bool) -> None:
            try:
                while data := await src.read(65536):
                    if record:
                        self.sent += data
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(one_way(reader, up_writer, True), one_way(up_reader, writer, False))

    def http_hop(self) -> tuple[str, str]:
        """(request target, X-Voxgate-Hop value) of the first request that carried a hop."""
        head = bytes(self.sent).split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        target = head[0].split(" ")[1]
        value = next(line.split(":", 1)[1].strip() for line in head[1:] if line.lower().startswith("x-voxgate-hop:"))
        return target, value

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def plane(tmp_path):
    """(owner, relay): the owner's published addresses lead through a Sniffer (`owner.sniffer`, `owner.tcp_sniffer`)."""
    redis = Redis(tmp_path)
    redis.start()
    sniffers = []
    async with started_gateways() as start:

        async def node(host: str, name: str, **extra) -> Gateway:
            own = {
                "server": {"host": host, "api_keys": [KEY]},
                "telephony": {"audiosocket_port": 0, "twilio_allow_unsigned": True, "unknown_call_timeout_s": 5},
                "cluster": {
                    "redis_url": redis.url,
                    "node_id": name,
                    "claim_ttl_s": 5,
                    "secret_env": CLUSTER_SECRET_ENV,
                },
            }
            return await start(merge(merge(FAST, own), extra))

        owner = await node(
            OWNER_HOST, "owner", telephony={"audiosocket_allow": ["10.0.0.0/8"]}
        )  # no one dials it but nodes
        relay = await node(RELAY_HOST, "relay")
        owner.sniffer = Sniffer(OWNER_HOST, owner.port)
        owner.tcp_sniffer = Sniffer(OWNER_HOST, owner.audiosocket.port)
        for s in (owner.sniffer, owner.tcp_sniffer):
            await s.start()
            sniffers.append(s)
        plane = owner.core.cluster
        plane.advertise_url = f"http://{SNIFFER_HOST}:{owner.sniffer.port}"
        plane.audiosocket = f"{SNIFFER_HOST}:{owner.tcp_sniffer.port}"
        await plane._beat()  # published now, not at the next heartbeat
        yield owner, relay
        for s in sniffers:
            s.close()
    redis.stop()


def ws(gw: Gateway, target: str) -> str:
    return f"ws://{gw.config.server.host}:{gw.port}{target}"


async def attach(owner: Gateway, call_id: str) -> Control:
    control = Control(await websockets.connect(ws(owner, "/v1/control"), additional_headers=AUTH))
    await control.attach(call_id)
    return control


async def media_came(control: Control, timeout: float = 1.0) -> bool:
    """Whether a media leg joined the control's call within `timeout` (its call may end unjoined meanwhile)."""
    try:
        await control.expect("call.media", timeout=timeout)
        return True
    except (asyncio.TimeoutError, websockets.ConnectionClosed):
        return False


async def refused_status(url: str, headers: dict) -> int | None:
    """The HTTP status an upgrade was refused with, or None when it was accepted."""
    try:
        sock = await websockets.connect(url, additional_headers=headers, open_timeout=5)
    except websockets.InvalidStatus as exc:
        return exc.response.status_code
    await sock.close()
    return None


async def forwarded_twilio_hop(owner: Gateway, relay: Gateway) -> tuple[str, str, Control]:
    """A Twilio leg for a call of the owner's lands on the relay and is forwarded: the hop as sniffed."""
    call_id = f"CA{uuid.uuid4().hex}"
    control = await attach(owner, call_id)
    tw = TwilioClient(
        await websockets.connect(ws(relay, f"/v1/twilio/{call_id}"), compression=None), f"MZ{call_id}", call_id
    )
    await tw.start()
    assert (await control.expect("call.media", timeout=5))["state"] == "connected"
    await tw.stop()
    return *owner.sniffer.http_hop(), control


async def test_a_captured_hop_replayed_on_the_same_path_is_refused(plane):
    owner, relay = plane
    target, hop, _ = await forwarded_twilio_hop(owner, relay)
    assert target.startswith("/v1/twilio/CA")
    assert await refused_status(ws(owner, target), {"X-Voxgate-Hop": hop}) == 403  # second use: refused


async def test_a_hop_for_one_path_is_refused_on_another(plane):
    owner, relay = plane
    target, hop, _ = await forwarded_twilio_hop(owner, relay)
    other = f"CA{uuid.uuid4().hex}"
    await attach(owner, other)
    assert await refused_status(ws(owner, f"/v1/control/{other}"), {"X-Voxgate-Hop": hop}) == 403
    assert await refused_status(ws(owner, f"/v1/twilio/{other}"), {"X-Voxgate-Hop": hop}) == 403


async def test_a_hop_for_one_query_is_refused_on_another(plane):
    owner, relay = plane
    a, b = f"vg-{uuid.uuid4().hex}", f"vg-{uuid.uuid4().hex}"
    control_a, control_b = await attach(owner, a), await attach(owner, b)
    leg = VonageClient(
        await websockets.connect(ws(relay, f"/v1/vonage?call_id={a}"), compression=None, additional_headers=AUTH), 16000
    )
    await leg.send({"event": "websocket:connected", "content-type": "audio/l16;rate=16000"})
    assert (await control_a.expect("call.media", timeout=5))["state"] == "connected"
    target, hop = owner.sniffer.http_hop()
    assert target == f"/v1/vonage?call_id={a}"
    status = await refused_status(ws(owner, f"/v1/vonage?call_id={b}"), {"X-Voxgate-Hop": hop})
    assert status == 403
    assert not await media_came(control_b)  # call B never got a media leg
    await leg.close()


async def test_an_audiosocket_hop_frame_for_call_a_opens_nothing_for_call_b(plane):
    owner, relay = plane
    a, b = uuid.uuid4(), uuid.uuid4()
    control_a, control_b = await attach(owner, str(a)), await attach(owner, str(b))
    asterisk = AudioSocketClient(*await asyncio.open_connection(RELAY_HOST, relay.audiosocket.port), a)
    asterisk.send(0x01, a.bytes)
    assert (await control_a.expect("call.media", timeout=5))["leg"] == "audiosocket"
    sent = bytes(owner.tcp_sniffer.sent)
    assert sent[0] == 0xF7
    hop_frame = sent[: 3 + int.from_bytes(sent[1:3], "big")]
    for call in (b, a):  # another call, then the same one again: both refused
        reader, writer = await asyncio.open_connection(OWNER_HOST, owner.audiosocket.port)
        writer.write(hop_frame + bytes([0x01, 0, 16]) + call.bytes)
        await asyncio.wait_for(reader.read(), 5)  # the owner hangs up
        writer.close()
    assert not await media_came(control_b)
    asterisk.close()


async def test_a_request_with_a_forged_hop_is_refused_not_served(plane):
    owner, _ = plane
    for forged in ("relay;1700000000;" + "0" * 64, "v2;relay;1;2;3;4", "anything"):
        assert await refused_status(ws(owner, "/v1/control"), {"X-Voxgate-Hop": forged, **AUTH}) == 403


async def test_no_secret_is_written_to_redis(plane):
    import os

    import redis as redis_lib

    owner, _ = plane
    secret = os.environ[CLUSTER_SECRET_ENV].encode()
    r = redis_lib.Redis.from_url(owner.config.cluster.redis_url)
    try:
        keys = r.keys("*")
        assert keys and not any(k.endswith(b"secret") for k in keys), keys
        for key in keys:
            kind = r.type(key)
            values = (
                [r.get(key)]
                if kind == b"string"
                else list(r.hgetall(key).values())
                if kind == b"hash"
                else list(r.smembers(key))
                if kind == b"set"
                else [m for m, _ in r.zrange(key, 0, -1, withscores=True)]
            )
            assert not any(v and secret in v for v in values), key
    finally:
        r.close()


async def test_nodes_with_different_secrets_say_why_in_one_line_and_do_not_split_the_call(
    plane, tmp_path, monkeypatch, caplog
):
    owner, _ = plane
    monkeypatch.setenv("VOXGATE_TEST_OTHER_SECRET", "a-different-secret-0123456789")
    async with started_gateways() as start:
        stranger = await start(
            merge(
                FAST,
                {
                    "server": {"host": "127.0.0.5", "api_keys": [KEY]},
                    "telephony": {"twilio_allow_unsigned": True},
                    "cluster": {
                        "redis_url": owner.config.cluster.redis_url,
                        "node_id": "stranger",
                        "secret_env": "VOXGATE_TEST_OTHER_SECRET",
                    },
                },
            )
        )
        call_id = f"CA{uuid.uuid4().hex}"
        control = await attach(owner, call_id)
        caplog.set_level(logging.WARNING, logger="voxgate.cluster")
        status = await refused_status(ws(stranger, f"/v1/twilio/{call_id}"), {})
        assert status == 503  # refused here too: the call is not taken over from its live owner
        assert owner.core.calls.get(call_id) is not None and stranger.core.calls.get(call_id) is None
        lines = [r.getMessage() for r in caplog.records if r.name == "voxgate.cluster"]
        assert any("refused this node's hop" in m and "cluster.secret_env" in m for m in lines), lines
        assert any("refused a hop" in m and "signature does not verify" in m for m in lines), lines
        assert not any(hop_value_in(m) for m in lines)
        await control.ws.close()


def hop_value_in(line: str) -> bool:
    """A log line that shows a hop's MAC (64 hex digits)."""
    import re

    return re.search(r"[0-9a-f]{64}", line) is not None


# ---------------------------------------------------------------- wss:// between nodes
def self_signed(tmp_path, host: str) -> tuple[str, str]:
    """(cert + key PEM for HAProxy, cert PEM as the CA a node trusts): a self-signed certificate for `host`."""
    import subprocess

    key, cert = tmp_path / "node.key", tmp_path / "node.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=voxgate-node",
            "-addext",
            f"subjectAltName=IP:{host}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    pem = tmp_path / "node.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    return str(pem), str(cert)


TLS_FRONT = """global
  maxconn 200
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  timeout tunnel 30s
frontend tls
  bind {host}:{port} ssl crt {pem}
  http-request set-header X-Forwarded-Proto https
  default_backend node
backend node
  server owner {target}
"""


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl (scripts/install_test_deps.sh installs it)")
async def test_nodes_reach_an_https_owner_over_wss_with_a_configured_ca(plane, tmp_path):
    """The owner advertises https:// (TLS ends at a proxy in front of it, as a sidecar would): the forwarding node
    dials wss://, trusts the owner's self-signed certificate through cluster.peer_ca_file, and the call plays."""
    import subprocess

    from tests.cluster.harness import free_port, wait_port

    owner, _ = plane
    host = "127.0.0.6"
    pem, ca = self_signed(tmp_path, host)
    port = free_port(host)
    cfg = tmp_path / "tls.cfg"
    cfg.write_text(TLS_FRONT.format(host=host, port=port, pem=pem, target=f"{OWNER_HOST}:{owner.port}"))
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(host, port, proc=haproxy)
        owner.core.cluster.advertise_url = f"https://{host}:{port}"
        await owner.core.cluster._beat()
        async with started_gateways() as start:

            async def relay(name: str, ca_file: str | None) -> Gateway:
                cluster = {
                    "redis_url": owner.config.cluster.redis_url,
                    "node_id": name,
                    "secret_env": CLUSTER_SECRET_ENV,
                }
                return await start(
                    merge(
                        FAST,
                        {
                            "server": {"host": "127.0.0.7", "api_keys": [KEY]},
                            "telephony": {"twilio_allow_unsigned": True},
                            "cluster": cluster | ({"peer_ca_file": ca_file} if ca_file else {}),
                        },
                    )
                )

            trusting, untrusting = await relay("trusting", ca), await relay("untrusting", None)
            call_id = f"CA{uuid.uuid4().hex}"
            control = await attach(owner, call_id)
            assert await refused_status(ws(untrusting, f"/v1/twilio/{call_id}"), {}) == 503  # an unknown CA: refused
            tw = TwilioClient(
                await websockets.connect(ws(trusting, f"/v1/twilio/{call_id}"), compression=None),
                f"MZ{call_id}",
                call_id,
            )
            await tw.start()
            assert (await control.expect("call.media", timeout=5))["state"] == "connected"
            await control.send({"type": "text", "turn_id": "t1", "text": "Hello over TLS.", "final": True})
            assert (await control.expect("turn.done", turn_id="t1", timeout=10))["interrupted"] is False
            await tw.stop()
            assert trusting.metrics.cluster_forwards.labels(door="twilio")._value.get() == 1
    finally:
        haproxy.terminate()
        haproxy.wait(5)
