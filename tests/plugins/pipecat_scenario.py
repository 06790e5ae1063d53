"""A real Pipecat pipeline against a voxgate on loopback; run by tests/plugins/test_pipecat.py in the plugin venv.

    python pipecat_scenario.py URL MODES [TTS] [TEXT]   MODES: stream,interrupt,reconnect (comma-separated)   TTS: voxgate | openai

`stream` speaks TEXT (default: three sentences) to the end; `interrupt` barges in after one second
of played audio (always the three default sentences); `reconnect` speaks TEXT twice with the
service's socket cut in between. Prints one JSON object, a result per mode.

Pipeline: an LLM-like token source (three sentences, a token every 25 ms) → the TTS service →
a probe → a speaker (an output transport that plays in real time: it writes nowhere and sleeps
each chunk's duration) → a probe → the assistant context aggregator. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.workers.runner import WorkerRunner

TEXT = (
    "Hello there, and thank you for calling the support line today. "
    "I can see your order was shipped yesterday afternoon from our warehouse. "
    "It should arrive at your door by Friday at the latest."
)
TOKEN_S = 0.025
RATE = 24000  # what the OpenAI route makes; voxgate sends any of 8/16/24/48 kHz


def tokens(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)


class Probe(FrameProcessor):
    """Records the frames passing one point of the pipeline, with their times."""

    def __init__(self, t0: list, **kw):
        super().__init__(**kw)
        self._t0 = t0
        self.audio: list[tuple[float, int]] = []  # (s since the first token, bytes)
        self.texts: list[tuple[float, str]] = []
        self.pts: list[tuple[str, int | None]] = []  # each word frame's presentation time (ns)
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.interrupted_at: float | None = None
        self.stopped_event = asyncio.Event()

    def now(self) -> float:
        return time.monotonic() - self._t0[0]

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, (TTSAudioRawFrame, OutputAudioRawFrame)):
                self.audio.append((self.now(), len(frame.audio)))
            elif isinstance(frame, TTSTextFrame):
                self.texts.append((self.now(), frame.text))
                self.pts.append((frame.text, frame.pts))
            elif isinstance(frame, TTSStartedFrame):
                self.started.append(self.now())
            elif isinstance(frame, TTSStoppedFrame):
                self.stopped.append(self.now())
                self.stopped_event.set()
            elif isinstance(frame, InterruptionFrame):
                self.interrupted_at = self.now()
        await self.push_frame(frame, direction)


class Speaker(BaseOutputTransport):
    """An output transport that plays in real time into nothing: what Pipecat's transports do, minus a device."""

    def __init__(self, t0: list):
        super().__init__(
            TransportParams(audio_out_enabled=True, audio_out_sample_rate=RATE, audio_out_end_silence_secs=0)
        )
        self._t0 = t0
        self.played: list[tuple[float, int]] = []
        self._play_until = 0.0

    async def start(self, frame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._play_until = 0.0

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        self.played.append((now - self._t0[0], len(frame.audio)))
        self._play_until = max(self._play_until, now) + len(frame.audio) / 2 / frame.sample_rate
        await asyncio.sleep(max(0.0, self._play_until - now))
        return True


async def turns_interrupted(url: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        m = re.search(r'^voxgate_turns_total\{interrupted="true"\} (\S+)$', await r.text(), re.M)
        return float(m.group(1)) if m else 0.0


def make_tts(url: str, kind: str):
    if kind == "voxgate":
        from voxgate_pipecat import VoxgateTTSService

        return VoxgateTTSService(url=url, voice="default")
    from pipecat.services.openai.tts import OpenAITTSService

    return OpenAITTSService(base_url=f"{url}/v1", api_key="none", voice="alloy")


async def run(url: str, mode: str, kind: str, text: str = TEXT) -> dict:
    t0 = [time.monotonic()]
    tts = make_tts(url, kind)
    after_tts, after_speaker = Probe(t0), Probe(t0)
    speaker = Speaker(t0)
    context = LLMContext()
    assistant = LLMContextAggregatorPair(context).assistant()
    worker = PipelineWorker(
        Pipeline([tts, after_tts, speaker, after_speaker, assistant]),
        params=PipelineParams(audio_out_sample_rate=RATE),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker, frame):
        started.set()

    result: dict = {}

    async def drive():
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(0.3)  # the plugin's session is open (a real agent talks long after start)
        t0[0] = time.monotonic()
        await worker.queue_frame(LLMFullResponseStartFrame())
        sent = []
        for tok in tokens(text):
            if mode == "interrupt" and sum(n for _, n in speaker.played) / 2 / RATE >= 1.0:
                break  # the caller barges in after a second of played audio: the LLM is cut off too
            await worker.queue_frame(LLMTextFrame(tok))
            sent.append(tok)
            await asyncio.sleep(TOKEN_S)
        if mode == "interrupt":
            while sum(n for _, n in speaker.played) / 2 / RATE < 1.0:
                await asyncio.sleep(0.005)
            result["played_at_interrupt_ms"] = sum(n for _, n in speaker.played) / 2 / RATE * 1000
            result["interrupt_at"] = time.monotonic() - t0[0]
            await worker.queue_frame(InterruptionFrame())
            await asyncio.sleep(1.0)  # anything still coming would show up here
            result["gateway_turns_interrupted"] = await turns_interrupted(url)  # before EndFrame closes the session
        else:
            await worker.queue_frame(LLMFullResponseEndFrame())
            await asyncio.wait_for(after_speaker.stopped_event.wait(), 30)
            await asyncio.sleep(0.3)
        result["tokens_sent"] = len(sent)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), drive()), 60)

    assistant_text = " ".join(
        m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
        for m in context.get_messages()
        if m.get("role") == "assistant"
    )
    audio_after = [
        a for a in after_tts.audio if after_tts.interrupted_at is not None and a[0] > after_tts.interrupted_at
    ]
    played_after = [
        p for p in speaker.played if result.get("interrupt_at") is not None and p[0] > result["interrupt_at"] + 0.001
    ]
    result.update(
        {
            "text": text,
            "first_audio_s": after_tts.audio[0][0] if after_tts.audio else None,
            "last_audio_s": after_tts.audio[-1][0] if after_tts.audio else None,
            "audio_ms": sum(n for _, n in after_tts.audio) / 2 / RATE * 1000,
            "played_ms": sum(n for _, n in speaker.played) / 2 / RATE * 1000,
            "tts_texts": [t for _, t in after_speaker.texts],
            "word_pts": after_tts.pts,
            "started": len(after_tts.started),
            "stopped": len(after_tts.stopped),
            "audio_frames_after_interrupt": len(audio_after),
            "played_frames_after_interrupt": len(played_after),
            "played_ms_after_interrupt": sum(n for _, n in played_after) / 2 / RATE * 1000,
            "context": assistant_text,
        }
    )
    return result


