"""LiveKit Agents' TTS API against a voxgate on loopback; run by tests/plugins/test_livekit.py in the plugin venv.

    python livekit_scenario.py URL MODES [TTS] [TEXT]   MODES: stream,synthesize,cancel,reconnect,agent   TTS: voxgate | openai

`stream` pushes an LLM-like token stream (a token every 25 ms) into `tts.stream()`; `synthesize`
speaks the whole text at once; `cancel` closes the stream after its first audio (what an
AgentSession does on barge-in; always the three default sentences). Prints one JSON object, a result per mode.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

import aiohttp
from livekit.agents import tokenize, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

TEXT = (
    "Hello there, and thank you for calling the support line today. "
    "I can see your order was shipped yesterday afternoon from our warehouse. "
    "It should arrive at your door by Friday at the latest."
)
TOKEN_S = 0.025


def make_tts(url: str, kind: str, mode: str):
    if kind == "voxgate":
        from livekit.plugins import voxgate

        return voxgate.TTS(url=url, voice="default")
    from livekit.plugins import openai

    inner = openai.TTS(base_url=f"{url}/v1", api_key="none", voice="alloy")
    # openai.TTS cannot stream(): LiveKit's own answer is a StreamAdapter (one request per sentence)
    return (
        tts.StreamAdapter(tts=inner, sentence_tokenizer=tokenize.blingfire.SentenceTokenizer())
        if mode != "synthesize"
        else inner
    )


async def sessions_active(url: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        m = re.search(r"^voxgate_sessions_active (\S+)$", await r.text(), re.M)
        return float(m.group(1)) if m else -1.0


async def run(url: str, mode: str, kind: str, text: str) -> dict:
    engine = make_tts(url, kind, mode)
    frames, words, timed = [], [], []
    first = last = None
    t0 = time.monotonic()

    def take(ev) -> None:
        nonlocal first, last
        now = time.monotonic() - t0
        first = now if first is None else first
        last = now
        frames.append(ev.frame.samples_per_channel / ev.frame.sample_rate)
        for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []) or []:
            words.append(str(w))
            timed.append([str(w), w.start_time, w.end_time])

    result: dict = {
        "text": text,
        "capabilities": {
            "streaming": engine.capabilities.streaming,
            "aligned_transcript": engine.capabilities.aligned_transcript,
        },
    }
    if mode == "synthesize":
        async for ev in engine.synthesize(text):
            take(ev)
    else:
        stream = engine.stream()

        async def push() -> None:
            for tok in re.findall(r"\S+\s*", text):
                stream.push_text(tok)
                await asyncio.sleep(TOKEN_S)
            stream.end_input()

        pusher = asyncio.create_task(push())
        async for ev in stream:
            take(ev)
            if mode == "cancel" and sum(frames) >= 0.5:
                break
        if mode == "cancel":
            pusher.cancel()
            await stream.aclose()
            result["closed_at"] = time.monotonic() - t0
            await asyncio.sleep(0.3)
            result["sessions_active_after_cancel"] = await sessions_active(url)
        else:
            await pusher
    await engine.aclose()
    result.update(
        {
            "first_audio_s": first,
            "last_audio_s": last,
            "audio_ms": round(sum(frames) * 1000, 1),
            "frames": len(frames),
            "words": words,
            "timed": timed,
        }
    )
    return result


async def run_reconnect(url: str, text: str) -> dict:
    """Two streams on one TTS with the pooled session's socket cut between them: the second still speaks."""
    from livekit.plugins import voxgate

    engine = voxgate.TTS(url=url, voice="default")
    results = []
    for n in range(2):
        stream = engine.stream()
        stream.push_text(text)
        stream.end_input()
        seconds = 0.0
        async for ev in stream:
            seconds += ev.frame.samples_per_channel / ev.frame.sample_rate
        results.append(round(seconds * 1000, 1))
        if n == 0:
            for session in list(engine._pool._connections):  # the network drops the idle pooled session
                session._ws.transport.abort()
            await asyncio.sleep(0.3)
    await engine.aclose()
    return {"audio_ms": results}


async def run_agent(url: str, text: str) -> dict:
    """`AgentSession(tts=voxgate.TTS(...))`, as an agent uses it: `say()` speaks into the session's audio output."""
    from livekit import rtc
    from livekit.agents import Agent, AgentSession
    from livekit.agents.voice.io import AudioOutput, AudioOutputCapabilities
    from livekit.plugins import voxgate

    class Sink(AudioOutput):
        """An audio output that takes every frame at once (no device): playback ends at each flush."""

        def __init__(self):
            super().__init__(label="sink", capabilities=AudioOutputCapabilities(pause=False))
            self.played, self.segment = 0.0, 0.0

        async def capture_frame(self, frame: rtc.AudioFrame) -> None:
            if self.segment == 0.0:
                self.on_playback_started(created_at=time.time())
            await super().capture_frame(frame)
            self.segment += frame.samples_per_channel / frame.sample_rate
            self.played += frame.samples_per_channel / frame.sample_rate

        def flush(self) -> None:
            super().flush()
            self.on_playback_finished(playback_position=self.segment, interrupted=False)
            self.segment = 0.0

        def clear_buffer(self) -> None:
            self.on_playback_finished(playback_position=self.segment, interrupted=True)
            self.segment = 0.0

    session = AgentSession(tts=voxgate.TTS(url=url, voice="default"))
    sink = Sink()
    session.output.audio = sink
    await session.start(Agent(instructions="A test agent."))
    await asyncio.wait_for(session.say(text).wait_for_playout(), 30)
    history = [m.text_content for m in session.history.messages() if m.role == "assistant"]
    await session.aclose()
    return {"played_ms": round(sink.played * 1000, 1), "history": history}


async def main(url: str, modes: list[str], kind: str, text: str) -> dict:
    special = {"reconnect": run_reconnect, "agent": run_agent}
    out = {}
    for mode in modes:
        out[mode] = (
            await special[mode](url, text)
            if mode in special
            else await run(url, mode, kind, TEXT if mode == "cancel" else text)
        )
    return out


if __name__ == "__main__":
    url, modes = sys.argv[1], sys.argv[2].split(",")
    kind = sys.argv[3] if len(sys.argv) > 3 else "voxgate"
    print(json.dumps(asyncio.run(main(url, modes, kind, sys.argv[4] if len(sys.argv) > 4 else TEXT))))
