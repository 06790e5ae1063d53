"""Outbound calls to a TCP trunk (`sip.trunks[].transport: tcp`): voxgate opens a connection to the trunk, its
INVITE, ACK and BYE go over it (SIPp listening on TCP, `-t t1`), and a trunk that takes no connection fails the
call with `unavailable`."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.sip.sipp import free_udp_port, run_sipp
from tests.sip.test_outbound_calls import KEY, _post
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


def _tcp_trunk(port: int) -> dict:
    return {"name": "far", "address": f"127.0.0.1:{port}", "transport": "tcp", "from": "sip:+15550100@voxgate.test"}


async def test_a_tcp_trunk_answers_and_is_hung_up_over_our_connection(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_tcp_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(
        run_sipp(tmp_path, None, "out_answer.xml", listen_port=far, fields=["bye"], options=["-t", "t1"])
    )
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": f"sip:bob@127.0.0.1:{far}", "trunk": "far"})
    assert status == 201, body
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        answered = await control.expect("call.answered", timeout=15)
        assert answered["status"] == 200
        (c,) = gw.legs["gateway.legs.sip"].calls.values()
        assert c.door.name == "TCP" and c.incoming.source_addr == ("127.0.0.1", far)  # our connection, to SIPp
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello over TCP.", "final": True})
        done = await control.expect("turn.done", timeout=15)
        assert done["played_ms"] > 200
        await control.send({"type": "session.end"})
        run = await sipp
        run.assert_ok()  # SIPp (TCP only: it reads nothing else) saw our INVITE, the ACK and then our BYE
    finally:
        await control.ws.close()


async def test_a_tcp_trunk_that_refuses_the_connection_fails_the_call_unavailable(sip_gateway, caplog):
    """Refused at once (before an agent could attach): the failure is counted and logged in one line naming the
    trunk and its address (the control socket's `call.failed` for a slower failure: test_outbound_tls.py)."""
    closed = free_udp_port()  # nothing listens there
    caplog.set_level(logging.INFO, logger="voxgate.sip")
    gw = await sip_gateway(sip={"trunks": [_tcp_trunk(closed)]}, server={"api_keys": [KEY]})
    status, _ = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    assert status == 201
    failures = gw.metrics.errors.labels(code="call_unavailable")
    for _ in range(100):
        if failures._value.get():
            break
        await asyncio.sleep(0.05)
    assert failures._value.get() == 1
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "trunk far" in r.getMessage()]
    assert len(lines) == 1 and f"127.0.0.1:{closed} over TCP) not reachable" in lines[0], lines
    assert gw.legs["gateway.legs.sip"].dialing.ringing() == 0  # its place is given back


async def test_a_tcp_trunks_bye_comes_over_our_connection_and_is_answered_there(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_tcp_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer_hangup.xml", listen_port=far, options=["-t", "t1"]))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": f"sip:bob@127.0.0.1:{far}", "trunk": "far"})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        await control.expect("call.answered", timeout=15)
        ended = await control.expect("call.media", timeout=15, state="ended")
        assert ended["reason"] == "hangup"
        (await sipp).assert_ok()  # our 200 to its BYE came back on the connection
    finally:
        await control.ws.close()


async def test_a_ringing_call_keeps_its_connection_open_past_tcp_idle_s(sip_gateway, tmp_path):
    """`tcp_idle_s` closes a connection that carries no call: a call that rings (no message for longer than that)
    is one. SIPp rings, voxgate's CANCEL at the ring timeout goes on the same connection, and the 487 comes back."""
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_tcp_trunk(far)], "tcp_idle_s": 0.5}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_ringing.xml", listen_port=far, options=["-t", "t1"]))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far", "ring_timeout_s": 2})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        failed = await control.expect("call.failed", timeout=15)
        assert (failed["code"], failed["status"]) == ("no_answer", 487)
        (await sipp).assert_ok()
    finally:
        await control.ws.close()
    assert gw.metrics.connections_refused.labels(reason="sip_tcp_idle")._value.get() == 0
