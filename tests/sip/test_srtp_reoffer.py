"""A far end's re-INVITE in an `optional` SRTP trunk's call keyed with best-effort SDES (a=crypto inside RTP/AVP,
RFC 4568): baresip over TLS (its best-effort `srtp` media encryption) answers our call, then holds it; its hold
offer keeps RTP/AVP with keys and must be taken (the call goes on SRTP), not refused with 488."""

from __future__ import annotations

import pytest

from tests.sip.test_outbound_calls import KEY, _post
from tests.sip.test_outbound_tls import AUTH, _baresip_over_tls, _gateway_config, _tls_trunk
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")
pytest.importorskip("pylibsrtp", reason="pylibsrtp is not installed (the sip extra)")


async def test_a_best_effort_srtp_call_takes_a_reinvite_keeping_its_keys(sip_gateway, tmp_path):
    """Before: the leg compared the re-offer's profile alone (RTP/AVP: "plain") with a keyed call and answered the
    hold 488, so no call.media `held` came."""
    ua, tls_port, their_cert = await _baresip_over_tls(tmp_path, "srtp")
    try:
        trunk = _tls_trunk(tls_port, their_cert, srtp="optional")
        gw = await sip_gateway(sip=_gateway_config(tmp_path, trunk), server={"api_keys": [KEY]})
        status, body = await _post(gw, {"to": f"sip:tester@127.0.0.1:{tls_port}", "trunk": "secure"})
        assert status == 201, body
        control = await Control.connect(gw, additional_headers=AUTH)
        try:
            await control.attach(body["call_id"])
            await control.expect("call.answered", timeout=15)
            (c,) = gw.legs["gateway.legs.sip"].calls.values()
            assert c.srtp is not None and c.offer.proto.upper() == "RTP/AVP"  # best-effort SRTP, as it began
            await ua.command("hold")
            await control.expect("call.media", timeout=10, state="held")
            assert c.srtp is not None  # still SRTP, with the keys of the first offer and answer
            await control.send({"type": "session.end"})
            await ua.event("CALL_CLOSED", timeout=10)
        finally:
            await control.ws.close()
    finally:
        await ua.stop()
