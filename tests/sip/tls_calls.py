"""baresip calling voxgate over TLS (tests/sip/test_sip_tls.py, test_sip_srtp.py): dial, attach, say, hang up,
and check that what baresip recorded is the speech the gateway played."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.sip.baresip import Baresip
from tests.telephony.clients import Control


async def dial_tls_and_say(gw, ua: Baresip, text: str):
    """baresip dials the TLS port; the agent attaches and says `text`. Returns (control, the SipCall, turn.done)."""
    leg = gw.legs["gateway.legs.sip"]
    await ua.command("dial", f"sip:agent@127.0.0.1:{leg.tls_port};transport=tls")
    await ua.event("CALL_ESTABLISHED", timeout=15)
    for _ in range(100):
        if gw.calls.ids():
            break
        await asyncio.sleep(0.02)
    (c,) = leg.calls.values()
    control = await Control.connect(gw)
    await control.attach(gw.calls.ids()[0])
    await control.send({"type": "text", "turn_id": "t1", "text": text, "final": True})
    done = await control.expect("turn.done", turn_id="t1", timeout=15)
    assert done["interrupted"] is False and done["played_ms"] > 500
    return control, c, done


async def hang_up_and_hear(ua: Baresip, control: Control) -> tuple[np.ndarray, int]:
    """baresip hangs up (its BYE ends the call); what it recorded."""
    await ua.command("hangup")
    ended = await control.expect("call.media", timeout=5, state="ended")
    assert ended["reason"] == "hangup"
    await ua.event("CALL_CLOSED", timeout=5)
    await asyncio.sleep(0.3)  # sndfile closes its WAV when the audio stream goes
    return ua.heard()


def assert_heard_speech(pcm: np.ndarray, rate: int, played_ms: float) -> None:
    frame = rate // 50
    levels = np.abs(pcm[: len(pcm) // frame * frame].reshape(-1, frame).astype(np.int32)).max(axis=1)
    loud = np.flatnonzero(levels > 500)
    assert len(loud), "baresip heard only silence (or could not decrypt)"
    heard_ms = (loud[-1] - loud[0] + 1) * 20
    assert abs(heard_ms - played_ms) <= 200, f"heard {heard_ms} ms of speech, the gateway played {played_ms} ms"
