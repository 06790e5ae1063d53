"""Locks on the telephony doors: unsigned Twilio streams, the AudioSocket bind address, allowlist and per-IP caps."""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest
import websockets

from gateway.wire.twilio import twilio_signature
from tests.security.test_doors import OTHER, refused_count
from tests.telephony.clients import Control, TwilioClient, ws_url


# ---------------------------------------------------------------- Twilio
async def test_with_api_keys_and_no_auth_token_unsigned_twilio_streams_are_refused(make_gateway, caplog):
    gw = await make_gateway(server={"api_keys": ["k1"]})
    with pytest.raises(websockets.InvalidStatus) as refused:
        await TwilioClient.connect(gw)
    assert refused.value.response.status_code == 403 and b"unsigned" in refused.value.response.body
    with pytest.raises(websockets.InvalidStatus):  # nothing can be verified: a signature does not help either
        await TwilioClient.connect(
            gw, headers={"X-Twilio-Signature": twilio_signature("guess", ws_url(gw, "/v1/twilio"))}
        )
    assert refused_count(gw, "twilio_unsigned") == 2
    assert any("refuses every stream" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


async def test_twilio_allow_unsigned_opens_the_door_and_says_so(make_gateway, caplog):
    gw = await make_gateway(server={"api_keys": ["k1"]}, telephony={"twilio_allow_unsigned": True})
    tw = await TwilioClient.connect(gw)
    await tw.start()
    await asyncio.sleep(0.05)
    assert gw.calls.get("MZ0001") is not None
    await tw.stop()
    assert any("/v1/twilio is OPEN" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


async def test_with_an_auth_token_a_signed_stream_passes_beside_api_keys(make_gateway, monkeypatch):
    monkeypatch.setenv("VOXGATE_TEST_TWILIO_TOKEN", "secret-token")
    gw = await make_gateway(
        server={"api_keys": ["k1"]}, telephony={"twilio_auth_token_env": "VOXGATE_TEST_TWILIO_TOKEN"}
    )
    url = ws_url(gw, "/v1/twilio")
    with pytest.raises(websockets.InvalidStatus):
        await TwilioClient.connect(gw)
    tw = await TwilioClient.connect(gw, headers={"X-Twilio-Signature": twilio_signature("secret-token", url)})
    await tw.start()
    await tw.stop()


# ---------------------------------------------------------------- AudioSocket
async def audiosocket(gw, source: str, host: str = "127.0.0.1", call: uuid.UUID | None = None):
    reader, writer = await asyncio.open_connection(host, gw.audiosocket.port, local_addr=(source, 0))
    writer.write(struct.pack(">BH", 0x01, 16) + (call or uuid.uuid4()).bytes)
    return reader, writer


async def closed_at_once(reader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 2) == b""  # EOF, not even a hangup frame
    except ConnectionResetError:
        return True


async def test_audiosocket_takes_only_allowed_peers(make_gateway):
    gw = await make_gateway(
        telephony={"audiosocket_port": 0, "audiosocket_allow": [f"{OTHER}/32"], "unknown_call_timeout_s": 2}
    )
    reader, writer = await audiosocket(gw, "127.0.0.1")
    assert await closed_at_once(reader)
    writer.close()
    assert refused_count(gw, "audiosocket_allow") == 1

    control = await Control.connect(gw)
    call = uuid.uuid4()
    await control.attach(str(call))
    reader, writer = await audiosocket(gw, OTHER, call=call)  # the allowed peer gets its call
    assert (await control.expect("call.media"))["state"] == "connected"
    writer.write(struct.pack(">BH", 0x00, 0))  # hang up
    writer.close()
    await control.close()


async def test_audiosocket_binds_to_the_configured_address_only(make_gateway):
    gw = await make_gateway(telephony={"audiosocket_port": 0, "audiosocket_host": "127.0.0.3"})
    assert gw.audiosocket._server.sockets[0].getsockname()[0] == "127.0.0.3"
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", gw.audiosocket.port)
    reader, writer = await audiosocket(gw, "127.0.0.1", host="127.0.0.3")
    await asyncio.sleep(0.1)
    assert not reader.at_eof()
    writer.close()


async def test_audiosocket_per_ip_cap(make_gateway):
    gw = await make_gateway(
        server={"limits": {"max_connections_per_ip": 1}}, telephony={"audiosocket_port": 0, "unknown_call_timeout_s": 2}
    )
    first = await audiosocket(gw, OTHER)
    second = await audiosocket(gw, OTHER)
    assert await closed_at_once(second[0])
    assert refused_count(gw, "max_connections_per_ip") == 1
    await asyncio.sleep(0.1)
    assert not first[0].at_eof()
    first[1].close()
    second[1].close()


async def test_a_bad_allowlist_entry_is_refused_at_load():
    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="telephony.audiosocket_allow"):
        load_config(None, {"telephony": {"audiosocket_allow": ["10.0.0.0/33"]}})
    with pytest.raises(ConfigError, match="server.allowed_origins"):
        load_config(None, {"server": {"allowed_origins": ["app.example.com"]}})


async def test_a_media_wire_takes_a_session_token_as_its_basic_auth_password_once(make_gateway):
    import base64
    import json

    import aiohttp

    gw = await make_gateway(server={"api_keys": ["k1"]})
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.url}/v1/tokens", headers={"Authorization": "Bearer k1"}) as r:
            token = (await r.json())["token"]
    basic = {"Authorization": "Basic " + base64.b64encode(f"asterisk:{token}".encode()).decode()}
    url = f"ws://127.0.0.1:{gw.port}/v1/asterisk"
    ws = await websockets.connect(url, subprotocols=["media"], additional_headers=basic)
    await ws.send(
        json.dumps(
            {"event": "MEDIA_START", "channel_id": "tok-1", "format": "ulaw", "optimal_frame_size": 160, "ptime": 20}
        )
    )
    await asyncio.sleep(0.1)
    assert gw.calls.get("tok-1") is not None
    with pytest.raises(websockets.InvalidStatus) as again:  # spent
        await websockets.connect(url, subprotocols=["media"], additional_headers=basic)
    assert again.value.response.status_code == 401
    await ws.close()
