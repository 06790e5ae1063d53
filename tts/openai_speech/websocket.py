"""vLLM-Omni's streaming WebSocket `{base}/audio/speech/stream` as the openai-speech engine's other transport
(`engine.speech_transport: websocket`): the one shape in which vLLM-Omni (0.30.0) streams Qwen3-TTS audio *and*
its forced aligner's word timestamps.

One text chunk is one utterance: `session.config` (`stream_audio`, `response_format: "pcm"`, `word_timestamps`,
`split_granularity: "none"`), `input.text`, `input.done`. The server answers `audio.start`, JSON `audio.chunk`s
(`audio_b64`: base64 s16le PCM), one more `audio.chunk` per sentence with no audio and its `timestamps`
(`[{"word", "start_ms", "end_ms"}]` from the sentence's start; `[]` silence, `null` the aligner failed),
`audio.done`, then `session.done`; `error` (`message`) when it refuses or fails. `WsAnswer` reads that as the HTTP
answer is read (`content.readany()`: the next PCM bytes, b"" at the end), so the engine's pacing, time limits
and suspect marking serve both; the words come from `take_words()` once the audio has ended.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re

from tts.engine import WordTiming, WordTimings

ROUTE = "/audio/speech/stream"
_HTTP_ONLY = ("input", "stream", "stream_format", "sample_rate")  # speech_body fields the session config has not
_WORDLIKE = re.compile(r"\w")


class ServerSaid(Exception):
    """The server's `error` message (or an answer this transport cannot play); the chunk fails with it."""


def session_config(body: dict) -> dict:
    """The `session.config` for a chunk whose `POST /audio/speech` body would be `body`."""
    config = {k: v for k, v in body.items() if k not in _HTTP_ONLY}
    config.update(
        type="session.config",
        response_format="pcm",
        stream_audio=True,
        word_timestamps=True,
        split_granularity="none",  # the chunk is one request: its audio and its words in one timeline
    )
    return config


def match_words(text: str, timestamps, offset_samples: int, rate: int) -> list[WordTiming] | None:
    """One sentence's `timestamps` as WordTimings of `text`: each word found, in order and by its spelling
    (case aside), after the previous one with nothing but spaces and punctuation skipped; ms → samples at `rate`,
    plus `offset_samples` (where the sentence starts in the chunk's audio). None when any word does not match."""
    if not isinstance(timestamps, list):
        return None
    folded = text.casefold()
    at = 0
    words = []
    for entry in timestamps:
        if not isinstance(entry, dict):
            return None
        word, start, end = entry.get("word"), entry.get("start_ms"), entry.get("end_ms")
        if not isinstance(word, str) or not word.strip() or not all(_is_ms(v) for v in (start, end)) or end < start:
            return None
        found = folded.find(word.casefold(), at)
        if found < 0 or _WORDLIKE.search(text, at, found):
            return None  # not in the text, or a word of the text would be skipped
        at = found + len(word)
        words.append(WordTiming(found, at, offset_samples + start * rate // 1000, offset_samples + end * rate // 1000))
    return words


def _is_ms(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Content:
    """`readany()` / `at_eof()` over the session's messages, as aiohttp's StreamReader offers them."""

    def __init__(self, answer: "WsAnswer"):
        self._answer = answer

    async def readany(self) -> bytes:
        return await self._answer.next_audio()

    def at_eof(self) -> bool:
        return self._answer.finished


class WsAnswer:
    """One chunk's utterance on an open WebSocket: its audio as bytes, its words once aligned."""

    def __init__(self, ws, text: str, rate: int):
        self.ws = ws
        self.text = text
        self.rate = rate
        self.content = _Content(self)
        self.finished = False
        self.samples = 0  # PCM samples received so far
        self._sentence_start = 0
        self._words: list[WordTiming] = []
        self._untimed = False  # a sentence whose words did not come or did not match: no words for the chunk

    @classmethod
    async def open(cls, http, base: str, body: dict, text: str, rate: int) -> "WsAnswer":
        ws = await http.ws_connect(base + ROUTE, max_msg_size=0, autoping=True)
        answer = cls(ws, text, rate)
        await ws.send_str(json.dumps(session_config(body)))
        await ws.send_str(json.dumps({"type": "input.text", "text": text}))
        await ws.send_str(json.dumps({"type": "input.done"}))
        return answer

    async def next_audio(self) -> bytes:
        """The next audio bytes; b"" once the utterance is done. Raises ServerSaid, or aiohttp's errors when the
        connection drops before the end."""
        import aiohttp

        while not self.finished:
            msg = await self.ws.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
                    raise aiohttp.ServerDisconnectedError("the WebSocket closed before session.done")
                raise ServerSaid(f"sent a {msg.type.name} message where JSON was expected")
            try:
                event = json.loads(msg.data)
            except ValueError:
                raise ServerSaid(f"sent a message that is not JSON: {msg.data[:200]!r}") from None
            if not isinstance(event, dict):
                raise ServerSaid(f"sent a message that is not a JSON object: {msg.data[:200]!r}")
            audio = self._take(event)
            if audio:
                return audio
        return b""

    def _take(self, event: dict) -> bytes:
        kind = event.get("type")
        if kind == "error":
            raise ServerSaid(f"said: {str(event.get('message'))[:500]}")
        if kind in ("audio.start", "audio.chunk"):
            rate = event.get("sample_rate")
            if rate is not None and rate != self.rate:
                raise ServerSaid(f"streams {rate} Hz, but engine.sample_rate is {self.rate}: set engine.sample_rate")
        if kind == "audio.start":
            self._sentence_start = self.samples
        elif kind == "audio.chunk":
            try:
                audio = base64.b64decode(event.get("audio_b64") or "", validate=True)
            except (binascii.Error, TypeError):
                raise ServerSaid("sent an audio.chunk whose audio_b64 is not base64") from None
            if audio:
                self.samples += len(audio) // 2
                return audio
            if "timestamps" in event:
                self._sentence_words(event["timestamps"])
        elif kind == "session.done":
            self.finished = True
        return b""

    def _sentence_words(self, timestamps) -> None:
        if timestamps == []:
            return  # the sentence was silence: no words
        words = match_words(self.text, timestamps, self._sentence_start, self.rate)
        if words is None or (self._words and words and words[0].char_start < self._words[-1].char_end):
            self._untimed = True
        else:
            self._words.extend(words)

    def take_words(self) -> WordTimings | None:
        """The chunk's words, source engine; None unless every sentence's words came and matched the text."""
        if self._untimed or not self._words:
            return None
        return WordTimings(tuple(self._words), "engine")

    async def end(self, finished: bool) -> None:
        """Close the session: politely after session.done, at once otherwise (the server aborts the request)."""
        try:
            if finished:
                await self.ws.send_str(json.dumps({"type": "session.close"}))
            async with asyncio.timeout(1.0):
                await self.ws.close()
        except Exception:  # a socket already gone, or a close unanswered for 1 s: nothing more to do
            pass
