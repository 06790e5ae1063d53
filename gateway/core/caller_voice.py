"""The caller's voice next to the playout: speech detection, barge-in by voice, utterances to STT.

One `CallerVoice` per session reads the session's caller audio (the
`InboundAudio` every media leg feeds), resamples it to 16 kHz and feeds
one `audio.vad.VadStream`; the gateway-wide `VoiceHub` owns the VAD pools
(one batched model pass per window for every call) and the STT client.

Time: every decision is placed on the session's playout timeline
(`playout.ticks × frame_ms`, the clock the caller hears). Each piece of
caller audio is stamped with the timeline position at which it arrived, so
a sample index from the VAD maps back to "what was playing then".

Barge-in (mode `vad`): speech that lasts `min_speech_ms` while a turn's
audio is playing interrupts exactly like the agent's `interrupt`
(`Session.interrupt(by="caller", heard_until_ms=…)`: engine cancelled,
playout flushed, far end told to drop its buffer) with `played_text` cut
where the caller started. Speech in the first `echo_holdoff_ms` after each
audio start does not count (the agent's own voice echoing back before the
far end's echo canceller settles), nor does speech that began before the
turn; the caller who keeps talking past the hold-off still interrupts. With `pause_on_onset`, on legs whose buffer voxgate owns
the playout holds at the onset and resumes if the speech ends short of
`min_speech_ms` (counted as a false interruption).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from typing import Awaitable, Callable

import numpy as np

from audio.resample import StreamResampler
from audio.vad import SAMPLE_RATE, SpeechEvent, VadPool, VadStream, VadUnavailable, make_backend
from gateway import protocol as P
from gateway.config import BARGE_IN_MODES, BargeInConfig

log = logging.getLogger("voxgate.voice")

STT_ERROR = P.STT_ERROR
VAD_UNAVAILABLE = P.VAD_UNAVAILABLE
# per-session keys of session.start.barge_in / call.attach.barge_in
SESSION_KEYS = ("mode", "min_speech_ms", "echo_holdoff_ms", "pause_on_onset", "silence_ms", "threshold", "detector")


def session_settings(base: BargeInConfig, override) -> BargeInConfig:
    """The config's barge_in section with a client's per-session override applied and validated."""
    if override is None:
        return base
    if not isinstance(override, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, 'barge_in must be an object, e.g. {"mode": "vad", "min_speech_ms": 250}')
    unknown = sorted(set(override) - set(SESSION_KEYS))
    if unknown:
        raise P.ProtocolError(
            P.BAD_MESSAGE, f"barge_in: unknown field {unknown[0]!r} (known: {', '.join(SESSION_KEYS)})"
        )
    fields = {f.name: f for f in dataclasses.fields(BargeInConfig)}
    values = {}
    for key, value in override.items():
        want = fields[key].type
        if want in ("bool", bool):
            ok = isinstance(value, bool)
        elif want in ("float", float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, str)
        if not ok:
            raise P.ProtocolError(P.BAD_MESSAGE, f"barge_in.{key} has the wrong type ({type(value).__name__})")
        values[key] = value
    settings = dataclasses.replace(base, **values)
    problems = []
    settings.validate(lambda ok, key, message: problems.append(f"barge_in.{key} {message}") if not ok else None)
    if problems:
        raise P.ProtocolError(P.BAD_MESSAGE, problems[0])
    return settings


INPUT_RATES = {"pcm16": (8000, 16000, 24000, 48000), "mulaw": (8000,), "alaw": (8000,)}


def parse_input(spec) -> tuple[str, int]:
    """`session.start.input` → (encoding, sample_rate), or a ProtocolError saying what is allowed."""
    if not isinstance(spec, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, 'input must be an object: {"encoding": "pcm16", "sample_rate": 16000}')
    encoding = spec.get("encoding", "pcm16")
    rate = spec.get("sample_rate", 8000 if encoding in ("mulaw", "alaw") else 16000)
    if (
        not isinstance(encoding, str)
        or encoding not in INPUT_RATES
        or isinstance(rate, bool)
        or rate not in INPUT_RATES[encoding]
    ):
        raise P.ProtocolError(
            P.UNSUPPORTED_FORMAT,
            f"input {encoding!r} at {rate!r} Hz is not supported "
            "(pcm16 at 8000|16000|24000|48000, mulaw or alaw at 8000)",
        )
    return encoding, int(rate)


def decode_input(encoding: str, data: bytes) -> np.ndarray:
    """One binary client message of caller audio → int16 samples."""
    if encoding == "pcm16":
        if len(data) % 2:
            raise P.ProtocolError(P.BAD_AUDIO, f"pcm16 audio needs whole 16-bit samples; got {len(data)} bytes")
        return np.frombuffer(data, dtype="<i2").astype(np.int16)
    from audio.g711 import alaw_decode, ulaw_decode

    return ulaw_decode(data) if encoding == "mulaw" else alaw_decode(data)


class VoiceHub:
    """Gateway-wide: the VAD pools (one per detector kind, shared by every call) and the STT client."""

    def __init__(self, config, metrics=None, on_user_text: Callable[[object, str], Awaitable[None]] | None = None):
        self.config = config
        self.metrics = metrics
        self.on_user_text = on_user_text  # the built-in agent's answer to what the caller said
        self._pools: dict[str, VadPool] = {}
        self.stt = None
        if config.stt.kind != "off":
            from gateway.agent.stt import TranscriptionClient

            self.stt = TranscriptionClient.from_config(config.stt)
        self.voices: set["CallerVoice"] = set()

    def check(self) -> None:
        """At start: a configured detector that cannot load is a start-up error, not a per-call surprise."""
        if self.config.barge_in.mode != "off" or self.config.stt.kind != "off":
            try:
                self.pool(self.config.barge_in.detector)
            except VadUnavailable as exc:
                raise ValueError(
                    f"{self.config.source}: barge_in.detector {self.config.barge_in.detector}: {exc}"
                ) from None

    def pool(self, detector: str) -> VadPool:
        pool = self._pools.get(detector)
        if pool is None:
            pool = VadPool(make_backend(detector))
            self._pools[detector] = pool
        pool.start()
        return pool

    def attach(
        self, session, inbound, settings: BargeInConfig | None = None, owns_buffer: bool = True
    ) -> "CallerVoice | None":
        """Start listening to `session`'s caller audio; None when detection is off for it."""
        settings = settings or self.config.barge_in
        if session.caller_voice is not None:  # already listening (e.g. a late call.attach.barge_in): new rules only
            session.caller_voice.settings = settings
            return session.caller_voice
        if settings.mode == "off" and self.stt is None:
            return None
        try:
            pool = self.pool(settings.detector)
        except VadUnavailable as exc:
            session.emit(P.error_event(VAD_UNAVAILABLE, str(exc)))
            return None
        voice = CallerVoice(self, session, inbound, settings, pool, owns_buffer)
        self.voices.add(voice)
        session.caller_voice = voice
        voice.start()
        return voice

    async def close(self) -> None:
        for voice in list(self.voices):
            voice.close()
        for pool in self._pools.values():
            await pool.close()
        self._pools.clear()
        if self.stt is not None:
            await self.stt.close()


