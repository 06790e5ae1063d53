"""voxgate_client places outbound calls (`place_call`, `Session.dial`) through a real gateway to SIPp on loopback."""

from __future__ import annotations

import asyncio

import pytest

from tests.sip.conftest import sip_gateway  # noqa: F401 - the fixture: a gateway with the SIP leg
from tests.sip.sipp import free_udp_port, run_sipp
from voxgate_client import CallAnswered, CallFailed, CallProgress, Session, VoxgateError, place_call
from voxgate_client.calls import calls_url

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

KEY = "client-dial-key"


def _trunk(port: int) -> dict:
    return {"name": "far", "address": f"127.0.0.1:{port}", "from": "sip:+15550100@voxgate.test"}


async def test_dial_is_answered_speaks_and_hangs_up(sip_gateway, tmp_path):  # noqa: F811
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer.xml", listen_port=far, fields=["bye"]))
    await asyncio.sleep(0.5)
    call = await Session.dial(gw.url, "+15551234567", trunk="far", headers={"X-Campaign": "c1"}, api_key=KEY)
    try:
        assert call.call_id.startswith("out-")
        answered = await call.answered(timeout=10)
        assert answered.status == 200 and answered.sip["direction"] == "outbound"
        done = await (await call.say("Hello from the Python client.")).done(timeout=15)
        assert done.played_ms > 200
        await call.end()
        seen = [ev async for ev in call.events()]
        assert any(isinstance(ev, CallProgress) and ev.state == "ringing" for ev in seen)
        assert sum(isinstance(ev, CallAnswered) for ev in seen) == 1
        (await sipp).assert_ok()  # SIPp saw the ACK and our BYE
    finally:
        await call.close()


async def test_dial_to_a_busy_far_end_raises_busy_with_the_sip_status(sip_gateway, tmp_path):  # noqa: F811
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_busy.xml", listen_port=far))
    await asyncio.sleep(0.5)
    call = await Session.dial(gw.url, f"sip:bob@127.0.0.1:{far}", trunk="far", api_key=KEY)
    try:
        with pytest.raises(VoxgateError) as failed:
            await call.answered(timeout=10)
        assert (failed.value.code, failed.value.status) == ("busy", 486)
        seen = [ev async for ev in call.events()]  # the session ends after call.failed
        assert [ev.code for ev in seen if isinstance(ev, CallFailed)] == ["busy"]
        (await sipp).assert_ok()
    finally:
        await call.close()


async def test_refusals_raise_the_gateways_code_and_http_status(sip_gateway):  # noqa: F811
    silent = free_udp_port()  # nothing answers there: the first call rings and holds the only place
    gw = await sip_gateway(sip={"trunks": [_trunk(silent)]}, server={"api_keys": [KEY], "max_sessions": 1})
    cases = [
        ({"trunk": "far", "api_key": "wrong"}, "unauthorized", 401),
        ({"trunk": "nope", "api_key": KEY}, "bad_message", 400),
        ({"trunk": "far", "api_key": KEY, "ring_timeout_s": 0}, "bad_message", 400),
    ]
    for kwargs, code, status in cases:
        with pytest.raises(VoxgateError) as refused:
            await place_call(gw.url, "+15551234567", **kwargs)
        assert (refused.value.code, refused.value.status) == (code, status), refused.value
    assert (await place_call(gw.url, "+15551234567", trunk="far", api_key=KEY)).startswith("out-")
    with pytest.raises(VoxgateError) as full:
        await place_call(gw.url, "+15551234568", trunk="far", api_key=KEY)
    assert (full.value.code, full.value.status) == ("at_capacity", 503)
    with pytest.raises(VoxgateError) as unreachable:
        await place_call(f"http://127.0.0.1:{free_udp_port()}", "+15551234567", trunk="far", api_key=KEY)
    assert unreachable.value.code == "connection_failed"


def test_calls_url_takes_any_form_of_the_gateways_url():
    assert calls_url("http://gw:8080") == "http://gw:8080/v1/calls"
    assert calls_url("ws://gw:8080/") == "http://gw:8080/v1/calls"
    assert calls_url("wss://gw.example/voxgate/v1/control/abc") == "https://gw.example/voxgate/v1/calls"
    with pytest.raises(ValueError):
        calls_url("ftp://gw")
