"""`VoxgateTTSService`: Pipecat's TTS over voxgate's native protocol (`/v1/ws`, unpaced output).

It follows the shape of Pipecat's WebSocket TTS services: one voxgate session
per pipeline (opened at start, re-opened when the socket drops), the LLM's
text pushed token by token into one voxgate turn per Pipecat audio context
(voxgate's chunker cuts it, so the service aggregates nothing), audio frames
at the pipeline's sample rate, and `TTSTextFrame`s timed to the audio: a
word-timestamp TTS service, it hands Pipecat each word of voxgate's
`audio.words` events (the session asks for word timings) at the time the
gateway reports it is heard — the engine's own where it has them (the eSpeak
voice), else voxgate's estimate. (Against a gateway without word timings,
each `mark`'s chunk text is spread over the chunk by letters.) Pipecat's output
transport presents each word with the audio under it, so after an
interruption the assistant context holds the words that were played.

The gateway sends audio as fast as it is made (`output.pacing: "none"`);
Pipecat's transport paces it. An interruption becomes voxgate's `interrupt`,
which stops synthesis and drops what was not sent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator

from loguru import logger
from pipecat.frames.frames import CancelFrame, EndFrame, Frame, StartFrame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.services.settings import NOT_GIVEN, NotGiven, TTSSettings, is_given
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.transcriptions.language import Language
from voxgate_client import Audio, AudioStart, Error, Mark, Session, SessionEnded, TurnDone, VoxgateError, Words

WIRE_RATES = (8000, 16000, 24000, 48000)  # pcm16 rates voxgate sends; others are resampled here
_QUIET_ERRORS = {"turn_closed"}  # late tokens of an interrupted turn: expected, not a fault


def word_times(text: str, start_ms: float, end_ms: float) -> list[tuple[str, float]]:
    """The words of one chunk with their start times in seconds, spread over [start_ms, end_ms] by letters."""
    words = text.split()
    total = sum(len(w) for w in words)
    out, before = [], 0
    for word in words:
        out.append((word, (start_ms + (end_ms - start_ms) * (before / total if total else 0.0)) / 1000.0))
        before += len(word)
    return out


@dataclass
class VoxgateTTSSettings(TTSSettings):
    """Runtime-updatable settings: `voice`, `language` (inherited) and `instruct` (a VoiceDesign description).

    voxgate fixes them per session, so a change re-opens the session before the next turn."""

    instruct: str | None | NotGiven = field(default_factory=lambda: NOT_GIVEN)


class VoxgateTTSService(TTSService):
    """Text to speech through a voxgate gateway.

    `VoxgateTTSService(url="http://HOST:8080", api_key=..., voice=...)`; `language` ("en", a Pipecat
    `Language`, or None for voxgate's `auto`) and `instruct` as settings."""

    Settings = VoxgateTTSSettings
    _settings: VoxgateTTSSettings

    def __init__(
        self,
        *,
        url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        voice: str | None = None,
        language: Language | str | None = None,
        instruct: str | None = None,
        sample_rate: int | None = None,
        settings: VoxgateTTSSettings | None = None,
        text_aggregation_mode: TextAggregationMode | None = None,
        reconnect_delay_s: float = 0.2,
        **kwargs,
    ):
        store = self.Settings(model=None, voice=voice, language=language, instruct=instruct)
        if settings is not None:
            store.apply_update(settings)
        super().__init__(
            # voxgate's chunker cuts the stream (first chunk early, then sentences): no aggregation here
            text_aggregation_mode=text_aggregation_mode or TextAggregationMode.TOKEN,
            push_text_frames=False,  # TTSTextFrames come from the marks, timed to the audio
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=store,
            **kwargs,
        )
        self._url = url
        self._api_key = api_key
        self._reconnect_delay_s = reconnect_delay_s
        self._session: Session | None = None
        self._connecting: asyncio.Lock | None = None
        self._receive_task: asyncio.Task | None = None
        self._wire_rate = 24000
        self._turns: dict[str, Any] = {}  # context id (= voxgate turn id) -> voxgate_client.Turn, still open
        self._playing: str | None = None  # the turn whose audio is arriving (audio.start names it)
        self._chunk_end_ms: dict[str, float] = {}  # turn -> where its last marked chunk ended
        self._stopping = False

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        """voxgate takes ISO 639-1 codes (`en-US` speaks as `en`)."""
        return str(language.value).split("-")[0].lower()

    # ------------------------------------------------------------ lifecycle
    async def start(self, frame: StartFrame):
        await super().start(frame)
        self._stopping = False
        self._wire_rate = self.sample_rate if self.sample_rate in WIRE_RATES else 24000
        await self._connect()

    async def stop(self, frame: EndFrame):
        await super().stop(frame)  # lets the queued audio play first
        await self._disconnect()

    async def cancel(self, frame: CancelFrame):
        await super().cancel(frame)
        await self._disconnect()

    async def _connect(self) -> bool:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._session is not None and not self._session.ended.is_set():
                return True
            language = self._settings.language if is_given(self._settings.language) else None
            try:
                session = await Session.connect(
                    self._url,
                    api_key=self._api_key,
                    voice=self._settings.voice or None,
                    language=language or None,
                    instruct=self._settings.instruct or None,
                    sample_rate=self._wire_rate,
                    pacing="none",
                    audio="bytes",
                    word_timings=True,
                )
            except (OSError, VoxgateError, asyncio.TimeoutError, Exception) as exc:  # noqa: BLE001 - reported, retried
                await self.push_error(error_msg=f"voxgate: cannot open a session at {self._url}: {exc}", exception=exc)
                await self._call_event_handler("on_connection_error", str(exc))
                return False
            self._session = session
            self._receive_task = self.create_task(self._receive(session))
            logger.debug(f"{self}: voxgate session {session.session_id} ({session.voice})")
            await self._call_event_handler("on_connected")
            return True

    async def _disconnect(self) -> None:
        self._stopping = True
        session, self._session = self._session, None
        if session is not None:
            try:
                await session.end()
            except Exception:  # noqa: BLE001 - the socket may already be gone
                pass
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        self._turns.clear()
        await self._call_event_handler("on_disconnected")

    async def _update_settings(self, delta: VoxgateTTSSettings) -> dict[str, Any]:
        changed = await super()._update_settings(delta)
        if changed.keys() & {"voice", "language", "instruct"} and self._session is not None:
            # A voxgate session keeps its voice: the next turn opens a new one (this one ends after its audio).
            old, self._session = self._session, None
            self.create_task(self._end_later(old))
        return changed

    async def _end_later(self, session: Session) -> None:
        try:
            await session.end(drain=True)
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------ text in
    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """One piece of the LLM's text into the turn of this audio context; audio comes via the receive task."""
        if self._session is None or self._session.ended.is_set():
            if not await self._connect():
                yield TTSStoppedFrame(context_id=context_id)
                return
        turn = self._turns.get(context_id)
        if turn is None:  # usage metrics: the base reports the whole streamed reply at its end
            turn = self._turns[context_id] = self._session.turn(context_id)
        try:
            await turn.say(text)
        except VoxgateError as exc:
            await self.push_error(error_msg=f"voxgate: could not send text: {exc}", exception=exc)
            self._turns.pop(context_id, None)
            yield TTSStoppedFrame(context_id=context_id)
            return
        yield None

    async def flush_audio(self, context_id: str | None = None):
        """The LLM's reply is complete: the turn's final text (voxgate speaks what it still holds)."""
        context_id = context_id or self.get_active_audio_context_id()
        turn = self._turns.get(context_id) if context_id else None
        if turn is not None and not turn.ended:
            try:
                await turn.end()
            except VoxgateError as exc:
                logger.warning(f"{self}: could not end turn {context_id}: {exc}")

    async def on_audio_context_interrupted(self, context_id: str):
        """Barge-in: voxgate stops the turn now and drops what it did not send (one `interrupt` for all)."""
        await self.stop_all_metrics()
        if self._turns and self._session is not None:
            self._turns.clear()
            self._playing = None
            try:
                await self._session.interrupt()
            except VoxgateError as exc:
                logger.debug(f"{self}: interrupt not sent: {exc}")
        await super().on_audio_context_interrupted(context_id)

    # ------------------------------------------------------------ events in
    async def _receive(self, session: Session) -> None:
        try:
            async for ev in session.events():
                await self._on_event(ev)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad event must not stop the audio
            logger.exception(f"{self}: voxgate receive loop failed")
            await self.push_error(error_msg=f"voxgate: {exc}", exception=exc)
        if session is self._session and not self._stopping:
            await self._lost(session)

    async def _on_event(self, ev) -> None:
        if isinstance(ev, Audio):
            context_id = self._playing
            if context_id in self._turns and self.audio_context_available(context_id):
                audio = ev.data
                if self._wire_rate != self.sample_rate:
                    audio = await self._resampler.resample(audio, self._wire_rate, self.sample_rate)
                await self.append_to_audio_context(
                    context_id,
                    TTSAudioRawFrame(audio=audio, sample_rate=self.sample_rate, num_channels=1, context_id=context_id),
                )
        elif isinstance(ev, AudioStart):
            self._playing = ev.turn_id
            self._chunk_end_ms[ev.turn_id] = 0.0
        elif isinstance(ev, Words):
            if ev.turn_id in self._turns:
                await self.add_word_timestamps([(w["text"], w["start_ms"] / 1000.0) for w in ev.words], ev.turn_id)
        elif isinstance(ev, Mark):
            start = self._chunk_end_ms.get(ev.turn_id, 0.0)
            self._chunk_end_ms[ev.turn_id] = ev.played_ms
            session = self._session
            if ev.text and ev.turn_id in self._turns and not (session is not None and session.word_timings):
                await self.add_word_timestamps(word_times(ev.text, start, ev.played_ms), ev.turn_id)
        elif isinstance(ev, TurnDone):
            self._chunk_end_ms.pop(ev.turn_id, None)
            if self._playing == ev.turn_id:
                self._playing = None
            if self._turns.pop(ev.turn_id, None) is not None and self.audio_context_available(ev.turn_id):
                await self.stop_ttfb_metrics()
                await self.append_to_audio_context(ev.turn_id, TTSStoppedFrame(context_id=ev.turn_id))
                await self.remove_audio_context(ev.turn_id)
        elif isinstance(ev, Error):
            if ev.code in _QUIET_ERRORS:
                logger.debug(f"{self}: voxgate {ev.code}: {ev.message}")
            else:
                await self.push_error(error_msg=f"voxgate {ev.code}: {ev.message}")
        elif isinstance(ev, SessionEnded):
            logger.debug(f"{self}: voxgate session ended")

    async def _lost(self, session: Session) -> None:
        """The socket dropped (or the gateway ended the session): finish the open turns, open a new session."""
        self._session = None
        lost = [c for c in self._turns if self.audio_context_available(c)]
        self._turns.clear()
        self._playing = None
        for context_id in lost:
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)
        if lost:
            await self.push_error(error_msg="voxgate: the connection dropped mid-turn; reconnecting")
        await self._call_event_handler("on_disconnected")
        delay = self._reconnect_delay_s
        while not self._stopping and self._session is None:
            await asyncio.sleep(delay)
            if await self._connect():
                return
            delay = min(delay * 2, 5.0)
