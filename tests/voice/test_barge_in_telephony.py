"""The caller's voice on the telephony legs: a Twilio-like and an AudioSocket client play recorded speech
(espeak-ng) into a call while the agent speaks; the gateway reports `user.speech` and the caller barges in.
Noise and music-like tones alone give neither."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from audio.g711 import ulaw_encode
from tests import caller_audio as ca
from tests.telephony.clients import AudioSocketClient, Control, TwilioClient
from tests.voice.callers import PacedSource, pump

LONG = (
    "This is the agent giving a long and careful answer, sentence after sentence, so the caller has time to cut in. "
    * 4
)


class Call:
    """One telephony call: the agent's control socket, the far end's client and the caller's paced audio."""

    def __init__(self, ctl: Control, source: PacedSource):
        self.ctl = ctl
        self.source = source
        self.received: list[tuple[float, object]] = []  # what the far end got, with arrival times
        self.tasks: list[asyncio.Task] = []

    def spawn(self, coro) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    async def speak_agent(self) -> dict:
        await self.ctl.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        return await self.ctl.expect("audio.start", turn_id="t1")

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.ctl.close()


async def twilio_call(gw, call_sid: str) -> tuple[Call, TwilioClient]:
    ctl = await Control.connect(gw)
    await ctl.attach(call_sid)
    tw = await TwilioClient.connect(gw, call_sid=call_sid, stream_sid="MZ" + call_sid)
    await tw.start()
    await ctl.expect("call.media", state="connected")
    call = Call(ctl, PacedSource(8000))

    async def read():
        while True:
            msg, at = await tw.recv(30)
            call.received.append((at, msg))
            if msg["event"] == "mark":  # as Twilio does once the audio before it has played
                await tw.echo_mark(msg["mark"]["name"])

    call.spawn(read())
    call.spawn(pump(call.source, lambda f: tw.media(ulaw_encode(f))))
    return call, tw


async def audiosocket_call(gw, call_uuid) -> tuple[Call, AudioSocketClient]:
    ctl = await Control.connect(gw)
    await ctl.attach(str(call_uuid))
    client = await AudioSocketClient.connect(gw, call_uuid)
    await ctl.expect("call.media", state="connected")
    call = Call(ctl, PacedSource(8000))

    async def read():
        while True:
            kind, payload, at = await client.read(30)
            call.received.append((at, (kind, payload)))

    def send(frame):
        client.send(0x10, frame.astype("<i2").tobytes())

    call.spawn(read())
    call.spawn(pump(call.source, send))
    return call, client


def twilio_clear_at(call: Call, after: float) -> float | None:
    return next((at for at, msg in call.received if at >= after and msg.get("event") == "clear"), None)


def audiosocket_silence_at(call: Call, after: float) -> float | None:
    """The first silent 20 ms frame after `after` that is followed by silence (the turn was flushed)."""
    frames = [(at, payload) for at, (kind, payload) in call.received if kind == 0x10 and at >= after]
    for i, (at, payload) in enumerate(frames):
        if not np.frombuffer(payload, "<i2").any() and all(
            not np.frombuffer(p, "<i2").any() for _, p in frames[i : i + 5]
        ):
            return at
    return None


async def barge_in_by_speech(call: Call, start: dict, rate: int = 8000) -> dict:
    await asyncio.sleep(0.5)  # past the echo hold-off
    pcm, onset_ms = ca.caller_track(rate, lead_ms=300)
    call.source.play(pcm, onset_ms)
    speech = await call.ctl.expect("user.speech", state="started", timeout=5)
    done = await call.ctl.expect("turn.done", turn_id="t1", timeout=5)
    return {"speech": speech, "done": done, "onset_at": call.source.onset_at, "start": start}