async def run_reconnect(url: str, text: str) -> dict:
    """Two replies with the service's socket cut between them (as a network drop would): the second still speaks."""
    t0 = [time.monotonic()]
    tts = make_tts(url, "voxgate")
    after_tts, after_speaker = Probe(t0), Probe(t0)
    worker = PipelineWorker(
        Pipeline([tts, after_tts, Speaker(t0), after_speaker]),
        params=PipelineParams(audio_out_sample_rate=RATE),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker, frame):
        started.set()

    sessions, marks = [], []

    async def reply(n: int) -> None:
        await worker.queue_frame(LLMFullResponseStartFrame())
        for tok in tokens(text):
            await worker.queue_frame(LLMTextFrame(tok))
            await asyncio.sleep(TOKEN_S)
        await worker.queue_frame(LLMFullResponseEndFrame())
        while len(after_speaker.stopped) < n:
            await asyncio.sleep(0.02)
        marks.append((len(after_tts.audio), len(after_speaker.texts)))

    async def drive():
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(0.3)
        await reply(1)
        sessions.append(tts._session.session_id)
        tts._session._ws.transport.abort()  # the socket drops under the service
        await asyncio.sleep(0.5)
        await reply(2)
        sessions.append(tts._session.session_id if tts._session else None)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), drive()), 60)
    (audio1, texts1), (audio2, texts2) = marks
    return {
        "text": text,
        "sessions": sessions,
        "first_reply_audio_frames": audio1,
        "second_reply_audio_frames": audio2 - audio1,
        "second_reply_texts": [t for _, t in after_speaker.texts[texts1:texts2]],
        "stopped": len(after_tts.stopped),
    }


async def main(url: str, modes: list[str], kind: str, text: str) -> dict:
    out = {}
    for mode in modes:
        out[mode] = (
            await run_reconnect(url, text)
            if mode == "reconnect"
            else await run(url, mode, kind, text if mode == "stream" else TEXT)
        )
    return out


if __name__ == "__main__":
    url, modes = sys.argv[1], sys.argv[2].split(",")
    kind = sys.argv[3] if len(sys.argv) > 3 else "voxgate"
    print(json.dumps(asyncio.run(main(url, modes, kind, sys.argv[4] if len(sys.argv) > 4 else TEXT))))
