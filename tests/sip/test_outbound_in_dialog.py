"""An answered outbound call is an ordinary SIP call in its dialog, with SIPp as the far end on loopback: its
re-INVITE and UPDATE are answered with SDP (hold, resume, a new codec), OPTIONS and INFO DTMF too; session timers
(RFC 4028) are offered on our INVITE, retried after a 422, refreshed by us when the 2xx makes us the refresher,
and the call is ended with BYE when our refresh goes unanswered; `call.transfer` sends REFER with the `X-`
headers the agent set. The session-timer tests wait for the protocol's own timers (90 s, the RFC's floor)."""

from __future__ import annotations

import asyncio

import pytest

from tests.sip.sipp import free_udp_port, run_sipp
from tests.sip.test_outbound_calls import KEY, _post, _trunk
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


async def _dial(sip_gateway, tmp_path, scenario: str, timeout_s: float = 30.0, transport: str = "udp", **sip):
    """A gateway with a trunk to SIPp running `scenario`; the call placed and its agent attached and answered."""
    far = free_udp_port()
    gw = await sip_gateway(
        sip={"trunks": [{**_trunk(far), "transport": transport}], "rtp_timeout_s": 300, **sip},  # SIPp sends no RTP
        server={"api_keys": [KEY]},
    )
    options = ["-t", "t1"] if transport == "tcp" else None
    sipp = asyncio.create_task(
        run_sipp(tmp_path, None, scenario, listen_port=far, timeout_s=timeout_s, options=options)
    )
    await asyncio.sleep(0.5)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    assert status == 201, body
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    await control.attach(body["call_id"])
    await control.expect("call.answered")
    return gw, sipp, control


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_the_far_ends_reinvite_update_options_and_info_are_answered(sip_gateway, tmp_path, transport):
    """Before: every re-INVITE or UPDATE on an outbound call got 501 (SIPp fails on the first)."""
    gw, sipp, control = await _dial(sip_gateway, tmp_path, "out_in_dialog.xml", transport=transport)
    try:
        held = await control.expect("call.media", state="held")
        await control.expect("call.media", state="connected", codec="PCMA")  # the UPDATE resumed it in A-law
        dtmf = await control.expect("dtmf")
        assert (dtmf["digit"], dtmf["via"]) == ("7", "info")
        ended = await control.expect("call.media", state="ended")
        assert ended["reason"] == "hangup" and held["leg"] == "sip"
        (await sipp).assert_ok()  # each got 200; the hold's answer said recvonly, the UPDATE's RTP/AVP 8
    finally:
        await control.ws.close()


async def test_a_422_is_answered_with_an_invite_carrying_the_asked_min_se(sip_gateway, tmp_path):
    """Before: our INVITE offered no session timer, and a 422 failed the call (rejected/422)."""
    gw, sipp, control = await _dial(sip_gateway, tmp_path, "out_too_small.xml")
    try:
        await control.send({"type": "session.end"})
        (await sipp).assert_ok()  # the second INVITE said Session-Expires: 3600 and Min-SE: 3600; then our BYE
    finally:
        await control.ws.close()


async def test_session_timers_on_outbound_calls(sip_gateway, tmp_path):
    """Three outbound calls at once, one SIPp far end each, waiting on the RFC's own timers (90 s, its floor), so
    the wait is paid once:

    * `refresh`: Session-Expires: 90;refresher=uac in the 2xx: our UPDATE comes within 45 s and the call goes on
      after it. Before: no refresh was ever sent (SIPp times out waiting for the UPDATE).
    * `unanswered`: no UPDATE in the far end's Allow: we refresh with a re-INVITE at 45 s; nobody answers it (32 s
      of retransmissions), so we send BYE. Before: no refresh and no BYE (SIPp times out).
    * `silent`: Session-Expires: 90;refresher=uas in the 2xx, and the far end never refreshes: BYE after 60 s.
      Before: the call stayed up (SIPp times out waiting for the BYE)."""
    scenarios = {
        "refresh": ("out_session_refresh.xml", 90),
        "unanswered": ("out_session_unanswered.xml", 120),
        "silent": ("out_session_expires.xml", 100),
    }
    ports = {name: free_udp_port() for name in scenarios}
    gw = await sip_gateway(
        sip={"trunks": [{**_trunk(ports[name]), "name": name} for name in scenarios], "rtp_timeout_s": 300},
        server={"api_keys": [KEY]},
    )
    sipps = {
        name: asyncio.create_task(run_sipp(tmp_path, None, scenario, listen_port=ports[name], timeout_s=timeout_s))
        for name, (scenario, timeout_s) in scenarios.items()
    }
    await asyncio.sleep(0.5)
    controls, call_ids = {}, {}
    try:
        for name in scenarios:
            status, body = await _post(gw, {"to": "+15551234567", "trunk": name})
            assert status == 201, body
            call_ids[name] = body["call_id"]
            controls[name] = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
            await controls[name].attach(body["call_id"])
            await controls[name].expect("call.answered")

        async def refreshed() -> None:
            control = controls["refresh"]
            await asyncio.sleep(50)  # past the refresh at 45 s
            assert call_ids["refresh"] in gw.calls.ids(), "the call ended after its refresh"
            await control.send({"type": "text", "turn_id": "t1", "text": "Still here.", "final": True})
            done = await control.expect("turn.done", timeout=15)
            assert done["played_ms"] > 200
            await control.send({"type": "session.end"})
            (await sipps["refresh"]).assert_ok()  # the INVITE offered a timer, the UPDATE came, then our BYE

        async def expired(name: str, timeout: float) -> None:
            ended = await controls[name].expect("call.media", state="ended", timeout=timeout)
            assert ended["reason"] == "session_expired", name
            (await sipps[name]).assert_ok()  # unanswered: the re-INVITE offered our SDP with refresher=uac; then BYE

        await asyncio.gather(refreshed(), expired("unanswered", 110), expired("silent", 90))
    finally:
        for control in controls.values():
            await control.ws.close()


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_call_transfer_on_an_outbound_call_sends_refer_with_x_headers(sip_gateway, tmp_path, transport):
    """Before: call.transfer on an outbound call was refused ("not supported on outbound calls yet")."""
    gw, sipp, control = await _dial(
        sip_gateway, tmp_path, "out_refer.xml", transport=transport, transfer_targets=["sip:desk@*"]
    )
    try:
        for bad in ({"Route": "sip:evil"}, {"X-Bad": "a\r\nRoute: sip:evil"}, {f"X-H{i}": "v" for i in range(17)}):
            await control.send({"type": "call.transfer", "to": "sip:desk@example.com", "headers": bad})
            refused = await control.expect("error")
            assert refused["code"] == "bad_message" and "X- header" in refused["message"], refused
        await control.send(
            {"type": "call.transfer", "to": "sip:desk@example.com", "headers": {"X-Transfer-Reason": "callback"}}
        )
        await control.expect("call.transfer", state="requested")
        done = await control.expect("call.transfer", state="succeeded")
        assert done["status"] == 200
        await control.send({"type": "session.end"})
        (await sipp).assert_ok()  # the REFER carried Refer-To and X-Transfer-Reason; the NOTIFY got 200; BYE
    finally:
        await control.ws.close()
