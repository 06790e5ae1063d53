"""WebRTC through a real coturn (Debian's package) with use-auth-secret, as deploy/kubernetes runs it:
the gateway mints TURN credentials from the shared secret, an aiortc caller that may only use relay
candidates (iceTransportPolicy relay) connects through coturn and hears a turn; coturn refuses a
credential past its expiry. coturn is allowed to relay to loopback here (the gateway is on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
import time

import aiohttp
import pytest

pytest.importorskip("aiortc")
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy  # noqa: E402

from gateway.app import Gateway  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.security.turn import turn_credentials  # noqa: E402
from tests.webrtc.peer import ClientPeer  # noqa: E402

SECRET = "turn-shared-secret-for-the-relay-test"
TEXT = "This turn reaches the caller through the TURN relay."


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def coturn(tmp_path):
    if not shutil.which("turnserver"):
        pytest.skip("coturn is not installed (scripts/install_test_deps.sh installs Debian's coturn)")
    port = free_udp_port()
    low = random.randrange(20000, 30000, 100)
    log = tmp_path / "turn.log"
    proc = subprocess.Popen(
        [
            "turnserver",
            "-n",
            "--listening-ip=127.0.0.1",
            "--relay-ip=127.0.0.1",
            f"--listening-port={port}",
            f"--min-port={low}",
            f"--max-port={low + 99}",
            "--use-auth-secret",
            f"--static-auth-secret={SECRET}",
            "--realm=voxgate",
            "--allow-loopback-peers",
            "--no-cli",
            "--no-tls",
            "--no-dtls",
            "--fingerprint",
            "--no-multicast-peers",
            "--verbose",
            "--log-file=stdout",
            "--simple-log",
            f"--pidfile={tmp_path / 'turn.pid'}",
            f"--userdb={tmp_path / 'turndb'}",
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while "Total General servers" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    yield port, log
    proc.terminate()
    proc.wait(5)


async def allocate(port: int, username: str, password: str) -> tuple[str, int]:
    """One TURN allocation with these credentials (aioice's client); raises when coturn refuses it."""
    from aioice.turn import create_turn_endpoint

    transport, _ = await asyncio.wait_for(
        create_turn_endpoint(asyncio.DatagramProtocol, ("127.0.0.1", port), username, password), 10
    )
    try:
        return transport.get_extra_info("sockname")
    finally:
        transport.close()


async def test_a_relay_only_caller_connects_through_coturn_with_minted_credentials_and_hears_the_turn(
    coturn, monkeypatch
):
    port, log = coturn
    monkeypatch.setenv("VOXGATE_TURN_SECRET", SECRET)
    gw = Gateway(
        load_config(
            None,
            {
                "server": {"host": "127.0.0.1", "port": 0, "max_sessions": 4},
                "engine": {"kind": "simulated"},
                "simulated": {"first_packet_ms": 20, "ms_per_char": 30},
                "webrtc": {
                    "turn_urls": [f"turn:127.0.0.1:{port}?transport=udp"],
                    "turn_secret_env": "VOXGATE_TURN_SECRET",
                },
            },
        )
    )
    await gw.start()
    peer = None
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{gw.url}/v1/webrtc/config") as resp:
                ice = (await resp.json())["ice_servers"]
        (turn,) = [s for s in ice if isinstance(s, dict) and s.get("username")]
        configuration = RTCConfiguration(
            iceServers=[RTCIceServer(urls=turn["urls"], username=turn["username"], credential=turn["credential"])],
            iceTransportPolicy=RTCIceTransportPolicy.RELAY,
        )
        peer = ClientPeer(gw.url, configuration=configuration)
        await peer.connect()
        offer_candidates = [
            line for line in peer.pc.localDescription.sdp.splitlines() if line.startswith("a=candidate")
        ]
        assert offer_candidates and all(" typ relay" in line for line in offer_candidates)
        nominated = list(peer.pc.sctp.transport.transport._connection._nominated.values())
        assert nominated and all(pair.local_candidate.type == "relay" for pair in nominated)
        peer.send({"type": "session.start", "language": "en"})
        await peer.next_event("session.started")
        t0 = peer.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
        done = await peer.next_event("turn.done", turn_id="t1", timeout=20)
        assert done["interrupted"] is False and done["played_text"] == TEXT
        heard = peer.first_sound_after(t0)
        assert heard is not None and peer.rms_between(heard, heard + 1.0) > 0.02
        text = log.read_text()
        assert turn["username"] in text and "ALLOCATE processed, success" in text
    finally:
        if peer is not None:
            await peer.close()
        await gw.stop()


async def test_coturn_refuses_a_minted_credential_past_its_expiry(coturn):
    port, log = coturn
    fresh = turn_credentials(SECRET, ttl_s=600)
    assert (await allocate(port, *fresh))[0] == "127.0.0.1"  # the same scheme, in date: allocated
    expired = turn_credentials(SECRET, ttl_s=600, now=time.time() - 660)  # expired a minute ago
    with pytest.raises(Exception) as refused:
        await allocate(port, *expired)
    assert "401" in str(refused.value) or "Unauthorized" in str(refused.value), refused.value
    forged = (fresh[0], turn_credentials("another-secret", ttl_s=600)[1])
    with pytest.raises(Exception):
        await allocate(port, *forged)
