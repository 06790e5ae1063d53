"""Session timers (RFC 4028) on inbound calls, with SIPp as the caller: a Session-Expires below sip.min_se_s gets
422 with our Min-SE; a caller that asks for a 90 s timer and refreshes itself gets it in the 200 OK, and when its
refresh never comes the call is ended with BYE after 60 s (the test waits for it); a caller that makes us the
refresher and does not allow UPDATE gets our re-INVITE at 45 s."""

from __future__ import annotations

import asyncio

import pytest

from tests.sip.conftest import sip_port
from tests.sip.sipp import run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


async def test_a_session_interval_below_min_se_gets_422(sip_gateway, tmp_path):
    gw = await sip_gateway()
    run = await run_sipp(tmp_path, sip_port(gw), "session_too_small.xml", timeout_s=10)
    run.assert_ok()  # 422 with Min-SE: 90 and X-Voxgate-Reason: session_interval_too_small
    assert len(gw.calls) == 0
    assert gw.metrics.errors.labels(code="session_interval_too_small")._value.get() == 1


async def test_session_timers_on_inbound_calls(sip_gateway, tmp_path):
    """Three SIPp callers at once, waiting on the RFC's own timers (90 s, its floor), so the wait is paid once:

    * `expires`: the caller asks for 90 s, refreshing itself (refresher=uac), and never refreshes: the 200 OK
      carries Session-Expires: 90;refresher=uac and Require: timer, and BYE comes after 60 s.
    * `unanswered`: the caller makes us the refresher (refresher=uas, UPDATE allowed): our UPDATE comes at 45 s,
      is sent again while unanswered, and after 32 s without an answer the call is ended with BYE. Before:
      aiosipua sent one UPDATE and nothing more; the call stayed up (SIPp timed out waiting for the BYE).
    * `refresh`: the caller (record-routed, Allow without UPDATE) makes us the refresher: at 45 s our re-INVITE
      comes with our SDP and Session-Expires refresher=uac through the route set, and SIPp's 200 is ACKed the
      same way; the call goes on until SIPp hangs up. Before: the 200 handed the refresh to the caller
      (refresher=uac) and no re-INVITE ever came (SIPp's checks fail)."""
    gw = await sip_gateway(sip={"rtp_timeout_s": 300})  # SIPp sends no RTP: only the session timers may end them
    scenarios = {
        "expires": ("session_expires.xml", 90, "session_expired"),
        "unanswered": ("session_refresh_unanswered.xml", 110, "session_expired"),
        "refresh": ("session_reinvite_refresh.xml", 80, "hangup"),  # SIPp's BYE after our refresh, not an expiry
    }
    controls = {}
    for name in scenarios:  # each agent attaches before its INVITE arrives (the X-Call-Id SIPp sends)
        controls[name] = await Control.connect(gw)
        await controls[name].attach(f"sipp-{name}")
    sipps = {
        name: asyncio.create_task(
            run_sipp(tmp_path, sip_port(gw), scenario, fields=[f"sipp-{name}"], timeout_s=timeout_s)
        )
        for name, (scenario, timeout_s, _) in scenarios.items()
    }

    async def ends(name: str) -> None:
        _, timeout_s, reason = scenarios[name]
        ended = await controls[name].expect("call.media", state="ended", timeout=timeout_s)
        assert ended["reason"] == reason, (name, ended)
        (await sipps[name]).assert_ok()  # each scenario's own checks (see its comment)

    try:
        await asyncio.gather(*(ends(name) for name in scenarios))
    finally:
        for control in controls.values():
            await control.ws.close()
