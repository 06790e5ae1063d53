"""The caller's new offers in an inbound call, with SIPp on loopback: an UPDATE carrying SDP (RFC 3311) holds,
resumes and changes the codec as a re-INVITE does, answered with our SDP in its 200."""

from __future__ import annotations

import asyncio

import pytest

from tests.sip.conftest import sip_port
from tests.sip.sipp import run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_an_update_with_an_offer_holds_and_resumes_in_another_codec(sip_gateway, tmp_path, transport):
    """Before: both UPDATEs got 488 (no handler answered their offers) and SIPp fails on the first."""
    gw = await sip_gateway()
    control = await Control.connect(gw)
    await control.attach("sipp-update")
    sipp = asyncio.create_task(
        run_sipp(tmp_path, sip_port(gw), "update_offer.xml", fields=["sipp-update"], tcp=transport == "tcp")
    )
    try:
        assert (await control.expect("call.media", timeout=10))["state"] == "connected"
        held = await control.expect("call.media", timeout=5)
        assert held["state"] == "held"
        resumed = await control.expect("call.media", timeout=5)
        assert resumed["state"] == "connected" and resumed["codec"] == "PCMA"
        ended = await control.expect("call.media", timeout=5, state="ended")
        assert ended["reason"] == "hangup"
        (await sipp).assert_ok()  # the 200s' answers: recvonly for the hold, RTP/AVP 8 for the resume
    finally:
        await control.ws.close()
