"""A speech server that speaks vLLM-Omni 0.30.0's streaming WebSocket `/v1/audio/speech/stream` with
`word_timestamps: true` (its `serving_speech_stream.py`, message for message), for the engine's websocket transport:
real aiohttp on loopback, with the health and models routes of `Misbehaving` (the engine's probes use them).

Each word of the utterance is `WORD_MS` of tone then `GAP_MS` of silence, so the timestamps it sends are where the
words really are in its audio. The aligner's words are the text's words with punctuation stripped, as vLLM-Omni's
`segment_words` gives them. Modes: `aligned` (the real shape), `real_time` (the same, its audio made no faster
than it plays), `misspelt` (one word the text does not have: the
words cannot be matched), `no_aligner` (the server runs without `--forced-aligner`: its `error` and nothing else).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re

import numpy as np
from aiohttp import WSMsgType, web

from tests.openai_speech.misbehaving import Misbehaving

RATE = 24_000
WORD_MS, GAP_MS = 200, 100
PIECE = RATE // 10  # samples in one audio.chunk (100 ms)
NO_ALIGNER = (
    "word_timestamps=true but the server was launched without --forced-aligner; either restart the server with "
    "that flag or set word_timestamps=false in session.config."
)


def utterance(text: str) -> tuple[bytes, list[dict]]:
    """The audio for `text` and the timestamps an aligner would give for it."""
    words = re.findall(r"[\w']+", text)
    tone = (np.sin(np.arange(RATE * WORD_MS // 1000) * 2 * np.pi * 220 / RATE) * 8000).astype("<i2")
    gap = np.zeros(RATE * GAP_MS // 1000, "<i2")
    stamps = [
        {"word": w, "start_ms": i * (WORD_MS + GAP_MS), "end_ms": i * (WORD_MS + GAP_MS) + WORD_MS}
        for i, w in enumerate(words)
    ]
    return np.concatenate([np.concatenate([tone, gap]) for _ in words]).tobytes(), stamps


class OmniWs(Misbehaving):
    def __init__(self, mode: str = "aligned"):
        super().__init__("ok")
        self.ws_mode = mode
        self.configs: list[dict] = []
        self.sessions = 0
        self.open_sessions = 0  # WebSockets not yet closed by either side

    async def stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sessions += 1
        self.open_sessions += 1
        try:
            await self._serve(ws)
        finally:
            self.open_sessions -= 1
        return ws

    async def _serve(self, ws: web.WebSocketResponse) -> None:
        config, text, utterance_index = None, "", 0
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            event = json.loads(msg.data)
            if event["type"] == "session.config":
                config = {k: v for k, v in event.items() if k != "type"}
                self.configs.append(config)
            elif event["type"] == "input.text":
                text += event["text"]
            elif event["type"] == "input.done":
                await self._utterance(ws, config, text, utterance_index)
                text, utterance_index = "", utterance_index + 1
            elif event["type"] == "session.close":
                await ws.close()

    async def _utterance(self, ws: web.WebSocketResponse, config: dict, text: str, u: int) -> None:
        if self.ws_mode == "no_aligner":  # the real server's answer: an error, then nothing for that sentence
            await ws.send_json({"type": "error", "message": NO_ALIGNER})
            await ws.send_json({"type": "session.done", "utterance_index": u, "total_sentences": 1})
            return
        head = {"utterance_index": u, "sentence_index": 0}
        await ws.send_json(
            {"type": "audio.start", **head, "sentence_text": text, "format": "pcm", "sample_rate": RATE}
            | {"word_timestamps": True}
        )
        audio, stamps = utterance(text)
        if self.ws_mode == "misspelt":
            stamps[1]["word"] = "zebra"
        n = 0
        for n, at in enumerate(range(0, len(audio), PIECE * 2)):
            if self.ws_mode == "real_time":
                await asyncio.sleep(PIECE / RATE)
            if ws.closed:
                return  # the client went away: the real server aborts the request
            piece = audio[at : at + PIECE * 2]
            await ws.send_json(
                {
                    "type": "audio.chunk",
                    **head,
                    "chunk_id": n,
                    "chunk_start_ms": at // 2 * 1000 // RATE,
                    "chunk_end_ms": (at + len(piece)) // 2 * 1000 // RATE,
                    "sample_rate": RATE,
                    "audio_b64": base64.b64encode(piece).decode("ascii"),
                    "timestamps": None,
                }
            )
        end_ms = len(audio) // 2 * 1000 // RATE
        await ws.send_json(
            {
                "type": "audio.chunk",
                **head,
                "chunk_id": n + 1,
                "chunk_start_ms": 0,
                "chunk_end_ms": end_ms,
                "sample_rate": RATE,
                "audio_b64": "",
                "timestamps": stamps,
            }
        )
        await ws.send_json({"type": "audio.done", **head, "total_bytes": len(audio), "error": False})
        await ws.send_json({"type": "session.done", "utterance_index": u, "total_sentences": 1})

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/v1/audio/speech/stream", self.stream)
        return app