class CallerVoice:
    def __init__(self, hub: VoiceHub, session, inbound, settings: BargeInConfig, pool: VadPool, owns_buffer: bool):
        self.hub = hub
        self.session = session
        self.inbound = inbound
        self.settings = settings
        self.owns_buffer = owns_buffer  # pausing is only honest where voxgate holds the audio not yet heard
        self.stream: VadStream = pool.open(
            on_event=self._on_speech,
            on_window=self._on_window,
            threshold=settings.threshold,
            onset_ms=settings.onset_ms,
            silence_ms=settings.silence_ms,
        )
        self._resampler = StreamResampler(inbound.sample_rate, SAMPLE_RATE)
        self._anchors: deque[tuple[int, float]] = deque(maxlen=512)  # (16 kHz samples in, timeline ms at arrival)
        self._holdoff_until_ms = -1.0
        self._onset_ms: float | None = None  # timeline position of the current speech's onset
        self._barged = False  # the current speech already interrupted
        self._paused = False
        self._paused_at_onset_ms = 0.0
        self._voiced_ms = 0.0  # speech windows (prob >= threshold) of the current speech, after the hold-off
        self._dropped_seen = 0
        self.speech_events = 0
        self.barge_ins = 0
        self.false_interruptions = 0
        self._utterances = None
        self._stt_lock = asyncio.Lock()
        if hub.stt is not None:
            from gateway.agent.stt import UtteranceBuffer

            self._utterances = UtteranceBuffer(hub.config.stt.max_utterance_s + 5.0)
        self._task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        session.observers.append(self._observe)
        self.closed = False

    # ------------------------------------------------------------ timeline
    @property
    def timeline_ms(self) -> float:
        playout = self.session.playout
        return playout.ticks * playout.frame_ms

    def at_ms(self, sample: int) -> float:
        """Timeline position at which 16 kHz input sample `sample` arrived."""
        for end, ms in self._anchors:
            if end >= sample:
                return ms - (end - sample) * 1000.0 / SAMPLE_RATE
        if self._anchors:
            end, ms = self._anchors[-1]
            return ms - (end - sample) * 1000.0 / SAMPLE_RATE
        return self.timeline_ms

    # ------------------------------------------------------------ input
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._read(), name=f"voice-{self.session.session_id}")

    async def _read(self) -> None:
        stream = self.inbound.subscribe()
        try:
            async for pcm in stream:
                self.feed(pcm)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s: caller audio reader failed", self.session.session_id)
        finally:
            stream.unsubscribe()

    def feed(self, pcm: np.ndarray) -> None:
        """int16 caller audio at the inbound rate, as it arrived."""
        dropped = getattr(self.inbound, "dropped_samples", 0)  # the inbound stream caps faster-than-real-time audio
        if dropped > self._dropped_seen:
            self._count("inbound_dropped_samples", dropped - self._dropped_seen)
            self._dropped_seen = dropped
            self.stream.reset_pending = True  # a cut in the audio must not read as speech
        if not len(pcm):
            return
        x = self._resampler.process(pcm.astype(np.float32) / 32768.0)
        if not len(x):
            return
        self.stream.push(x)
        if self._utterances is not None:
            self._utterances.push(x)
        self._anchors.append((self.stream.samples_in, self.timeline_ms))

    # ------------------------------------------------------------ playout state
    def _observe(self, event: dict) -> None:
        etype = event.get("type")
        if etype == "audio.start":
            self._holdoff_until_ms = self.timeline_ms + self.settings.echo_holdoff_ms
            # Speech already under way counts only from the hold-off's end: what the caller said before
            # the turn began was not said over it, so it must not cut the turn at its first frame.
            self._voiced_ms = 0.0
        elif etype == "session.ended":
            self.close()

    def _playing(self) -> bool:
        return self.session.active_turns > 0 and self.session.playout.in_utterance

    # ------------------------------------------------------------ VAD results
    def _on_speech(self, stream: VadStream, ev: SpeechEvent) -> None:
        at = round(self.at_ms(ev.sample), 1)
        self.speech_events += 1
        if ev.state == "started":
            self._onset_ms = at
            self._barged = False
            # voiced speech counted toward a barge-in: only what came after the echo hold-off
            self._voiced_ms = max(0.0, (at + ev.speech_ms) - max(at, self._holdoff_until_ms))
            self._count("speech_events")
            self._paused_at_onset_ms = self.session.playout.paused_total_ms
            self.session.emit({"type": "user.speech", "state": "started", "at_ms": at})
            if (
                self.settings.mode == "vad"
                and self.settings.pause_on_onset
                and self.owns_buffer
                and self._playing()
                and at >= self._holdoff_until_ms
            ):
                self._paused = self.session.playout.pause()
        else:
            self.session.emit(
                {"type": "user.speech", "state": "stopped", "at_ms": at, "duration_ms": round(ev.speech_ms, 1)}
            )
            if self._paused and not self._barged:
                self.session.playout.resume()
                self.false_interruptions += 1
                self._count("false_interruptions")
            self._paused = False
            self._onset_ms = None
            if self._utterances is not None:
                self._transcribe(ev)
        self._spawn(self.session.flush_events())

    def _on_window(self, stream: VadStream, prob: float, end_sample: int) -> None:
        if self.settings.mode != "vad" or self._barged or self._onset_ms is None or not stream.detector.speaking:
            return
        now = self.at_ms(end_sample)
        if prob >= self.settings.threshold and now > self._holdoff_until_ms:
            self._voiced_ms += stream.detector.window * 1000.0 / SAMPLE_RATE
        if not self._playing():
            return
        start = max(self._onset_ms, self._holdoff_until_ms)
        # Voiced time, not time since the onset: a blip that leaves the detector "speaking" through its
        # silence hangover must not add up to a barge-in.
        if self._voiced_ms >= self.settings.min_speech_ms:
            self._barged = True
            self._paused = False
            self.barge_ins += 1
            self._count("barge_ins")
            playout = self.session.playout
            turn = playout.current_turn
            # The turn's audio that played since `start` was talked over (a pause meanwhile played none of it).
            talked_over = (self.timeline_ms - start) - (playout.paused_total_ms - self._paused_at_onset_ms)
            heard = (turn, max(0.0, playout.played_ms(turn) - max(0.0, talked_over))) if turn else None
            self._spawn(self.session.interrupt(by="caller", heard=heard))

    def _count(self, name: str, n: float = 1) -> None:
        counter = getattr(self.hub.metrics, f"voice_{name}", None) if self.hub.metrics is not None else None
        if counter is not None:
            counter.inc(n)

    # ------------------------------------------------------------ speech to text
    def _transcribe(self, ev: SpeechEvent) -> None:
        stt_cfg = self.hub.config.stt
        if ev.speech_ms < stt_cfg.min_utterance_ms:
            return
        start = max(0, int(ev.sample - ev.speech_ms * SAMPLE_RATE / 1000 - stt_cfg.preroll_ms * SAMPLE_RATE / 1000))
        start = max(start, ev.sample - int(stt_cfg.max_utterance_s * SAMPLE_RATE))
        pcm = self._utterances.cut(start, ev.sample + int(0.1 * SAMPLE_RATE))
        self._spawn(self._stt(pcm, round(self.at_ms(ev.sample), 1)))

    async def _stt(self, pcm: np.ndarray, at_ms: float) -> None:
        from gateway.agent.stt import SttError

        async with self._stt_lock:  # one utterance at a time per call, so transcripts keep their order
            try:
                text = await self.hub.stt.transcribe(pcm, SAMPLE_RATE)
            except SttError as exc:
                self.session.emit(P.error_event(STT_ERROR, exc.message))
                await self.session.flush_events()
                return
            if self.closed or self.session.closed or not text:
                return
            self.session.emit({"type": "user.text", "text": text, "at_ms": at_ms, "source": "stt"})
            await self.session.flush_events()
            if self.hub.on_user_text is not None:
                try:
                    await self.hub.on_user_text(self.session, text)
                except P.ProtocolError as exc:
                    if exc.code != P.NO_AGENT:
                        self.session.emit(exc.event())
                        await self.session.flush_events()

    # ------------------------------------------------------------ lifetime
    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _unobserve(self) -> None:
        if self._observe in self.session.observers:
            self.session.observers.remove(self._observe)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stream.close()
        if self._task is not None:
            self._task.cancel()
        for task in list(self._tasks):
            task.cancel()
        # Not now: close() may run inside Session.emit's loop over its observers (on session.ended).
        asyncio.get_running_loop().call_soon(self._unobserve)
        self.hub.voices.discard(self)


__all__ = ["BARGE_IN_MODES", "CallerVoice", "VoiceHub", "decode_input", "parse_input", "session_settings"]
