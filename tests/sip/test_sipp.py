"""SIPp, the standard SIP test tool, calls voxgate on loopback: answered calls with RTP, CANCEL, no ACK, 403, load."""

from __future__ import annotations

import asyncio
import importlib.util
import wave

import numpy as np
import pytest

from tests.sip.conftest import sip_port
from tests.sip.sipp import run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


def sip_frames_sent(gw) -> float:
    return gw.metrics.frames_sent.labels(leg="sip")._value.get()


async def test_answered_call_with_rtp_from_sipp_pcap(sip_gateway, tmp_path):
    gw = await sip_gateway(telephony={"record_inbound_dir": str(tmp_path / "inbound")})
    control = await Control.connect(gw)
    await control.attach("sipp-call-1")  # the X-Call-Id SIPp sets: the agent attaches before the INVITE arrives
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "call_pcap.xml", fields=["sipp-call-", "2500"]))
    media = await control.expect("call.media", timeout=10)
    assert media["state"] == "connected" and media["leg"] == "sip"
    await control.send({"type": "text", "turn_id": "t1", "text": "Hello from the gateway.", "final": True})
    done = await control.expect("turn.done", turn_id="t1", timeout=10)
    assert done["interrupted"] is False and done["played_ms"] > 200
    dtmf = await control.expect("dtmf", timeout=10)  # SIPp's RFC 4733 pcap presses "1"
    assert dtmf["digit"] == "1" and dtmf["via"] == "rfc4733"
    ended = await control.expect("call.media", timeout=10)
    assert ended["state"] == "ended" and ended["reason"] == "hangup"  # SIPp's BYE
    (await sipp).assert_ok()
    assert sip_frames_sent(gw) >= 100  # silence and speech every 20 ms for the whole call
    # the caller's audio (SIPp's G.711 recording) reached the inbound path: the recording holds speech
    wavs = list((tmp_path / "inbound").glob("*.wav"))
    assert len(wavs) == 1
    with wave.open(str(wavs[0])) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    assert len(pcm) >= 8000 * 2 and np.abs(pcm.astype(np.int32)).max() > 1000


async def test_cancel_before_answer(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"answer_delay_ms": 3000})
    run = await run_sipp(tmp_path, sip_port(gw), "cancel.xml", timeout_s=15)
    run.assert_ok()
    await asyncio.sleep(0.2)
    assert len(gw.calls) == 0 and not gw.legs["gateway.legs.sip"].calls


async def test_caller_that_never_acks_is_hung_up(sip_gateway, tmp_path):
    gw = await sip_gateway()
    run = await run_sipp(tmp_path, sip_port(gw), "no_ack.xml", timeout_s=15)
    run.assert_ok()  # it received our BYE after sip.ack_timeout_s
    await asyncio.sleep(0.2)
    assert len(gw.calls) == 0


async def test_invite_from_outside_allow_gets_403(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"]})
    run = await run_sipp(tmp_path, sip_port(gw), "forbidden.xml", timeout_s=10)
    run.assert_ok()  # 403 with X-Voxgate-Reason: forbidden
    assert len(gw.calls) == 0


async def test_fifty_concurrent_calls(sip_gateway, tmp_path):
    # SIPp starts 50 calls a second from one address, a trunk's rate: more than the default per-source rate
    gw = await sip_gateway(sip={"greeting": "Hello, this is the voxgate demo.", "invites_per_source_per_s": 100})
    peak = 0

    async def watch():
        nonlocal peak
        while True:
            peak = max(peak, len(gw.calls))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    run = await run_sipp(
        tmp_path, sip_port(gw), "call_pcap.xml", fields=["load-", "3000"], calls=50, rate=50, timeout_s=40
    )
    watcher.cancel()
    run.assert_ok()
    assert peak >= 40, f"only {peak} calls were up at once"
    await asyncio.sleep(0.3)
    assert len(gw.calls) == 0


async def test_info_dtmf_hold_codec_change_and_transfer(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"transfer_targets": ["sip:*@example.com"]})
    control = await Control.connect(gw)
    await control.attach("sipp-dialog")
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "in_dialog.xml", fields=["sipp-dialog"]))
    assert (await control.expect("call.media", timeout=10))["state"] == "connected"
    dtmf = await control.expect("dtmf", timeout=5)
    assert dtmf["digit"] == "7" and dtmf["via"] == "info"
    held = await control.expect("call.media", timeout=5)
    assert held["state"] == "held"
    resumed = await control.expect("call.media", timeout=5)
    assert resumed["state"] == "connected" and resumed["codec"] == "PCMA"
    await control.send({"type": "call.transfer", "to": "sip:sales@example.com"})
    assert (await control.expect("call.transfer", timeout=5))["state"] == "requested"
    outcome = await control.expect("call.transfer", timeout=5)
    assert outcome["state"] == "succeeded" and outcome["status"] == 200
    ended = await control.expect("call.media", timeout=5, state="ended")
    assert ended["reason"] == "hangup"
    (await sipp).assert_ok()


