"""Route sets (RFC 3261 §12.1.1, §12.1.2, §12.2.1.1) with SIPp on loopback, both ways: a call through
record-routing proxies keeps them on the path. Inbound, our 200 copies the INVITE's Record-Route headers and our
BYE carries them as Route headers in the same order; outbound, our ACK and BYE carry the 2xx's Record-Route
reversed. SIPp checks each message's headers (a failed check fails its run). The pure rules are
tests/sip/test_route_parts.py's."""

from __future__ import annotations

import asyncio

import pytest

from tests.sip.conftest import sip_port
from tests.sip.sipp import free_udp_port, run_sipp
from tests.sip.test_outbound_calls import KEY, _post, _trunk
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


async def _acked(gw) -> None:
    calls = gw.legs["gateway.legs.sip"].calls
    for _ in range(100):
        if calls and all(c.acked for c in calls.values()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no ACK for our 200")


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_an_inbound_call_answers_and_hangs_up_through_the_record_route(sip_gateway, tmp_path, transport):
    """Before: the 200 carried no Record-Route and the BYE's Route headers came reversed (SIPp's checks fail)."""
    gw = await sip_gateway()
    control = await Control.connect(gw)
    await control.attach("sipp-rr")
    sipp = asyncio.create_task(
        run_sipp(tmp_path, sip_port(gw), "record_route.xml", fields=["sipp-rr"], tcp=transport == "tcp")
    )
    try:
        await control.expect("call.media", timeout=10, state="connected")
        await _acked(gw)  # SIPp's ACK came: its scenario waits for our BYE now
        await control.send({"type": "session.end"})
        (await sipp).assert_ok()  # SIPp's checks: the 200's Record-Route, the BYE's Route and Request-URI
    finally:
        await control.ws.close()


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_an_outbound_call_acks_and_hangs_up_through_the_reversed_record_route(sip_gateway, tmp_path, transport):
    """Before: our ACK and BYE carried no Route header (SIPp's checks fail)."""
    far = free_udp_port()
    gw = await sip_gateway(
        sip={"trunks": [{**_trunk(far), "transport": transport}], "rtp_timeout_s": 300}, server={"api_keys": [KEY]}
    )
    options = ["-t", "t1"] if transport == "tcp" else None
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_record_route.xml", listen_port=far, options=options))
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    assert status == 201, body
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        await control.expect("call.answered")
        await control.send({"type": "session.end"})
        (await sipp).assert_ok()  # SIPp's checks: the ACK's and the BYE's Route headers, SIPp's address first
    finally:
        await control.ws.close()


async def test_an_outbound_calls_ack_and_bye_go_to_the_first_route_not_the_trunk(sip_gateway, tmp_path):
    """The 2xx names a record-routing proxy nearest us at another address (a socket of this test): the ACK for the
    200 and the BYE go to it (§12.2.1.1), Route headers and all. Before: the ACK went where the INVITE went."""
    loop = asyncio.get_running_loop()
    heard: asyncio.Queue[bytes] = asyncio.Queue()

    class Proxy(asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            heard.put_nowait(data)

    proxy, _ = await loop.create_datagram_endpoint(Proxy, local_addr=("127.0.0.1", 0))
    proxy_port = proxy.get_extra_info("sockname")[1]
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)], "rtp_timeout_s": 300}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(
        run_sipp(tmp_path, None, "out_record_route_proxy.xml", listen_port=far, fields=[str(proxy_port)])
    )
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await asyncio.sleep(0.5)
        status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
        assert status == 201, body
        await control.attach(body["call_id"])
        await control.expect("call.answered")
        ack = (await asyncio.wait_for(heard.get(), 5)).decode()
        assert ack.startswith("ACK sip:sipp@"), ack  # the Request-URI is the far end's Contact
        assert f"Route: <sip:127.0.0.1:{proxy_port};lr>" in ack and "Route: <sip:proxy2.invalid;lr>" in ack
        await control.send({"type": "session.end"})
        bye = (await asyncio.wait_for(heard.get(), 5)).decode()
        assert bye.startswith("BYE sip:sipp@") and f"Route: <sip:127.0.0.1:{proxy_port};lr>" in bye, bye
        (await sipp).assert_ok()
    finally:
        await control.ws.close()
        proxy.close()
