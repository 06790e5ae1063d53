"""WebRTC doors: TURN credentials minted per session (coturn's REST scheme), and a page's token flow.

No TURN server runs here: the minted password is checked the way coturn checks it (`use-auth-secret`:
base64(HMAC-SHA1(static-auth-secret, username)), username = "<expiry>:<user>"), computed independently.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import aiohttp
import pytest

pytest.importorskip("aiortc")

from tests.webrtc.peer import ClientPeer  # noqa: E402

SECRET = "turn-shared-secret-for-tests"


async def get_config(gw, token: str | None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{gw.url}/v1/webrtc/config", headers=headers) as r:
            return r.status, await r.json()


async def test_each_page_gets_its_own_turn_credentials_that_coturn_would_accept(gateway_factory, monkeypatch):
    monkeypatch.setenv("VOXGATE_TEST_TURN_SECRET", SECRET)
    gw = await gateway_factory(
        server={"api_keys": ["k1"]},
        webrtc={
            "ice_servers": ["stun:stun.example.org:3478"],
            "turn_urls": ["turn:turn.example.org:3478?transport=udp"],
            "turn_secret_env": "VOXGATE_TEST_TURN_SECRET",
            "turn_ttl_s": 600,
        },
    )
    assert (await get_config(gw, None))[0] == 401  # the wrong caller gets no credentials
    status, first = await get_config(gw, "k1")
    assert status == 200
    stun, turn = first["ice_servers"]
    assert stun == "stun:stun.example.org:3478"  # static STUN entries stay as they were
    assert turn["urls"] == ["turn:turn.example.org:3478?transport=udp"]
    expiry, _, user = turn["username"].partition(":")
    assert user and abs(int(expiry) - (time.time() + 600)) < 5
    want = base64.b64encode(hmac.new(SECRET.encode(), turn["username"].encode(), hashlib.sha1).digest()).decode()
    assert turn["credential"] == want
    _, second = await get_config(gw, "k1")
    assert second["ice_servers"][1]["username"] != turn["username"]  # per session, never shared
    assert SECRET not in str(first)


async def test_turn_needs_its_secret_and_takes_no_static_credentials(monkeypatch):
    from gateway.app import Gateway
    from gateway.config import ConfigError
    from tests.webrtc.conftest import make_config

    monkeypatch.delenv("VOXGATE_NO_TURN_SECRET", raising=False)
    with pytest.raises(ValueError, match="VOXGATE_NO_TURN_SECRET"):
        Gateway(make_config(webrtc={"turn_urls": ["turn:t.example.org"], "turn_secret_env": "VOXGATE_NO_TURN_SECRET"}))
    with pytest.raises(ConfigError, match="webrtc.turn_urls"):
        make_config(webrtc={"turn_urls": ["turn:user:pw@t.example.org"], "turn_secret_env": "X"})
    with pytest.raises(ConfigError, match="webrtc.turn_secret_env"):
        make_config(webrtc={"turn_urls": ["turn:t.example.org"]})


async def test_a_page_with_a_token_reads_its_config_then_calls_once(gateway_factory):
    gw = await gateway_factory(server={"api_keys": ["k1"]})
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.url}/v1/tokens", headers={"Authorization": "Bearer k1"}) as r:
            token = (await r.json())["token"]
    assert (await get_config(gw, token))[0] == 200  # reading the config does not spend the token
    peer = ClientPeer(gw.url, token=token)
    try:
        await peer.connect()  # the offer spends it
    finally:
        await peer.close()
    again = ClientPeer(gw.url, token=token)
    try:
        with pytest.raises(RuntimeError, match="401"):
            await again.connect()
    finally:
        await again.close()
