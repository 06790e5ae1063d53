"""The caller's new offers in an inbound call, on loopback: an UPDATE carrying SDP (RFC 3311, with SIPp) holds,
resumes and changes the codec as a re-INVITE does, answered with our SDP in its 200; a re-INVITE changing nothing
(a session refresh) tells the agent nothing."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.sip.conftest import sip_port
from tests.sip.sipp import run_sipp
from tests.sip.udp_caller import UdpCaller, ack, invite, offer
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


async def test_a_reinvite_offering_the_same_sdp_tells_the_agent_nothing_and_a_hold_still_does(sip_gateway):
    """A session refresh re-INVITE repeats the caller's SDP (its o= version bumped): answered 200, and no
    `call.media` (nothing changed); a hold after it still gives `held`. Before: every re-INVITE sent `call.media`."""
    gw = await sip_gateway()
    caller = UdpCaller()
    call_id = f"same-sdp-{uuid.uuid4().hex}"
    try:
        tag = to_tag(await caller.call(sip_port(gw), call_id))
        control = await Control.connect(gw)
        await control.attach(call_id)
        assert (await control.expect("call.media", timeout=5))["state"] == "connected"
        local, rtp = caller.sip.getsockname()[1], caller.rtp.getsockname()[1]
        same = offer(rtp).replace("o=t 1 1", "o=t 1 2")
        held = offer(rtp).replace("o=t 1 1", "o=t 1 3") + "a=sendonly\r\n"
        for cseq, sdp in ((2, same), (3, held)):
            caller.sip.sendto(invite(call_id, local, rtp, sdp=sdp, to_tag=tag, cseq=cseq), ("127.0.0.1", sip_port(gw)))
            answer = await _final(caller)
            assert answer.startswith("SIP/2.0 200"), answer
            caller.sip.sendto(ack(call_id, local, tag), ("127.0.0.1", sip_port(gw)))
            if cseq == 2:
                with pytest.raises(TimeoutError):
                    await control.expect("call.media", timeout=1.0)
        assert (await control.expect("call.media", timeout=5))["state"] == "held"
        await control.ws.close()
    finally:
        caller.close()


def to_tag(message: str) -> str:
    to = next(line for line in message.split("\r\n") if line.lower().startswith("to:"))
    return to.split("tag=", 1)[1].split(";")[0]


async def _final(caller: UdpCaller) -> str:
    while True:
        data, _ = await caller.recv(caller.sip)
        if data.startswith(b"SIP/2.0 ") and int(data[8:11]) >= 200:
            return data.decode()
