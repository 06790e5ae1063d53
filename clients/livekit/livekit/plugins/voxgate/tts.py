"""`voxgate.TTS`: a streaming LiveKit Agents TTS over voxgate's native protocol (`/v1/ws`, unpaced output).

One voxgate session serves one stream at a time (sessions are pooled and
opened ahead by `prewarm()`); each `SynthesizeStream` is one voxgate turn: the
pushed text goes in as it comes (voxgate's chunker cuts it, so nothing is
aggregated here), audio comes back as fast as it is made — the agent's
output paces it — and voxgate's `audio.words` events (the session asks for
word timings) become LiveKit's aligned transcript: each word as the agent wrote
it, with the times the gateway reports (the engine's own where it has them,
e.g. the eSpeak voice; else voxgate's estimate). Against a gateway without
word timings, each `mark`'s chunk text is spread over the chunk by letters.

Cancelling a stream (what an `AgentSession` does on barge-in) closes its
session: voxgate stops synthesising at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIStatusError,
    tts,
    utils,
)
from livekit.agents.types import TimedString
from voxgate_client import Audio, AudioStart, Error, Mark, Session, SessionEnded, TurnDone, VoxgateError, Words

from .log import logger

SAMPLE_RATES = (8000, 16000, 24000, 48000)  # pcm16 rates voxgate sends
_RETRY_LATER = {"at_capacity", "overloaded", "shutting_down", "engine_unavailable"}
_SESSION_MAX_S = 240.0  # below the gateway's idle timeout (300 s): a pooled session is never found closed


@dataclass
class _Options:
    url: str
    api_key: str | None
    voice: str | None
    language: str | None
    instruct: str | None
    sample_rate: int


def timed_words(text: str, start_ms: float, end_ms: float) -> list[TimedString]:
    """One chunk's words with start and end times (seconds), spread over [start_ms, end_ms] by letters."""
    words = text.split()
    total = sum(len(w) for w in words) or 1
    out, before = [], 0
    span = end_ms - start_ms
    for word in words:
        start = start_ms + span * before / total
        before += len(word)
        out.append(
            TimedString(word + " ", start_time=start / 1000.0, end_time=(start_ms + span * before / total) / 1000.0)
        )
    return out


def word_strings(words: list[dict]) -> list[TimedString]:
    """voxgate's `audio.words` entries as LiveKit's timed strings (seconds of the segment's audio)."""
    return [
        TimedString(w["text"] + " ", start_time=w["start_ms"] / 1000.0, end_time=w["end_ms"] / 1000.0) for w in words
    ]


class TTS(tts.TTS):
    def __init__(
        self,
        *,
        url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        voice: str | None = None,
        language: str | None = None,
        instruct: str | None = None,
        sample_rate: int = 24000,
    ) -> None:
        """voxgate text to speech. `language`: an ISO 639-1 code or None (voxgate's `auto`);
        `instruct`: a VoiceDesign description; `sample_rate`: 8000, 16000, 24000 or 48000."""
        if sample_rate not in SAMPLE_RATES:
            raise ValueError(f"sample_rate must be one of {SAMPLE_RATES}, not {sample_rate}")
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self._opts = _Options(url, api_key, voice, language, instruct, sample_rate)
        self._pool = utils.ConnectionPool[Session](
            connect_cb=self._connect,
            close_cb=self._close,
            max_session_duration=_SESSION_MAX_S,
            mark_refreshed_on_get=True,
        )
        self._streams: set[SynthesizeStream] = set()

    @property
    def model(self) -> str:
        return "voxgate"

    @property
    def provider(self) -> str:
        return "voxgate"

    def update_options(
        self, *, voice: str | None = None, language: str | None = None, instruct: str | None = None
    ) -> None:
        """voxgate fixes these per session: streams after this open sessions with the new ones."""
        changes = {k: v for k, v in (("voice", voice), ("language", language), ("instruct", instruct)) if v is not None}
        if changes:
            self._opts = replace(self._opts, **changes)
            self._pool.invalidate()

    def prewarm(self) -> None:
        self._pool.prewarm()

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        self._streams.clear()
        await self._pool.aclose()

    async def _connect(self, timeout: float) -> Session:
        o = self._opts
        try:
            return await Session.connect(
                o.url,
                api_key=o.api_key,
                voice=o.voice,
                language=o.language,
                instruct=o.instruct,
                sample_rate=o.sample_rate,
                pacing="none",
                audio="bytes",
                word_timings=True,
                open_timeout=timeout,
            )
        except VoxgateError as exc:
            status = 429 if exc.code in _RETRY_LATER else 401 if exc.code == "unauthorized" else 400
            raise APIStatusError(
                f"voxgate refused the session: {exc}",
                status_code=status,
                body=exc.code,
                retryable=exc.code in _RETRY_LATER,
            ) from exc
        except (OSError, asyncio.TimeoutError) as exc:
            raise APIConnectionError(f"cannot reach voxgate at {o.url}: {exc}") from exc

    async def _close(self, session: Session) -> None:
        await session.close()


