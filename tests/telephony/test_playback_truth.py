"""What a telephony caller heard: latency counted from when they could hear, marks and played_text from
the far end's confirmations, no bursts where the far end has no buffer (issue 14)."""

from __future__ import annotations

import asyncio

import pytest

from tests.telephony.clients import Control, TwilioClient
from tts.espeak_engine import espeak_available


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


SENTENCES = [
    "The first sentence takes about one second to say.",
    "The second sentence is a little longer than the first one.",
    "The third sentence is never heard by the caller at all.",
]


async def test_marks_and_played_text_follow_twilio_echoes_that_come_300_ms_late(make_gateway):
    gateway = await make_gateway(chunker={"first_chunk_words": 0})  # one sentence per chunk
    tw = await TwilioClient.connect(gateway, stream_sid="MZlate", call_sid="CAlate")
    await tw.start()
    tw.echo_marks(0.3)  # Twilio's buffer and the network: each echo comes 300 ms after its mark went out
    control = await Control.connect(gateway)
    await control.attach("CAlate")
    await control.send({"type": "text", "turn_id": "t", "text": " ".join(SENTENCES), "final": True})
    while not any(name.startswith("t/1/") for name, _ in tw.marks_received):  # chunk 1 is playing
        await tw.recv()
    await asyncio.sleep(0.1)  # chunk 0's echo is back; chunk 1's marks are still in Twilio's buffer
    await control.send({"type": "interrupt"})
    done = await control.expect("turn.done", turn_id="t")

    marks = [(e, t) for e, t in zip(control.events, control.times) if e["type"] == "mark"]
    assert [e["chunk"] for e, _ in marks] == [0]  # chunk 1 never came back before the clear
    ((mark0, seen_at),) = marks
    sent_at = [t for name, t in tw.marks_received if name.startswith("t/0/")][-1]  # chunk 0's end mark
    assert seen_at - sent_at >= 0.28  # the agent hears of chunk 0 when Twilio does, not when we sent it
    assert done["played_text"] == SENTENCES[0]
    assert mark0["played_ms"] <= done["played_ms"] < mark0["played_ms"] + 400  # confirmed, not sent
    await tw.stop()


async def test_audiosocket_gets_one_frame_per_tick_after_a_stall_and_the_shift_is_reported(gateway):
    import time
    import uuid

    from tests.telephony.clients import AudioSocketClient

    call_uuid = uuid.uuid4()
    control = await Control.connect(gateway)
    await control.attach(str(call_uuid))
    client = await AudioSocketClient.connect(gateway, call_uuid)
    await control.expect("call.media", state="connected")
    await control.send(
        {"type": "text", "turn_id": "t", "text": "A long enough turn to stall the clock in its middle.", "final": True}
    )
    await control.expect("audio.start", turn_id="t")
    arrivals = []
    for _ in range(10):
        arrivals.append((await client.read())[2])
    asyncio.get_running_loop().call_soon(
        time.sleep, 0.15
    )  # the event loop stalls for 150 ms (< the clock's catch-up limit)
    for _ in range(25):
        arrivals.append((await client.read())[2])
    after = arrivals[10:]
    burst = max(sum(1 for t in after if t0 <= t < t0 + 0.015) for t0 in after)
    assert burst <= 2, f"{burst} frames within 15 ms: Asterisk would send them on as a burst of RTP"
    gap = await control.expect("underrun", turn_id="t")
    assert gap["cause"] == "clock" and 100 <= gap["duration_ms"] <= 200
    assert (await control.expect("turn.done", turn_id="t"))["gaps"]["micro"] >= 1


async def test_a_twilio_calls_played_text_is_cut_by_the_engines_word_ends_at_the_last_confirmed_mark(make_gateway):
    if not espeak_available():
        pytest.skip("espeakng-loader (the optional 'espeak' extra) is not installed")
    gateway = await make_gateway(engine={"kind": "espeak"}, chunker={"first_chunk_words": 0})
    tw = await TwilioClient.connect(gateway, stream_sid="MZwords", call_sid="CAwords")
    await tw.start()
    tw.echo_marks(0.3)
    control = await Control.connect(gateway)
    attached = await control.attach("CAwords", word_timings=True, language="en")
    assert attached["word_timings"] is True
    text = "This single sentence goes on for quite a while so that the caller hears only part of it."
    await control.send({"type": "text", "turn_id": "t", "text": text, "final": True})
    await control.expect("audio.words", turn_id="t")
    while len(tw.marks_received) < 4:  # 1.5 s or more into the turn
        await tw.recv()
    await control.send({"type": "interrupt"})
    done = await control.expect("turn.done", turn_id="t")
    words = [w for e in control.events if e["type"] == "audio.words" for w in e["words"]]
    assert [w["text"] for w in words] == text.split()[: len(words)]
    # what Twilio confirmed (a progress mark every 500 ms), cut after the last word whose end it covers
    heard = " ".join(w["text"] for w in words if w["end_ms"] <= done["played_ms"])
    assert done["timing_source"] == "engine" and done["interrupted"] is True
    assert done["played_ms"] < done["sent_ms"]  # confirmed by Twilio, not merely sent
    assert done["played_text"] == heard and 0 < len(heard) < len(text)
    await tw.stop()
