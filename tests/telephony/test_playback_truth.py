"""What a telephony caller heard: latency counted from when they could hear, marks and played_text from
the far end's confirmations, no bursts where the far end has no buffer (issue 14)."""

from __future__ import annotations

import asyncio

from tests.telephony.clients import Control, TwilioClient


async def test_ttfa_of_text_sent_before_the_media_leg_counts_from_its_connect(make_gateway):
    gateway = await make_gateway(telephony={"unknown_call_timeout_s": 5})
    control = await Control.connect(gateway)
    await control.attach("CAwait")
    await control.send({"type": "text", "turn_id": "t", "text": "Hello, who is there?", "final": True})
    await asyncio.sleep(0.6)  # nobody can hear it yet: this wait is not the engine's latency
    tw = await TwilioClient.connect(gateway, stream_sid="MZwait", call_sid="CAwait")
    await tw.start()
    start = await control.expect("audio.start", turn_id="t")
    assert start["ttfa_ms"] < 400, start
    await tw.stop()