async def noise_only(call: Call, seconds: float = 1.5) -> list[dict]:
    """Noise then tones into the call; returns the control socket's speech and turn events meanwhile."""
    await asyncio.sleep(0.5)
    call.source.play(
        np.concatenate([ca.noise(seconds * 1000, 8000, level=0.08), ca.tones(seconds * 1000, 8000, level=0.15)])
    )
    await asyncio.wait_for(call.source.played_all.wait(), seconds * 2 + 3)
    await asyncio.sleep(0.4)  # the VAD's last windows
    try:
        while True:
            await call.ctl.recv(timeout=0.05)
    except asyncio.TimeoutError:
        pass
    return [e for e in call.ctl.events if e["type"] in ("user.speech", "turn.done")]


def check_barge_in(result: dict, start_arrival: float) -> None:
    speech, done = result["speech"], result["done"]
    assert done["interrupted"] is True and done["interrupted_by"] == "caller"
    # user.speech.at_ms and audio.start.at_ms share the playout timeline: their distance is the caller's
    # onset measured into the turn, within the VAD's window and the jitter of this one event loop, which
    # runs the gateway and its clients together (generous: the machine may be loaded)
    into_turn_ms = (result["onset_at"] - start_arrival) * 1000
    assert abs((speech["at_ms"] - result["start"]["at_ms"]) - into_turn_ms) < 300, (
        speech,
        result["start"],
        into_turn_ms,
    )
    # played_text is cut where the caller started, not where the barge-in landed
    assert abs(done["caller_onset_ms"] - (speech["at_ms"] - result["start"]["at_ms"])) < 60
    sent_ms = done.get("sent_ms", done["played_ms"])  # played_ms is what Twilio confirmed, where it confirms
    assert sent_ms >= done["caller_onset_ms"] + 200  # at least min_speech_ms more had played
    assert 0 < len(done["played_text"]) < len(LONG.strip())


async def test_twilio_caller_interrupts_the_agent_by_voice(make_voice_gateway):
    gw = await make_voice_gateway()
    call, tw = await twilio_call(gw, "CAvoice1")
    try:
        start = await call.speak_agent()
        start_arrival = time.monotonic()
        result = await barge_in_by_speech(call, start)
        check_barge_in(result, start_arrival)
        await asyncio.sleep(0.1)
        clear = twilio_clear_at(call, result["onset_at"])
        assert clear is not None, "Twilio was not told to drop its buffer"
        latency_ms = (clear - result["onset_at"]) * 1000
        assert 250 <= latency_ms < 2000, latency_ms  # at least min_speech_ms: it waits for that much speech
        stopped = await call.ctl.expect("user.speech", state="stopped", timeout=8)
        assert stopped["at_ms"] > result["speech"]["at_ms"]
    finally:
        await call.close()


async def test_twilio_noise_and_tones_do_not_interrupt(make_voice_gateway):
    gw = await make_voice_gateway()
    call, tw = await twilio_call(gw, "CAnoise1")
    try:
        await call.speak_agent()
        heard = await noise_only(call)
        assert not heard, heard
        assert not [m for _, m in call.received if m.get("event") == "clear"]
    finally:
        await call.close()


async def test_audiosocket_caller_interrupts_the_agent_by_voice(make_voice_gateway):
    import uuid

    gw = await make_voice_gateway()
    call, client = await audiosocket_call(gw, uuid.uuid4())
    try:
        start = await call.speak_agent()
        start_arrival = time.monotonic()
        result = await barge_in_by_speech(call, start)
        check_barge_in(result, start_arrival)
        await asyncio.sleep(0.3)
        silent = audiosocket_silence_at(call, result["onset_at"])
        assert silent is not None
        assert 250 <= (silent - result["onset_at"]) * 1000 < 2000
    finally:
        await call.close()
        client.close()


async def test_audiosocket_noise_does_not_interrupt(make_voice_gateway):
    import uuid

    gw = await make_voice_gateway()
    call, client = await audiosocket_call(gw, uuid.uuid4())
    try:
        await call.speak_agent()
        heard = await noise_only(call, seconds=1.0)
        assert not heard, heard
    finally:
        await call.close()
        client.close()