async def test_the_callers_speech_barges_in(sip_gateway, tmp_path):
    """SIPp's recording, as the caller's RTP, goes through the same inbound path as other legs: Silero VAD hears
    it while the agent speaks and interrupts the turn."""
    if importlib.util.find_spec("silero_vad") is None:  # found, never imported: its import sets torch to 1 thread
        pytest.skip("needs silero_vad (the vad extra: pip install 'voxgate[vad]')")
    gw = await sip_gateway(barge_in={"mode": "vad", "min_speech_ms": 200, "echo_holdoff_ms": 0})
    control = await Control.connect(gw)
    await control.attach("sipp-barge-1")
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "call_pcap.xml", fields=["sipp-barge-", "2500"]))
    await control.expect("call.media", timeout=10)
    await control.send(
        {
            "type": "text",
            "turn_id": "long",
            "text": "This turn goes on and on while the caller talks. " * 6,
            "final": True,
        }
    )
    speech = await control.expect("user.speech", timeout=10, state="started")
    done = await control.expect("turn.done", turn_id="long", timeout=10)
    assert done["interrupted"] is True and done["interrupted_by"] == "caller", done
    assert speech["at_ms"] >= 0
    (await sipp).assert_ok()


async def test_a_call_over_tcp(sip_gateway, tmp_path):
    """The same port over TCP: answers go back on the caller's connection (not to the port in its Via)."""
    gw = await sip_gateway()
    control = await Control.connect(gw)
    await control.attach("sipp-tcp-1")
    sipp = asyncio.create_task(
        run_sipp(tmp_path, sip_port(gw), "call_pcap.xml", fields=["sipp-tcp-", "2500"], tcp=True)
    )
    assert (await control.expect("call.media", timeout=10))["state"] == "connected"
    assert (await control.expect("dtmf", timeout=10))["digit"] == "1"
    ended = await control.expect("call.media", timeout=10, state="ended")
    assert ended["reason"] == "hangup"
    (await sipp).assert_ok()


async def test_what_the_agent_says_on_hold_is_not_reported_as_played(sip_gateway, tmp_path):
    """Playback truth on hold: while SIPp holds the call (a=sendonly), no RTP goes out, so the turn's frames are
    network gaps, not played audio; the agent must not believe the caller heard it."""
    gw = await sip_gateway()
    control = await Control.connect(gw)
    await control.attach("sipp-hold-1")
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "hold_then_bye.xml", fields=["sipp-hold-1"]))
    assert (await control.expect("call.media", timeout=10))["state"] == "connected"
    assert (await control.expect("call.media", timeout=5))["state"] == "held"
    sent_before = sip_frames_sent(gw)
    await control.send({"type": "text", "turn_id": "t-held", "text": "Are you still there?", "final": True})
    done = await control.expect("turn.done", turn_id="t-held", timeout=10)
    assert sip_frames_sent(gw) == sent_before  # nothing went out while held
    assert done["played_ms"] == 0, done
    assert (await control.expect("call.media", timeout=10, state="ended"))["reason"] == "hangup"
    (await sipp).assert_ok()
