"""Simulated callers over the native protocol (/v1/ws) and their shared clock.

A caller replays scenario calls in a loop at real pace: it waits the caller's
pause, streams the agent's reply through the LLM simulator as `text` pieces,
and listens. Received frames go into its own `CallerPlayback`, drained by the
one `ClientClock` task that ticks every caller every 20 ms, so the next
turn starts after the agent was *heard* finishing, as on a real call.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import time
import uuid
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import websockets
from websockets.asyncio.client import connect

from audio.encode import FrameEncoder, OutputFormat
from bench.loadtest.playback import FRAME_MS, CallerPlayback, HeardTurn
from bench.loadtest.scenarios import Call, CallPicker
from gateway.agent.llm_sim import LlmSimulator

log = logging.getLogger("voxgate.loadtest")


@dataclass
class ClientSettings:
    encoding: str = "pcm16"
    sample_rate: int = 24000
    prebuffer_ms: float = 60.0  # the caller's jitter buffer
    llm_ttft_ms: float = 300.0
    llm_tokens_per_s: float = 40.0
    llm_jitter: float = 0.2
    voice: str | None = None  # overrides the scenarios' voices
    api_key: str | None = None
    turn_timeout_s: float = 60.0  # a turn not heard to its end by then is an error
    keep_audio: bool = False
    leg: str = "native"  # native (/v1/ws) | twilio (/v1/twilio media + /v1/control text)


class ClientClock:
    """One task ticks every caller's playback at 20 ms on an absolute schedule.

    Missed ticks are all run (playback judges by arrival times, so catching up
    is exact); the lateness of each tick is recorded while `recording`, as
    the measure of whether this client process keeps up.
    """

    def __init__(self):
        self.period = FRAME_MS / 1000.0
        self.members: dict[int, CallerPlayback] = {}
        self.lateness = array("f")  # seconds, one per tick run while recording
        self.stalls: list[tuple[float, float]] = []  # (scheduled time, lateness) of ticks run over a frame late
        self.recording = False
        self._task: asyncio.Task | None = None

    def add(self, pb: CallerPlayback) -> None:
        self.members[id(pb)] = pb

    def remove(self, pb: CallerPlayback) -> None:
        self.members.pop(id(pb), None)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="client-clock")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        start = time.monotonic()
        n = 0
        while True:
            due = start + n * self.period
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic()
            # Run every tick that is due (catch-up after a stall), each at its scheduled time.
            while due <= now:
                if self.recording:
                    self.lateness.append(now - due)
                    if now - due > self.period:
                        self.stalls.append((due, now - due))
                for pb in list(self.members.values()):
                    pb.tick(due)
                n += 1
                due = start + n * self.period


@dataclass
class TurnRecord:
    """One turn as the caller lived it; a line of turns.jsonl."""

    level: int
    label: str
    caller: int
    call_seq: int
    call_id: str
    turn_index: int
    turn_id: str
    language: str
    reply_chars: int
    t_eot: float  # caller's end of turn (run-relative seconds)
    in_window: bool
    t_first_text: float | None = None
    t_first_frame: float | None = None
    t_heard_end: float | None = None
    ttfa_client_ms: float | None = None
    e2e_ms: float | None = None
    ttfa_server_ms: float | None = None
    played_ms_server: float | None = None
    frames: int = 0
    silent_frames: int = 0
    heard_audio_ms: float = 0.0
    lead_silence_ms: float = 0.0
    heard_gaps: list = field(default_factory=list)
    server_gaps: list = field(default_factory=list)
    server_turn_gaps: dict | None = None
    error: str | None = None


class LevelRun:
    """Shared state of one concurrency level: the window, the sinks and counters."""

    def __init__(
        self, level: int, label: str, t0: float, window: tuple[float, float], on_event: Callable[[dict], None]
    ):
        self.level = level
        self.label = label
        self.t0 = t0  # run start (monotonic); records are relative to it
        self.window = window  # absolute monotonic [start, end)
        self.on_event = on_event
        self.turns: list[TurnRecord] = []
        self.session_errors: list[dict] = []
        self.pending_in_window = 0
        self.window_audio_frames = 0
        self.stop = asyncio.Event()
        self.worst: dict | None = None  # the in-window call with the most heard gap time

    def in_window(self, t: float) -> bool:
        return self.window[0] <= t < self.window[1]

    def rel(self, t: float) -> float:
        return round(t - self.t0, 4)


class Caller:
    def __init__(
        self,
        index: int,
        url: str,
        picker: CallPicker,
        settings: ClientSettings,
        clock: ClientClock,
        run: LevelRun,
        seed: int,
    ):
        self.index = index
        self.url = url
        self.picker = picker
        self.s = settings
        self.clock = clock
        self.run = run
        self.rng = random.Random(seed)
        self.llm = LlmSimulator(settings.llm_ttft_ms, settings.llm_tokens_per_s, seed=seed, jitter=settings.llm_jitter)
        fmt = (
            OutputFormat("mulaw", 8000)
            if settings.leg == "twilio"
            else OutputFormat(settings.encoding, settings.sample_rate)
        )
        self.frame_bytes = fmt.frame_bytes
        self.silence = FrameEncoder(fmt).silence
        self.root = url.rsplit("/v1/", 1)[0]  # ws://host:port
        self.call_seq = 0
        self.wav_sink: Callable[[str, bytes, int], None] | None = None

    # ------------------------------------------------------------ one caller's life
    async def live(self, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        while not self.run.stop.is_set():
            call = self.picker.next()
            self.call_seq += 1
            try:
                await self._call(call)
            except asyncio.CancelledError:
                raise
            except (OSError, websockets.exceptions.WebSocketException, asyncio.TimeoutError) as exc:
                self._session_error("connect_failed", f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(1.0)

    def _session_error(self, code: str, message: str) -> None:
        now = time.monotonic()
        err = {
            "t": self.run.rel(now),
            "caller": self.index,
            "call_seq": self.call_seq,
            "code": code,
            "message": message[:300],
            "in_window": self.run.in_window(now),
        }
        self.run.session_errors.append(err)
        self.run.on_event({"type": "client.session_error", **err, "level": self.run.level, "label": self.run.label})

    async def _call(self, call: Call) -> None:
        if self.s.leg == "twilio":
            return await self._call_twilio(call)
        headers = {"Authorization": f"Bearer {self.s.api_key}"} if self.s.api_key else None
        heard_q: asyncio.Queue[HeardTurn] = asyncio.Queue()
        pb = CallerPlayback(
            self.silence,
            self.s.prebuffer_ms,
            on_heard=heard_q.put_nowait,
            keep_audio=self.s.keep_audio,
            trace_level=True,
        )
        state = _CallState(call)
        async with connect(
            self.url,
            compression=None,
            additional_headers=headers,
            proxy=None,
            ping_interval=None,
            open_timeout=10,
            max_size=2**20,
        ) as ws:
            await ws.send(
                json.dumps(
                    {
                        "type": "session.start",
                        "voice": self.s.voice or call.voice,
                        "language": call.language,
                        "output": {"encoding": self.s.encoding, "sample_rate": self.s.sample_rate},
                    }
                )
            )
            reader = asyncio.get_running_loop().create_task(self._read(ws, pb, state))
            call_start = time.monotonic()
            self.clock.add(pb)
            try:
                await self._converse(
                    ws,
                    pb,
                    state,
                    heard_q,
                    call,
                    call_start,
                    "no_session_started",
                    "session.started",
                    lambda: ws.send('{"type":"session.end"}'),
                )
            finally:
                self.clock.remove(pb)
                reader.cancel()
                self._call_done(call, pb, state, call_start)

    async def _converse(
        self,
        text_ws,
        pb: CallerPlayback,
        state: "_CallState",
        heard_q: asyncio.Queue,
        call: Call,
        call_start: float,
        missing_code: str,
        started_event: str,
        hang_up,
    ) -> None:
        """Wait for the session, play the call's turns over `text_ws`, then `hang_up()` and wait for the end."""
        try:
            await asyncio.wait_for(state.started.wait(), 10.0)
        except asyncio.TimeoutError:
            self._session_error(state.session_error or missing_code, f"{started_event} did not come within 10 s")
            return
        if state.session_error:
            self._session_error(state.session_error, state.session_error_msg)
            await asyncio.sleep(1.0)
            return
        await self._turns(text_ws, pb, state, heard_q, call, call_start)
        if not self.run.stop.is_set():
            await hang_up()
            try:
                await asyncio.wait_for(state.ended.wait(), 5.0)
            except asyncio.TimeoutError:
                pass

    async def _turns(
        self, ws, pb: CallerPlayback, state: "_CallState", heard_q: asyncio.Queue, call: Call, call_start: float
    ) -> None:
        """The call's turns at real pace; `ws` carries the text leg."""
        heard_end = call_start
        for i, turn in enumerate(call.turns):
            if self.run.stop.is_set():
                return
            t_eot = heard_end + turn.pause_ms / 1000.0
            await _sleep_until(t_eot, self.run.stop)
            if self.run.stop.is_set():
                return
            heard_end = await self._turn(ws, pb, state, heard_q, call, i, t_eot)
            if heard_end is None:
                return

    async def _call_twilio(self, call: Call) -> None:
        """A Twilio Media Streams leg (/v1/twilio, μ-law 8 kHz in JSON) plus the agent's control socket (/v1/control)."""
        headers = {"Authorization": f"Bearer {self.s.api_key}"} if self.s.api_key else None
        heard_q: asyncio.Queue[HeardTurn] = asyncio.Queue()
        pb = CallerPlayback(
            self.silence,
            self.s.prebuffer_ms,
            on_heard=heard_q.put_nowait,
            keep_audio=self.s.keep_audio,
            trace_level=True,
        )
        state = _CallState(call)
        call_sid, stream_sid = "CA" + uuid.uuid4().hex, "MZ" + uuid.uuid4().hex
        voice = self.s.voice or call.voice
        opts = dict(compression=None, proxy=None, ping_interval=None, open_timeout=10, max_size=2**20)
        async with (
            connect(self.root + "/v1/twilio", **opts) as media,
            connect(self.root + "/v1/control", additional_headers=headers, **opts) as ctl,
        ):
            params = {"call_id": call_sid, "language": call.language} | ({"voice": voice} if voice else {})
            await media.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            await media.send(
                json.dumps(
                    {
                        "event": "start",
                        "sequenceNumber": "1",
                        "streamSid": stream_sid,
                        "start": {
                            "streamSid": stream_sid,
                            "callSid": call_sid,
                            "accountSid": "AC" + "0" * 32,
                            "tracks": ["inbound"],
                            "customParameters": params,
                            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                        },
                    }
                )
            )
            await ctl.send(
                json.dumps(
                    {"type": "call.attach", "call_id": call_sid, "language": call.language}
                    | ({"voice": voice} if voice else {})
                )
            )
            marks: deque = deque()
            loop = asyncio.get_running_loop()
            tasks = [
                loop.create_task(self._read(ctl, pb, state)),
                loop.create_task(self._read_twilio(media, pb, state, marks)),
                loop.create_task(self._echo_marks(media, pb, marks, stream_sid)),
            ]
            call_start = time.monotonic()
            self.clock.add(pb)
            try:
                await self._converse(
                    ctl,
                    pb,
                    state,
                    heard_q,
                    call,
                    call_start,
                    "no_call_attached",
                    "call.attached",
                    lambda: media.send(
                        json.dumps({"event": "stop", "streamSid": stream_sid, "stop": {"callSid": call_sid}})
                    ),
                )
            finally:
                self.clock.remove(pb)
                for t in tasks:
                    t.cancel()
                self._call_done(call, pb, state, call_start)

    async def _read_twilio(self, ws, pb: CallerPlayback, state: "_CallState", marks: deque) -> None:
        n = self.frame_bytes
        try:
            async for msg in ws:
                now = time.monotonic()
                m = json.loads(msg)
                event = m.get("event")
                if event == "media":
                    audio = base64.b64decode(m["media"]["payload"])
                    for i in range(0, len(audio), n):
                        self._on_frame(now, audio[i : i + n], pb, state)
                elif event == "mark":
                    marks.append((state.frames_in, m["mark"]["name"]))
        except websockets.exceptions.ConnectionClosed:
            pass

    async def _echo_marks(self, ws, pb: CallerPlayback, marks: deque, stream_sid: str) -> None:
        """Like Twilio: a mark comes back once the audio sent before it has been played."""
        while True:
            await asyncio.sleep(0.04)
            while marks and pb.played_frames >= marks[0][0]:
                _, name = marks.popleft()
                await ws.send(json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}}))

    def _on_frame(self, now: float, frame: bytes, pb: CallerPlayback, state: "_CallState") -> None:
        pb.on_frame(now, frame)
        state.frames_in += 1
        rec = state.rec
        if rec is not None and state.turn_open:
            rec.frames += 1
            if state.t_first_frame is None:
                state.t_first_frame = now
        w = self.run.window
        if w[0] <= now < w[1] and frame != self.silence:
            self.run.window_audio_frames += 1

    async def _turn(
        self, ws, pb: CallerPlayback, state: "_CallState", heard_q: asyncio.Queue, call: Call, i: int, t_eot: float
    ) -> float | None:
        run = self.run
        turn = call.turns[i]
        in_window = run.in_window(t_eot)
        rec = TurnRecord(
            run.level,
            run.label,
            self.index,
            self.call_seq,
            call.id,
            i,
            f"c{self.call_seq}t{i}",
            turn.language or call.language,
            len(turn.reply),
            run.rel(t_eot),
            in_window,
        )
        state.rec = rec
        state.t_eot = t_eot
        state.t_first_text = None
        state.turn_open = True
        if in_window:
            run.pending_in_window += 1
        pb.begin_turn(rec)
        run.on_event(
            {
                "type": "client.turn_start",
                "t": rec.t_eot,
                "level": run.level,
                "label": run.label,
                "caller": self.index,
                "turn_id": rec.turn_id,
                "call_id": call.id,
            }
        )
        deadline = time.monotonic() + self.s.turn_timeout_s
        heard: HeardTurn | None = None
        try:
            async for piece in self.llm.stream(turn.reply):
                if state.t_first_text is None:
                    state.t_first_text = time.monotonic()
                await ws.send(
                    json.dumps(
                        {"type": "text", "turn_id": rec.turn_id, "text": piece, "final": False}, ensure_ascii=False
                    )
                )
            await ws.send(json.dumps({"type": "text", "turn_id": rec.turn_id, "text": "", "final": True}))
            heard = await asyncio.wait_for(heard_q.get(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            rec.error = rec.error or "timeout"
        except websockets.exceptions.ConnectionClosed:
            rec.error = rec.error or "connection_closed"
        finally:
            state.turn_open = False
            self._finish_turn(rec, state, heard)
            if in_window:
                run.pending_in_window -= 1
        return heard.end if heard is not None and rec.error is None else None

    def _finish_turn(self, rec: TurnRecord, state: "_CallState", heard: HeardTurn | None) -> None:
        run = self.run
        if state.t_first_text is not None:
            rec.t_first_text = run.rel(state.t_first_text)
        if state.t_first_frame is not None:
            rec.t_first_frame = run.rel(state.t_first_frame)
            if state.t_first_text is not None:
                rec.ttfa_client_ms = round((state.t_first_frame - state.t_first_text) * 1000.0, 2)
            rec.e2e_ms = round((state.t_first_frame - state.t_eot) * 1000.0, 2)
        state.t_first_frame = None
        if heard is not None:
            rec.t_heard_end = run.rel(heard.end) if heard.end is not None else None
            rec.silent_frames = heard.silent_frames
            rec.heard_audio_ms = heard.audio_frames * FRAME_MS
            rec.lead_silence_ms = heard.lead_silence_ms
            rec.heard_gaps = [
                {"t": run.rel(g.start), "duration_ms": g.duration_ms, "source": g.source, "kind": g.kind}
                for g in heard.gaps
            ]
            for g in rec.heard_gaps:
                run.on_event(
                    {
                        "type": "client.gap",
                        "level": run.level,
                        "label": run.label,
                        "caller": self.index,
                        "turn_id": rec.turn_id,
                        **g,
                    }
                )
        if rec.error is None and rec.t_first_frame is None:
            rec.error = "no_audio"
        run.turns.append(rec)
        run.on_event(
            {
                "type": "client.turn_end",
                "t": run.rel(time.monotonic()),
                "level": run.level,
                "label": run.label,
                "caller": self.index,
                "turn_id": rec.turn_id,
                "error": rec.error,
                "ttfa_client_ms": rec.ttfa_client_ms,
            }
        )

    # ------------------------------------------------------------ receiving
    async def _read(self, ws, pb: CallerPlayback, state: "_CallState") -> None:
        try:
            async for msg in ws:
                now = time.monotonic()
                if isinstance(msg, bytes):
                    self._on_frame(now, msg, pb, state)
                    continue
                self._on_event(json.loads(msg), now, pb, state)
        except websockets.exceptions.ConnectionClosed:
            pass
        finally:
            state.started.set()
            state.ended.set()

    def _on_event(self, ev: dict, now: float, pb: CallerPlayback, state: "_CallState") -> None:
        run = self.run
        etype = ev.get("type")
        rec = state.rec
        run.on_event({"t": run.rel(now), "level": run.level, "label": run.label, "caller": self.index, **ev})
        same_turn = rec is not None and ev.get("turn_id") == rec.turn_id
        if etype == "audio.start" and same_turn:
            rec.ttfa_server_ms = ev.get("ttfa_ms")
        elif etype == "underrun" and same_turn:
            rec.server_gaps.append(
                {"duration_ms": ev.get("duration_ms"), "kind": ev.get("kind"), "cause": ev.get("cause")}
            )
        elif etype == "turn.done" and same_turn:
            rec.played_ms_server = ev.get("played_ms")
            rec.server_turn_gaps = ev.get("gaps")
            if ev.get("interrupted"):
                rec.error = rec.error or "interrupted"
            pb.end_turn(now)
        elif etype in ("session.started", "call.attached"):
            state.started.set()
        elif etype == "session.ended":
            state.ended.set()
        elif etype == "error":
            if not state.started.is_set():
                state.session_error = ev.get("code", "error")
                state.session_error_msg = ev.get("message", "")
                state.started.set()
            elif rec is not None and state.turn_open:
                rec.error = rec.error or ev.get("code", "error")
            else:
                self._session_error(ev.get("code", "error"), ev.get("message", ""))

    # ------------------------------------------------------------ after a call
    def _call_done(self, call: Call, pb: CallerPlayback, state: "_CallState", call_start: float) -> None:
        run = self.run
        mine = [t for t in run.turns if t.caller == self.index and t.call_seq == self.call_seq]
        in_window = [t for t in mine if t.in_window]
        if pb.stray_frames:
            run.on_event(
                {
                    "type": "client.stray_frames",
                    "level": run.level,
                    "label": run.label,
                    "caller": self.index,
                    "count": pb.stray_frames,
                }
            )
        if not in_window:
            return
        badness = (
            sum(g["duration_ms"] for t in in_window for g in t.heard_gaps if g["kind"] == "audible"),
            sum(g["duration_ms"] for t in in_window for g in t.heard_gaps),
        )
        if run.worst is None or badness > run.worst["badness"]:
            run.worst = {
                "badness": badness,
                "caller": self.index,
                "call_seq": self.call_seq,
                "call_id": call.id,
                "t_start": run.rel(call_start),
                "frame_ms": FRAME_MS,
                "levels": list(pb.levels) if pb.levels is not None else [],
                "turns": [
                    {
                        "turn_id": t.turn_id,
                        "t_eot": t.t_eot,
                        "t_first_frame": t.t_first_frame,
                        "t_heard_end": t.t_heard_end,
                        "gaps": t.heard_gaps,
                    }
                    for t in mine
                ],
            }
        if self.wav_sink is not None and pb.audio is not None:
            self.wav_sink(
                f"{run.label or 'x'}_L{run.level}_caller{self.index:03d}_call{self.call_seq}_{call.id}",
                bytes(pb.audio),
                self.s.sample_rate,
            )


class _CallState:
    def __init__(self, call: Call):
        self.call = call
        self.started = asyncio.Event()
        self.ended = asyncio.Event()
        self.session_error: str | None = None
        self.session_error_msg = ""
        self.rec: TurnRecord | None = None
        self.turn_open = False
        self.t_eot = 0.0
        self.t_first_text: float | None = None
        self.t_first_frame: float | None = None
        self.frames_in = 0


async def _sleep_until(t: float, stop: asyncio.Event) -> None:
    delay = t - time.monotonic()
    if delay <= 0:
        return
    try:
        await asyncio.wait_for(stop.wait(), delay)
    except asyncio.TimeoutError:
        pass
