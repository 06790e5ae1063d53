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


async def test_a_call_whose_refreshes_stop_is_ended_with_bye(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"rtp_timeout_s": 300})  # SIPp sends no RTP: only the session timer may end it
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "session_expires.xml", timeout_s=90))
    for _ in range(200):
        if gw.calls.ids():
            break
        await asyncio.sleep(0.05)
    control = await Control.connect(gw)
    await control.attach(gw.calls.ids()[0])
    ended = await control.expect("call.media", state="ended", timeout=80)
    assert ended["reason"] == "session_expired"
    (await sipp).assert_ok()  # the 200 OK carried Session-Expires: 90;refresher=uac and Require: timer; BYE came


async def test_a_refresh_of_ours_that_goes_unanswered_ends_the_call_with_bye(sip_gateway, tmp_path):
    """The caller makes us the refresher (refresher=uas, UPDATE allowed): our UPDATE comes at 45 s, is sent again
    while unanswered, and after 32 s without an answer the call is ended with BYE. Before: aiosipua sent one
    UPDATE and nothing more; the call stayed up (SIPp timed out waiting for the BYE)."""
    gw = await sip_gateway(sip={"rtp_timeout_s": 300})  # SIPp sends no RTP: only the session timer may end it
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "session_refresh_unanswered.xml", timeout_s=110))
    for _ in range(200):
        if gw.calls.ids():
            break
        await asyncio.sleep(0.05)
    control = await Control.connect(gw)
    await control.attach(gw.calls.ids()[0])
    ended = await control.expect("call.media", state="ended", timeout=110)
    assert ended["reason"] == "session_expired"
    (await sipp).assert_ok()  # Session-Expires: 90;refresher=uas in the 200 OK; our UPDATE (refresher=uac); BYE


async def test_we_refresh_with_a_reinvite_when_the_callers_allow_lacks_update(sip_gateway, tmp_path):
    """The caller (record-routed, Allow without UPDATE) makes us the refresher: at 45 s our re-INVITE comes with our
    SDP and Session-Expires refresher=uac through the route set, and SIPp's 200 is ACKed the same way; the call
    goes on until SIPp hangs up. Before: the 200 handed the refresh to the caller (refresher=uac) and no
    re-INVITE ever came (SIPp's checks fail). The one wait of the RFC's 90 s floor in this file besides the
    expiry test's."""
    gw = await sip_gateway(sip={"rtp_timeout_s": 300})  # SIPp sends no RTP: only the session timer matters
    sipp = asyncio.create_task(
        run_sipp(tmp_path, sip_port(gw), "session_reinvite_refresh.xml", fields=["sipp-refresh"], timeout_s=80)
    )
    control = await Control.connect(gw)
    await control.attach("sipp-refresh")
    ended = await control.expect("call.media", state="ended", timeout=80)
    assert ended["reason"] == "hangup"  # SIPp's BYE after our refresh, not an expiry
    (await sipp).assert_ok()
