"""/v1/ws with `session.start.input`: the client's binary messages are the caller's voice.

Speech barges in (and goes to speech-to-text when configured), a cough-length
burst with pause_on_onset holds the playout and resumes it, and without
`input` binary stays refused."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import websockets

from tests import caller_audio as ca
from tests.voice.callers import PacedSource, pump
from tests.voice.fake_stt import FakeTranscriptionServer

LONG = "Here is a long answer from the agent, told slowly, so that the caller has all the time to interrupt it. " * 4


class WsCaller:
    def __init__(self, ws):
        self.ws = ws
        self.events: list[dict] = []
        self.frames: list[float] = []  # arrival times of audio frames
        self._new = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self):
        async for msg in self.ws:
            if isinstance(msg, bytes):
                self.frames.append(time.monotonic())
            else:
                event = json.loads(msg)
                event["_at"] = time.monotonic()
                self.events.append(event)
                self._new.set()

    async def expect(self, etype: str, timeout: float = 6.0, **match) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                seen += 1
                if event["type"] == etype and all(event.get(k) == v for k, v in match.items()):
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {etype} {match}; got {[e['type'] for e in self.events]}")
            self._new.clear()
            try:
                await asyncio.wait_for(self._new.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def send(self, msg: dict) -> None:
        await self.ws.send(json.dumps(msg))

    async def close(self):
        self._task.cancel()
        await self.ws.close()


async def open_caller(gw, **start) -> WsCaller:
    ws = await websockets.connect(f"ws://127.0.0.1:{gw.port}/v1/ws", compression=None)
    caller = WsCaller(ws)
    await caller.send({"type": "session.start", "output": {"encoding": "pcm16", "sample_rate": 16000}, **start})
    await caller.expect("session.started")
    return caller


async def test_binary_without_input_is_still_refused(make_voice_gateway):
    gw = await make_voice_gateway()
    caller = await open_caller(gw)
    try:
        await caller.ws.send(b"\x00\x01" * 160)
        error = await caller.expect("error")
        assert error["code"] == "binary_not_allowed"
    finally:
        await caller.close()


@pytest.mark.parametrize(
    "spec,code",
    [
        ({"encoding": "mulaw", "sample_rate": 16000}, "unsupported_format"),
        ({"encoding": "opus"}, "unsupported_format"),
        ("pcm16", "bad_message"),
    ],
)
async def test_bad_input_formats_are_refused(make_voice_gateway, spec, code):
    gw = await make_voice_gateway()
    ws = await websockets.connect(f"ws://127.0.0.1:{gw.port}/v1/ws")
    caller = WsCaller(ws)
    try:
        await caller.send({"type": "session.start", "input": spec})
        assert (await caller.expect("error"))["code"] == code
    finally:
        await caller.close()


async def test_bad_barge_in_override_is_refused(make_voice_gateway):
    gw = await make_voice_gateway()
    ws = await websockets.connect(f"ws://127.0.0.1:{gw.port}/v1/ws")
    caller = WsCaller(ws)
    try:
        await caller.send(
            {
                "type": "session.start",
                "input": {"encoding": "pcm16", "sample_rate": 16000},
                "barge_in": {"mode": "sometimes"},
            }
        )
        error = await caller.expect("error")
        assert error["code"] == "bad_message" and "barge_in.mode" in error["message"]
    finally:
        await caller.close()


async def test_native_caller_barges_in_and_is_transcribed(make_voice_gateway):
    stt = await FakeTranscriptionServer(text="I want to change my booking").start()
    gw = await make_voice_gateway(stt={"kind": "openai", "base_url": stt.base_url, "model": "whisper-tiny"})
    caller = await open_caller(gw, input={"encoding": "pcm16", "sample_rate": 16000})
    source = PacedSource(16000)
    sender = asyncio.get_running_loop().create_task(pump(source, lambda f: caller.ws.send(f.astype("<i2").tobytes())))
    try:
        await caller.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        start = await caller.expect("audio.start")
        await asyncio.sleep(0.5)
        pcm, onset_ms = ca.caller_track(16000, lead_ms=200, name="stop")
        source.play(pcm, onset_ms)
        speech = await caller.expect("user.speech", state="started")
        done = await caller.expect("turn.done")
        assert done["interrupted_by"] == "caller"
        latency_ms = (done["_at"] - source.onset_at) * 1000
        # not before min_speech_ms of speech (250 ms), less one 32 ms VAD window of onset uncertainty and pump jitter
        assert latency_ms >= 250 - 40
        assert done["caller_onset_ms"] == pytest.approx(speech["at_ms"] - start["at_ms"], abs=60)
        stopped = await caller.expect("user.speech", state="stopped", timeout=8)
        heard = await caller.expect("user.text", timeout=5)
        assert heard["text"] == "I want to change my booking" and heard["source"] == "stt"
        (req,) = stt.requests
        # the utterance sent is the caller's speech (plus pre-roll), not the whole call
        assert req["rate"] == 16000 and abs(req["ms"] - (stopped["duration_ms"] + 300)) < 150
    finally:
        sender.cancel()
        await caller.close()
        await stt.stop()


async def test_stt_failure_is_an_error_event_and_the_call_goes_on(make_voice_gateway):
    stt = await FakeTranscriptionServer(status=503).start()
    gw = await make_voice_gateway(stt={"kind": "openai", "base_url": stt.base_url})
    caller = await open_caller(gw, input={"encoding": "pcm16", "sample_rate": 16000}, barge_in={"mode": "detect"})
    source = PacedSource(16000)
    sender = asyncio.get_running_loop().create_task(pump(source, lambda f: caller.ws.send(f.astype("<i2").tobytes())))
    try:
        pcm, onset_ms = ca.caller_track(16000, lead_ms=200, name="stop")
        source.play(pcm, onset_ms)
        error = await caller.expect("error", timeout=10)
        assert error["code"] == "stt_error" and "503" in error["message"]
        await caller.send({"type": "text", "turn_id": "after", "text": "Still here.", "final": True})
        assert (await caller.expect("turn.done", turn_id="after"))["interrupted"] is False
    finally:
        sender.cancel()
        await caller.close()
        await stt.stop()


async def test_a_cough_pauses_the_agent_and_it_resumes(make_voice_gateway):
    """pause_on_onset: speech shorter than min_speech_ms holds the playout, then it goes on; counted as false."""
    gw = await make_voice_gateway()
    caller = await open_caller(
        gw,
        input={"encoding": "pcm16", "sample_rate": 16000},
        barge_in={"mode": "vad", "pause_on_onset": True, "min_speech_ms": 800, "silence_ms": 200},
    )
    source = PacedSource(16000)
    sender = asyncio.get_running_loop().create_task(pump(source, lambda f: caller.ws.send(f.astype("<i2").tobytes())))
    try:
        await caller.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        await caller.expect("audio.start")
        await asyncio.sleep(0.5)
        short = ca.speech(16000, "short")  # "Yes." — well under 800 ms
        source.play(np.concatenate([ca.silence(100, 16000), short]), 100 + ca.speech_onset_ms(short, 16000))
        await caller.expect("user.speech", state="started")
        await caller.expect("user.speech", state="stopped", timeout=5)
        await asyncio.sleep(0.3)
        voice = next(iter(gw.core.voice.voices))
        assert voice.false_interruptions == 1 and voice.barge_ins == 0
        assert gw.core.sessions[voice.session.session_id].playout.paused_total_ms > 0
        assert not [e for e in caller.events if e["type"] == "turn.done"]  # the turn plays on
        n = len(caller.frames)
        await asyncio.sleep(0.3)
        assert len(caller.frames) > n  # audio flows again
    finally:
        sender.cancel()
        await caller.close()


async def test_the_built_in_agent_answers_what_stt_heard(make_voice_gateway):
    stt = await FakeTranscriptionServer(text="What are your opening hours?").start()
    gw = await make_voice_gateway(
        stt={"kind": "openai", "base_url": stt.base_url}, llm={"kind": "simulated", "ttft_ms": 30, "tokens_per_s": 200}
    )
    caller = await open_caller(gw, input={"encoding": "pcm16", "sample_rate": 16000}, barge_in={"mode": "detect"})
    source = PacedSource(16000)
    sender = asyncio.get_running_loop().create_task(pump(source, lambda f: caller.ws.send(f.astype("<i2").tobytes())))
    try:
        pcm, onset_ms = ca.caller_track(16000, lead_ms=200, name="stop")
        source.play(pcm, onset_ms)
        heard = await caller.expect("user.text", timeout=10)
        assert heard["text"] == "What are your opening hours?"
        start = await caller.expect("audio.start", timeout=10)
        assert start["turn_id"].startswith("agent")
    finally:
        sender.cancel()
        await caller.close()
        await stt.stop()


async def test_speech_that_began_before_the_turn_does_not_cut_it_at_once(make_voice_gateway):
    """A caller already talking when a turn's audio starts: what they said before it counts nothing.

    Only speech past the turn's echo hold-off (300 ms) counts toward min_speech_ms (250 ms), so a caller
    who keeps talking still barges in, but not before ~550 ms of the turn have played (the old code
    carried the pre-turn speech over and cut the turn at its first frames)."""
    gw = await make_voice_gateway()
    caller = await open_caller(gw, input={"encoding": "pcm16", "sample_rate": 16000})
    source = PacedSource(16000)
    sender = asyncio.get_running_loop().create_task(pump(source, lambda f: caller.ws.send(f.astype("<i2").tobytes())))
    try:
        pcm, onset_ms = ca.caller_track(16000, lead_ms=200, name="stop")  # ~2.5 s of speech
        source.play(pcm, onset_ms)
        await caller.expect("user.speech", state="started")
        await asyncio.sleep(0.5)  # half a second of speech before the agent says anything
        await caller.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        await caller.expect("audio.start")
        first_frame = len(caller.frames)
        done = await caller.expect("turn.done", timeout=10)
        frames_before_cut = len(caller.frames) - first_frame
        assert done["interrupted_by"] == "caller"  # still talking past the hold-off: a real barge-in
        # 300 ms hold-off + 250 ms of voiced speech (~27 frames of 20 ms); the old code: 0-3 frames
        assert frames_before_cut >= 15, f"cut after {frames_before_cut} frames: the pre-turn speech counted"
    finally:
        sender.cancel()
        await caller.close()
