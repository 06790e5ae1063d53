"""An agent that attaches to an outbound call late still sees how it went: the gateway dials SIPp on loopback,
the agent attaches only after the answer (or the 486), and gets the latest `call.progress` and then
`call.answered` / `call.failed` right after `call.attached` (gateway/core/sticky.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.sticky import StickyEvents
from tests.sip.sipp import free_udp_port, run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

KEY = "late-attach-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


async def _gateway(sip_gateway, far: int, **overrides):
    trunk = {"name": "far", "address": f"127.0.0.1:{far}", "from": "sip:+15550100@voxgate.test"}
    return await sip_gateway(sip={"trunks": [trunk]}, server={"api_keys": [KEY]}, **overrides)


async def _place(gw, body: dict) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.url}/v1/calls", json=body, headers=AUTH) as r:
            assert r.status == 201, await r.text()
            return (await r.json())["call_id"]


async def _until(predicate, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the outbound call did not reach the state the test waits for")


async def test_an_agent_attaching_after_the_answer_gets_progress_and_answered(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await _gateway(sip_gateway, far)
    dialing = gw.legs["gateway.legs.sip"].dialing
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer.xml", listen_port=far, fields=["bye"]))
    await asyncio.sleep(0.5)
    call_id = await _place(gw, {"to": "+15551234567", "trunk": "far"})
    await _until(lambda: call_id in dialing.outbound)  # answered and ACKed: nobody was attached to hear it
    control = await Control.connect(gw, additional_headers=AUTH)
    try:
        await control.attach(call_id)
        progress = await control.expect("call.progress")
        answered = await control.expect("call.answered")
        assert (progress["state"], progress["status"]) == ("ringing", 180)  # the latest: 180 came after 100
        assert answered["status"] == 200 and answered["sip"]["direction"] == "outbound"
        order = [e["type"] for e in control.events]
        assert order.index("call.attached") < order.index("call.progress") < order.index("call.answered")
        await control.send({"type": "text", "turn_id": "t1", "text": "You picked up.", "final": True})
        assert (await control.expect("turn.done", timeout=15))["played_ms"] > 200  # the call is live
        await control.send({"type": "session.end"})
        (await sipp).assert_ok()  # SIPp got our BYE
    finally:
        await control.close()


async def test_an_agent_attaching_after_a_busy_gets_call_failed_and_the_end(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await _gateway(sip_gateway, far)
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_busy.xml", listen_port=far))
    await asyncio.sleep(0.5)
    call_id = await _place(gw, {"to": "+15551234567", "trunk": "far"})
    (await sipp).assert_ok()  # the 486 went out and was ACKed: the call has failed
    await asyncio.sleep(0.3)
    for _ in range(2):  # a second late agent learns the same
        control = await Control.connect(gw, additional_headers=AUTH)
        try:
            await control.attach(call_id)
            failed = await control.expect("call.failed")
            assert (failed["code"], failed["status"]) == ("busy", 486)
            rest = await control.expect_closed()  # then the session ends at once: no 10 s wait, no unknown_call
            assert [e["type"] for e in rest] == ["session.ended"]
        finally:
            await control.close()


async def test_an_early_agent_waits_out_a_ring_longer_than_the_unknown_call_timeout(sip_gateway, tmp_path):
    """The agent attaches at once; the far end rings past `telephony.unknown_call_timeout_s` (1 s here). The
    call is known (it is being placed): the agent gets the real outcome, not `unknown_call`."""
    far = free_udp_port()
    gw = await _gateway(sip_gateway, far, telephony={"unknown_call_timeout_s": 1})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_ringing.xml", listen_port=far))
    await asyncio.sleep(0.5)
    call_id = await _place(gw, {"to": "+15551234567", "trunk": "far", "ring_timeout_s": 3})
    control = await Control.connect(gw, additional_headers=AUTH)
    try:
        await control.attach(call_id)
        failed = await control.expect("call.failed", timeout=10)
        assert (failed["code"], failed["status"]) == ("no_answer", 487)
        assert not [e for e in control.events if e["type"] == "error"]
        (await sipp).assert_ok()
    finally:
        await control.close()


def test_kept_events_replace_by_type_keep_order_and_expire():
    now = [0.0]
    sticky = StickyEvents(keep_s=60, max_calls=3, clock=lambda: now[0])
    sticky.keep("a", {"type": "call.progress", "state": "trying"})
    sticky.keep("a", {"type": "call.progress", "state": "ringing"})
    sticky.keep("a", {"type": "call.failed", "code": "busy"})
    assert sticky.replay("a") == [
        {"type": "call.progress", "state": "ringing"},
        {"type": "call.failed", "code": "busy"},
    ]
    assert sticky.state("a") == "live"
    sticky.end(["a"])
    now[0] = 59.0
    assert sticky.state("a") == "ended" and len(sticky.replay("a")) == 2
    now[0] = 60.5
    assert sticky.state("a") is None and sticky.replay("a") == []


def test_at_most_max_calls_records_the_oldest_dropped_first():
    sticky = StickyEvents(max_calls=3)
    for call_id in "abcd":
        sticky.keep(call_id, {"type": "call.progress", "state": "trying"})
    assert len(sticky) == 3 and sticky.state("a") is None and sticky.state("d") == "live"
