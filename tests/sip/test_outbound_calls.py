"""POST /v1/calls end to end: a real gateway dials SIPp (the trunk's far end) on loopback; the agent on
/v1/control sees the progress and the answer, speaks, and ends the call with BYE; bad requests get stable codes."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from tests.sip.conftest import sip_port
from tests.sip.sipp import free_udp_port, run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

KEY = "outbound-test-key"
STRANGER = "127.0.0.66"  # another address than the trunk's


def _trunk(port: int) -> dict:
    return {"name": "far", "address": f"127.0.0.1:{port}", "from": "sip:+15550100@voxgate.test"}


async def _post(gw, body, key=KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.url}/v1/calls", json=body, headers=headers) as r:
            return r.status, await r.json()


async def test_an_outbound_call_is_answered_spoken_on_and_hung_up(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer.xml", listen_port=far, fields=["bye"]))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far", "headers": {"X-Campaign": "c1"}})
    assert status == 201, body
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        ringing = await control.expect("call.progress", state="ringing")
        answered = await control.expect("call.answered")
        assert ringing["status"] == 180 and answered["status"] == 200
        sip = answered["sip"]
        assert sip["direction"] == "outbound" and sip["request_uri"] == f"sip:+15551234567@127.0.0.1:{far}"
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello from voxgate.", "final": True})
        done = await control.expect("turn.done", timeout=15)
        assert done["played_ms"] > 200
        await control.send({"type": "call.transfer", "to": "sip:desk@127.0.0.1"})
        refused = await control.expect("error")  # no sip.transfer_targets: refused, and the call goes on
        assert refused["code"] == "transfer_not_allowed"
        await control.send({"type": "session.end"})
        run = await sipp
        run.assert_ok()  # SIPp saw the ACK and then our BYE
    finally:
        await control.ws.close()


async def test_a_busy_far_end_fails_the_call_with_busy(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_busy.xml", listen_port=far))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": f"sip:bob@127.0.0.1:{far}", "trunk": "far"})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        failed = await control.expect("call.failed")
        assert (failed["code"], failed["status"]) == ("busy", 486)
        (await sipp).assert_ok()  # the 486 was ACKed
    finally:
        await control.ws.close()


@pytest.mark.parametrize(
    "body, key, status, code",
    [
        ({"to": "+15551234567", "trunk": "far"}, None, 401, "unauthorized"),
        ({"to": "+15551234567", "trunk": "nope"}, KEY, 400, "bad_message"),
        ({"to": "5551234567", "trunk": "far"}, KEY, 400, "bad_message"),
        ({"to": "+15551234567", "trunk": "far", "from": "bob"}, KEY, 400, "bad_message"),
        ({"to": "+15551234567", "trunk": "far", "headers": {"Route": "x"}}, KEY, 400, "bad_message"),
        ({"to": "+15551234567", "trunk": "far", "ring_timeout_s": 0}, KEY, 400, "bad_message"),
        ({"to": "+15551234567", "trunk": "far", "colour": "red"}, KEY, 400, "bad_message"),
    ],
)
async def test_bad_requests_get_stable_codes(sip_gateway, body, key, status, code):
    gw = await sip_gateway(sip={"trunks": [_trunk(5999)]}, server={"api_keys": [KEY]})
    got, answer = await _post(gw, body, key)
    assert got == status and answer["code"] == code, answer


async def test_calls_still_ringing_count_against_capacity(sip_gateway):
    """server.max_sessions 1: a call placed (its INVITE unanswered) holds the place, a second POST gets 503."""
    silent = free_udp_port()  # nothing answers there
    gw = await sip_gateway(sip={"trunks": [_trunk(silent)]}, server={"api_keys": [KEY], "max_sessions": 1})
    first, _ = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    second, answer = await _post(gw, {"to": "+15551234568", "trunk": "far"})
    assert first == 201 and (second, answer["code"]) == (503, "at_capacity")


async def test_ring_timeout_sends_cancel_and_fails_with_no_answer(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_ringing.xml", listen_port=far))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far", "ring_timeout_s": 2})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        failed = await control.expect("call.failed")
        assert (failed["code"], failed["status"]) == ("no_answer", 487)
        (await sipp).assert_ok()  # SIPp saw the CANCEL and the 487's ACK
    finally:
        await control.ws.close()


async def test_a_strangers_forged_busy_does_not_end_a_ringing_outbound_call(sip_gateway, tmp_path):
    """While the trunk rings, a stranger (another address) who learnt the Call-ID sends a 486 for our INVITE to
    the gateway's SIP port. Only the trunk may answer its INVITE: the call rings on to its real outcome."""
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_ringing.xml", listen_port=far))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far", "ring_timeout_s": 2})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind((STRANGER, 0))
    try:
        await control.attach(body["call_id"])
        await asyncio.sleep(0.5)  # the INVITE is out and rings (its progress may precede the attach: not replayed)
        forged = (
            "SIP/2.0 486 Busy Here\r\n"
            f"Via: SIP/2.0/UDP {STRANGER}:{stranger.getsockname()[1]};branch=z9hG4bKforged\r\n"
            "From: <sip:+15550100@voxgate.test>;tag=forged\r\n"
            "To: <sip:+15551234567@127.0.0.1>;tag=forged\r\n"
            f"Call-ID: {body['call_id']}\r\n"
            "CSeq: 1 INVITE\r\n"
            "Content-Length: 0\r\n\r\n"
        )
        stranger.sendto(forged.encode(), ("127.0.0.1", sip_port(gw)))
        failed = await control.expect("call.failed")
        assert (failed["code"], failed["status"]) == ("no_answer", 487)  # the old dialer: ("busy", 486)
        (await sipp).assert_ok()
    finally:
        stranger.close()
        await control.ws.close()
