"""Locks on the HTTP port: per-IP caps and rate, the Origin allowlist, browser tokens.

Real gateway on loopback, real clients. A second caller is a second loopback address (127.0.0.2: Linux routes
all of 127/8 to `lo`), so "closed to the wrong caller, open to the right one" is two real source addresses.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Client

OTHER = "127.0.0.2"


def refused_count(gw, reason: str) -> float:
    for family in text_string_to_metric_families(gw.metrics.render().decode()):
        if family.name == "voxgate_connections_refused":
            return sum(
                s.value for s in family.samples if s.labels.get("reason") == reason and s.name.endswith("_total")
            )
    return 0.0


async def ws_connect(gw, path="/v1/ws", source: str | None = None, headers: dict | None = None):
    kw = {"local_addr": (source, 0)} if source else {}
    return await websockets.connect(f"ws://127.0.0.1:{gw.port}{path}", additional_headers=headers or {}, **kw)


async def start_session(ws) -> dict:
    await ws.send(json.dumps({"type": "session.start"}))
    while True:
        msg = json.loads(await ws.recv())
        if msg["type"] == "session.started":
            return msg


async def expect_refused_1013(ws) -> dict:
    event = json.loads(await asyncio.wait_for(ws.recv(), 5))
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 5)
    assert ws.close_code == 1013
    return event


async def http_get(gw, path: str, source: str | None = None, headers: dict | None = None) -> tuple[int, dict]:
    connector = aiohttp.TCPConnector(local_addr=(source, 0)) if source else None
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.get(f"http://127.0.0.1:{gw.port}{path}", headers=headers or {}) as r:
            return r.status, await r.json(content_type=None)


# ---------------------------------------------------------------- per-IP caps
async def test_a_third_socket_from_one_address_is_closed_with_1013_and_another_address_still_gets_in(start_gateway):
    gw = await start_gateway({"server": {"limits": {"max_connections_per_ip": 2}}})
    held = [await ws_connect(gw) for _ in range(2)]
    for ws in held:
        await start_session(ws)
    third = await ws_connect(gw)
    event = await expect_refused_1013(third)
    assert event["code"] == "rate_limited" and "max_connections_per_ip" in event["message"]
    status, body = await http_get(gw, "/healthz")  # plain requests count too
    assert status == 429 and body["code"] == "rate_limited"
    assert refused_count(gw, "max_connections_per_ip") == 2

    other = await ws_connect(gw, source=OTHER)  # the right caller: a different address
    assert (await start_session(other))["session_id"]
    await held[0].close()
    for _ in range(100):  # the slot frees once the gateway has seen the close
        if gw.core.peers.open_count("127.0.0.1") < 2:
            break
        await asyncio.sleep(0.02)
    again = await ws_connect(gw)
    assert (await start_session(again))["session_id"]
    for ws in (held[1], other, again):
        await ws.close()


async def test_connections_opened_too_fast_get_429_and_the_bucket_refills(start_gateway):
    # one every 2 s (a bucket of one): slow enough that a loaded CI machine cannot refill it between two requests
    gw = await start_gateway({"server": {"limits": {"connections_per_ip_per_s": 0.5}}})
    statuses = [(await http_get(gw, "/healthz"))[0] for _ in range(2)]
    assert statuses == [200, 429]
    assert (await http_get(gw, "/healthz", source=OTHER))[0] == 200
    ws = await ws_connect(gw)  # an upgrade is refused the same way, with a close code a browser can read
    assert "connections_per_ip_per_s" in (await expect_refused_1013(ws))["message"]
    await asyncio.sleep(2.1)
    assert (await http_get(gw, "/healthz"))[0] == 200
    assert refused_count(gw, "connections_per_ip_per_s") == 2


async def test_the_defaults_limit_nothing(start_gateway):
    gw = await start_gateway()
    sockets = [await ws_connect(gw) for _ in range(30)]
    assert [(await http_get(gw, "/healthz"))[0] for _ in range(30)] == [200] * 30
    for ws in sockets:
        await ws.close()


async def test_x_forwarded_for_counts_only_from_a_trusted_proxy(start_gateway):
    limits = {"max_connections_per_ip": 1}
    gw = await start_gateway({"server": {"limits": limits, "trusted_proxies": ["127.0.0.1/32"]}})
    a = await ws_connect(gw, headers={"X-Forwarded-For": "198.51.100.7, 203.0.113.5"})
    await start_session(a)
    assert gw.core.peers.open_count("203.0.113.5") == 1  # the right-most hop the trusted proxy added
    same = await ws_connect(gw, headers={"X-Forwarded-For": "203.0.113.5"})
    await expect_refused_1013(same)
    b = await ws_connect(gw, headers={"X-Forwarded-For": "203.0.113.6"})
    await start_session(b)
    await a.close()
    await b.close()

    # from an untrusted peer the header is the caller's to forge: it is ignored
    gw2 = await start_gateway({"server": {"limits": limits}})
    c = await ws_connect(gw2, headers={"X-Forwarded-For": "203.0.113.5"})
    await start_session(c)
    d = await ws_connect(gw2, headers={"X-Forwarded-For": "203.0.113.99"})
    await expect_refused_1013(d)
    await c.close()


# ---------------------------------------------------------------- Origin
async def test_a_page_from_an_unlisted_origin_gets_403_and_listed_or_no_origin_passes(start_gateway):
    gw = await start_gateway({"server": {"allowed_origins": ["https://app.example.com"]}})
    for path in ("/v1/ws", "/v1/control"):
        with pytest.raises(websockets.InvalidStatus) as refused:
            await ws_connect(gw, path, headers={"Origin": "https://evil.example.net"})
        assert refused.value.response.status_code == 403
        assert json.loads(refused.value.response.body)["code"] == "forbidden_origin"
    status, body = await http_get(gw, "/v1/voices", headers={"Origin": "https://evil.example.net"})
    assert status == 403 and body["code"] == "forbidden_origin"
    async with aiohttp.ClientSession() as http:  # the WebRTC offer, as a page posts it
        async with http.post(
            f"{gw.url}/v1/webrtc/offer",
            json={"sdp": "v=0", "type": "offer"},
            headers={"Origin": "https://evil.example.net"},
        ) as r:
            assert r.status == 403
    assert refused_count(gw, "origin") == 4

    ok = await ws_connect(gw, headers={"Origin": "https://app.example.com"})
    await start_session(ok)
    own_page = await ws_connect(gw, headers={"Origin": f"http://127.0.0.1:{gw.port}"})  # the gateway's demo page
    await start_session(own_page)
    no_origin = await ws_connect(gw)  # servers, SDKs, telephony send none
    await start_session(no_origin)
    for ws in (ok, own_page, no_origin):
        await ws.close()


async def test_an_empty_allowlist_lets_any_origin_in_but_sends_no_cors_header(start_gateway):
    gw = await start_gateway()
    ws = await ws_connect(gw, headers={"Origin": "https://anywhere.example.org"})
    await start_session(ws)
    await ws.close()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{gw.url}/v1/voices", headers={"Origin": "https://anywhere.example.org"}) as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


async def test_a_listed_origin_gets_cors_so_its_page_can_fetch_cross_origin(start_gateway):
    gw = await start_gateway({"server": {"allowed_origins": ["https://app.example.com"]}})
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    async with aiohttp.ClientSession() as http:
        async with http.options(f"{gw.url}/v1/webrtc/offer", headers=preflight) as r:
            assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
            assert "authorization" in r.headers["Access-Control-Allow-Headers"].lower()
        async with http.options(
            f"{gw.url}/v1/webrtc/offer", headers={**preflight, "Origin": "https://evil.example.net"}
        ) as r:
            assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
        async with http.get(f"{gw.url}/v1/voices", headers={"Origin": "https://app.example.com"}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"


# ---------------------------------------------------------------- tokens
async def mint(gw, key: str | None = "k1", body: dict | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.url}/v1/tokens", headers=headers, json=body) as r:
            return r.status, await r.json()


async def test_a_token_opens_exactly_one_session_and_never_mints_another(start_gateway):
    import time

    gw = await start_gateway({"server": {"api_keys": ["k1"], "token_ttl_s": 120}})
    assert (await mint(gw, key=None))[0] == 401
    assert (await mint(gw, key="wrong"))[0] == 401
    status, minted = await mint(gw)
    assert status == 200 and minted["token"].startswith("vg1.")
    assert time.time() + 100 < minted["expires_at"] <= time.time() + 121
    token = minted["token"]
    assert (await mint(gw, key=token))[0] == 401  # a token cannot mint tokens

    # read-only routes check it without spending it
    status, _ = await http_get(gw, "/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert status == 200
    client = await Client.connect(gw, path=f"/v1/ws?token={token}")
    assert (await client.start())["session_id"]
    with pytest.raises(websockets.InvalidStatus) as again:
        await Client.connect(gw, path=f"/v1/ws?token={token}")
    assert again.value.response.status_code == 401 and b"already used" in again.value.response.body
    await client.close()

    _, second = await mint(gw)  # Bearer works as well as ?token=
    c2 = await Client.connect(gw, additional_headers={"Authorization": f"Bearer {second['token']}"})
    await c2.start()
    await c2.close()
    assert refused_count(gw, "token") == 1


async def test_expired_forged_and_foreign_tokens_are_refused(start_gateway):
    gw = await start_gateway({"server": {"api_keys": ["k1"]}})
    other = await start_gateway({"server": {"api_keys": ["another-key"]}})
    _, short = await mint(gw, body={"ttl_s": 0.3})
    _, good = await mint(gw)
    _, foreign = await mint(other, key="another-key")
    payload, sig = good["token"][4:].split(".")
    forged = "vg1." + payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + sig
    await asyncio.sleep(0.4)
    for token, why in ((short["token"], b"expired"), (forged, b"not valid"), (foreign["token"], b"not valid")):
        with pytest.raises(websockets.InvalidStatus) as refused:
            await Client.connect(gw, path=f"/v1/ws?token={token}")
        assert refused.value.response.status_code == 401 and why in refused.value.response.body
    assert (await mint(gw, body={"ttl_s": "soon"}))[0] == 400
    client = await Client.connect(gw, path=f"/v1/ws?token={good['token']}")  # the genuine one still works
    await client.start()
    await client.close()


async def test_an_api_key_in_the_query_string_is_refused_naming_the_header(start_gateway):
    """A long-lived key in a URL ends up in access logs: ?token= takes minted tokens only, on every door."""
    gw = await start_gateway({"server": {"api_keys": ["k1-long-lived"]}})
    for path in ("/v1/ws?token=k1-long-lived", "/v1/control?token=k1-long-lived", "/v1/vonage?token=k1-long-lived"):
        with pytest.raises(websockets.InvalidStatus) as refused:
            await Client.connect(gw, path=path)
        assert refused.value.response.status_code == 401, path
        assert (
            b"Authorization: Bearer" in refused.value.response.body
            and b"not accepted in ?token=" in refused.value.response.body
        )
    assert refused_count(gw, "key_in_query") == 3
    status, _ = await http_get(gw, "/v1/models?token=k1-long-lived")
    assert status == 401
    async with aiohttp.ClientSession() as http:  # nor does minting take a key from the URL
        async with http.post(f"{gw.url}/v1/tokens?token=k1-long-lived") as r:
            assert r.status == 401
    _, minted = await mint(gw, key="k1-long-lived")  # a short-lived token is what the query string is for
    client = await Client.connect(gw, path=f"/v1/ws?token={minted['token']}")
    assert (await client.start())["session_id"]
    await client.close()
