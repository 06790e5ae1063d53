"""baresip, a real SIP user agent, calls voxgate: it records what it hears; DTMF and hang-ups from each side."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.sip.baresip import Baresip, write_wav
from tests.sip.conftest import sip_port
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


@pytest.fixture
async def baresip(tmp_path):
    t = np.arange(8000 * 6) / 8000.0
    speech = (np.sin(2 * np.pi * 300 * t) * 3000 * (t > 3.0)).astype(np.int16)  # the caller speaks after 3 s
    write_wav(tmp_path / "caller.wav", speech)
    ua = await Baresip.start(tmp_path / "baresip", tmp_path / "caller.wav")
    yield ua
    await ua.stop()


async def answered_call(gw, ua: Baresip) -> tuple[Control, str]:
    await ua.command("dial", f"sip:agent@127.0.0.1:{sip_port(gw)}")
    await ua.event("CALL_ESTABLISHED")
    for _ in range(100):
        if gw.calls.ids():
            break
        await asyncio.sleep(0.02)
    call_id = gw.calls.ids()[0]  # the SIP Call-ID baresip chose
    control = await Control.connect(gw)
    await control.attach(call_id)
    return control, call_id


async def test_baresip_hears_the_agent_and_hangs_up(sip_gateway, baresip):
    gw = await sip_gateway()
    control, _ = await answered_call(gw, baresip)
    began = asyncio.get_running_loop().time()
    await asyncio.sleep(0.5)
    await control.send(
        {"type": "text", "turn_id": "t1", "text": "Hello from the gateway, this is a test.", "final": True}
    )
    done = await control.expect("turn.done", turn_id="t1", timeout=15)
    assert done["interrupted"] is False and done["played_ms"] > 500
    await baresip.command("sndcode", "5")  # RFC 4733
    dtmf = await control.expect("dtmf", timeout=5)
    assert dtmf["digit"] == "5"
    await asyncio.sleep(0.3)
    await baresip.command("hangup")
    call_s = asyncio.get_running_loop().time() - began
    ended = await control.expect("call.media", timeout=5, state="ended")
    assert ended["reason"] == "hangup"
    await baresip.event("CALL_CLOSED", timeout=5)
    await asyncio.sleep(0.3)  # sndfile closes its WAV when the audio stream goes

    pcm, rate = baresip.heard()
    assert rate == 8000
    frame = rate // 50
    levels = np.abs(pcm[: len(pcm) // frame * frame].reshape(-1, frame).astype(np.int32)).max(axis=1)
    loud = np.flatnonzero(levels > 500)
    assert len(loud), "baresip heard only silence"
    assert levels[:10].max() < 500, "the call opened with noise, not silence"  # 0.5 s of idle silence first
    heard_ms = (loud[-1] - loud[0] + 1) * 20
    assert abs(heard_ms - done["played_ms"]) <= 200, (
        f"heard {heard_ms} ms of speech, the gateway played {done['played_ms']} ms"
    )
    # the recording spans the call: RTP every 20 ms from answer to hang-up, silence around the speech
    assert call_s - 0.6 <= len(pcm) / rate <= call_s + 0.6, f"{len(pcm) / rate:.2f} s recorded of a {call_s:.2f} s call"


async def test_agent_ends_the_call_with_bye(sip_gateway, baresip):
    gw = await sip_gateway()
    control, _ = await answered_call(gw, baresip)
    await control.send({"type": "session.end"})
    closed = await baresip.event("CALL_CLOSED", timeout=5)
    assert closed["type"] == "CALL_CLOSED"
    await asyncio.sleep(0.2)
    assert len(gw.calls) == 0


async def test_with_no_agent_the_greeting_answers(sip_gateway, baresip):
    gw = await sip_gateway(sip={"greeting": "Hello, this is voxgate."})
    await baresip.command("dial", f"sip:agent@127.0.0.1:{sip_port(gw)}")
    await baresip.event("CALL_ESTABLISHED")
    await asyncio.sleep(2.0)  # the greeting (under half a second of speech here) plays with nobody attached
    await baresip.command("hangup")
    await baresip.event("CALL_CLOSED", timeout=5)
    await asyncio.sleep(0.3)
    pcm, rate = baresip.heard()
    loud = np.abs(pcm.astype(np.int32)) > 500
    assert loud.sum() > rate * 0.3, "baresip did not hear the greeting"