class SynthesizeStream(tts.SynthesizeStream):
    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions):
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        request_id = utils.shortuuid()
        output_emitter.initialize(
            request_id=request_id, sample_rate=self._tts.sample_rate, num_channels=1, mime_type="audio/pcm", stream=True
        )
        session = await self._tts._pool.get(timeout=self._conn_options.timeout)
        while session.ended.is_set():  # a pooled session the gateway or the network ended meanwhile
            self._tts._pool.remove(session)
            session = await self._tts._pool.get(timeout=self._conn_options.timeout)
        clean = False
        try:
            turn = session.turn(request_id)
            output_emitter.start_segment(segment_id=request_id)
            sender = asyncio.create_task(self._send(turn), name="voxgate.send")
            try:
                await self._receive(session, request_id, output_emitter)
            finally:
                await utils.aio.gracefully_cancel(sender)
                if sender.done() and not sender.cancelled() and isinstance(sender.exception(), VoxgateError):
                    # the socket dropped under the text: retryable (LiveKit retries while nothing was heard)
                    raise APIConnectionError(f"voxgate: {sender.exception()}") from sender.exception()
            output_emitter.end_segment()
            clean = True
        finally:
            if clean and not session.ended.is_set():
                self._tts._pool.put(session)
            else:  # cancelled (barge-in), failed or dropped: closing the socket stops voxgate's synthesis at once
                self._tts._pool.remove(session)
                await asyncio.shield(session.close())
            self._tts._streams.discard(self)

    async def _send(self, turn) -> None:
        async for data in self._input_ch:
            if isinstance(data, self._FlushSentinel):
                break  # one segment per stream: what follows a flush belongs to the next stream
            self._mark_started()
            await turn.say(data)
        await turn.end()

    async def _receive(self, session: Session, turn_id: str, output_emitter: tts.AudioEmitter) -> None:
        ours, chunk_end_ms = False, 0.0
        async for ev in session.events():
            if isinstance(ev, Audio):
                if ours:
                    output_emitter.push(ev.data)
            elif isinstance(ev, AudioStart):
                ours = ev.turn_id == turn_id
            elif isinstance(ev, Words) and ev.turn_id == turn_id:
                output_emitter.push_timed_transcript(word_strings(ev.words))
            elif isinstance(ev, Mark) and ev.turn_id == turn_id:
                if ev.text and not session.word_timings:  # a gateway without audio.words: the letters' estimate
                    output_emitter.push_timed_transcript(timed_words(ev.text, chunk_end_ms, ev.played_ms))
                chunk_end_ms = ev.played_ms
            elif isinstance(ev, TurnDone) and ev.turn_id == turn_id:
                return
            elif isinstance(ev, Error):
                if ev.code in _RETRY_LATER and output_emitter.pushed_duration() == 0.0:  # nothing heard yet: retry
                    raise APIStatusError(
                        f"voxgate {ev.code}: {ev.message}", status_code=429, body=ev.code, retryable=True
                    )
                logger.warning("voxgate %s: %s", ev.code, ev.message)
            elif isinstance(ev, SessionEnded):
                break
        raise APIConnectionError("the voxgate session ended before the turn was done")
