"""`OpenAISpeechEngine`: `tts.Engine` over servers that speak OpenAI's streaming `POST {base}/audio/speech`
(vLLM-Omni, SGLang-Omni, voxgate itself).

One streamed request per text chunk; the body comes back as raw 16-bit PCM in network-sized pieces, re-cut
here into whole 80 ms packets. Cancelling a stream closes its HTTP connection at once, so the server sees the
disconnect and stops generating.
With `transport: websocket` the chunk goes instead as one utterance on vLLM-Omni's `{base}/audio/speech/stream`
(`websocket.py`), read the same way, and its aligner's word timestamps ride the chunk's last packet.

Placement: a session's chunks stay on one endpoint while it serves (the session is the first part of the
request's tag, `session/turn/chunk`); otherwise the serving endpoint with the fewest requests in flight. Before
the first audio byte a request may move: an endpoint that does not answer is taken out (and probed back), one
whose first audio byte does not come within `first_byte_timeout_s` is suspect (out until a speech probe passes),
one that answers 429/503 is busy; when every endpoint was tried the chunk fails with `overloaded` (some were busy)
or `engine_unavailable` (none answered). After the first byte nothing moves: a cut stream, a stream silent for
`stream_stall_timeout_s`, a body that is not raw PCM or a chunk far longer than its text are `engine_error`.

Bounded: a stream's audio waits unread for at most `AHEAD_S` seconds; beyond that the body is not read (the
server meets TCP backpressure), and error bodies are read to a few KiB only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

from tts.engine import Engine, EngineError, PcmChunk, SynthesisRequest, SynthesisStream, TurnStream, VoiceClone
from tts.openai_speech.answers import SHOWN_BYTES, error_text, not_pcm, stated_rate
from tts.openai_speech.endpoint import Endpoint
from tts.openai_speech.packets import PacketCutter
from tts.openai_speech.request_body import DEFAULT_VOICE, speech_body, voice_names
from tts.openai_speech.websocket import ROUTE, ServerSaid, WsAnswer

log = logging.getLogger("voxgate.openai_speech_engine")

AFFINITY_LIMIT = 65_536
AHEAD_S = 3.0  # audio a stream may hold unread before its body is no longer read
# a chunk's audio may last at most this long: no real voice takes 1 s per character; a server that streams on
# for ever (a model that never samples end-of-speech, a runaway loop) is cut there
CHUNK_MAX_BASE_S = 30.0
CHUNK_MAX_S_PER_CHAR = 1.0
PROBE_TEXT = "Hello."  # a suspect server's speech probe
TURN_MODE_REASON = (
    "speech servers take a whole text per request (POST /audio/speech) and no streaming text "
    "input yet, which turn mode needs; use sentence mode"
)


@dataclass
class SpeechServerSettings:
    endpoints: list[str]
    model: str | None = None  # sent as "model" when set
    api_key_env: str | None = None  # environment variable holding a bearer token
    sample_rate: int = 24_000  # what the servers stream; a server that says otherwise is refused
    task_type: str | None = (
        None  # Qwen3-TTS on vLLM-Omni: CustomVoice | VoiceDesign | Base (None: the server's default)
    )
    voices_required: list[str] = field(default_factory=list)  # voice names the config speaks with; checked at start
    connect_timeout_s: float = 5.0  # start waits this long for a first endpoint; health probes' limit
    tcp_connect_timeout_s: float = 1.0  # a request's TCP connect: beyond it the chunk tries another endpoint
    first_byte_timeout_s: float = 2.0  # request sent to first audio byte: beyond it, another endpoint; this suspect
    stream_stall_timeout_s: float = 5.0  # after the first byte, no byte for this long ends the chunk (engine_error)
    probe_interval_s: float = 1.0  # how often an endpoint that is out is asked whether it is back
    packet_ms: int = 80  # the playout's packet: audio is handed on in whole packets (the last one may be short)
    # http: streamed POST /audio/speech (audio only); websocket: vLLM-Omni's /audio/speech/stream with its word
    # timestamps (the server runs with --forced-aligner)
    transport: str = "http"


class OpenAISpeechEngine(Engine):
    name = "openai-speech"
    can_clone = True  # the servers decide: a voice they refuse fails with their answer

    def __init__(self, settings: SpeechServerSettings):
        if not settings.endpoints:
            raise ValueError("engine.endpoints must list at least one speech server for engine.kind: openai-speech")
        self.settings = settings
        self.endpoints = [Endpoint(url) for url in settings.endpoints]
        if len({e.base for e in self.endpoints}) != len(self.endpoints):
            raise ValueError("engine.endpoints lists a speech server twice")
        if settings.transport not in ("http", "websocket"):
            raise ValueError(f"engine.speech_transport {settings.transport!r} must be http or websocket")
        if settings.sample_rate not in (8000, 16000, 22050, 24000, 44100, 48000):
            raise ValueError(
                f"engine.sample_rate {settings.sample_rate} is not a rate speech servers stream "
                "(8000, 16000, 22050, 24000, 44100 or 48000)"
            )
        self.sample_rate = settings.sample_rate  # the session resamples from this to each leg's rate
        self._packet = settings.sample_rate * settings.packet_ms // 1000
        self._token: str | None = None
        if settings.api_key_env:
            self._token = os.environ.get(settings.api_key_env) or None
            if self._token is None:
                raise ValueError(f"engine.api_key_env names {settings.api_key_env}, which is not set")
        self._http = None  # aiohttp.ClientSession, made in start() (it needs the running loop)
        self._tasks: dict[int, asyncio.Task] = {}
        self._affinity: collections.OrderedDict[str, Endpoint] = collections.OrderedDict()
        self._clones: dict[str, VoiceClone] = {}
        self._prober: asyncio.Task | None = None
        self.audio_seconds = 0.0
        self.counters = {
            "requests": 0,
            "retried": 0,
            "refused_everywhere": 0,
            "unavailable": 0,
            "cut_mid_chunk": 0,
            "cancelled": 0,
            "first_byte_timeouts": 0,
            "stalled": 0,
            "not_audio": 0,
            "too_long": 0,
            "watchdog": 0,
        }
        self._serving: dict[int, Endpoint] = {}  # id(stream) → the endpoint its request is on now

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
        self._http = aiohttp.ClientSession(
            connector=connector,
            headers=self._headers(),
            # reads are timed here (first byte, stall); the connect by aiohttp
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.tcp_connect_timeout_s),
        )
        deadline = time.monotonic() + self.settings.connect_timeout_s
        while True:
            await asyncio.gather(*(self._probe(e) for e in self.endpoints))
            if any(e.up for e in self.endpoints) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(min(0.2, self.settings.probe_interval_s))
        if not any(e.up for e in self.endpoints):
            log.warning(
                "no speech server answered in %.1f s (%s); new sessions are refused with engine_unavailable "
                "until one does",
                self.settings.connect_timeout_s,
                self._why_none(),
            )
        try:
            self._check_voices()
        except ValueError:
            await self.close()  # the start fails: leave no connection open
            raise
        self._prober = asyncio.get_running_loop().create_task(self._probe_loop(), name="speech-server-probe")

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            self._prober = None
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _check_voices(self) -> None:
        """Refuse a config that speaks with a voice the servers do not list (where they list voices)."""
        for e in self.endpoints:
            if e.voices is None:
                continue
            known = {v.lower() for v in e.voices}
            missing = [v for v in self.settings.voices_required if v != DEFAULT_VOICE and v.lower() not in known]
            if missing:
                raise ValueError(
                    f"speech server {e.base} has no voice {', '.join(repr(m) for m in missing)} "
                    f"(it lists: {', '.join(sorted(e.voices)) or 'none'})"
                )

    # ------------------------------------------------------------ health probes
    async def _probe_loop(self) -> None:
        checks = 0
        speech_probes: dict[Endpoint, asyncio.Task] = {}
        try:
            while True:
                await asyncio.sleep(self.settings.probe_interval_s)
                checks += 1
                now = time.monotonic()
                for e in self.endpoints:  # suspect ones: a speech probe when due, beside the health probes
                    if e.suspect and now >= e.speech_probe_at and e not in speech_probes:
                        task = asyncio.get_running_loop().create_task(self._speech_probe(e))
                        speech_probes[e] = task
                        task.add_done_callback(lambda _t, e=e: speech_probes.pop(e, None))
                # endpoints that are out, every interval; the serving ones every fifth (a server that died quietly)
                due = [e for e in self.endpoints if not e.suspect and (not e.up or checks % 5 == 0)]
                if due:
                    await asyncio.gather(*(self._probe(e) for e in due), return_exceptions=True)
        finally:
            for task in list(speech_probes.values()):
                task.cancel()

    async def _probe(self, e: Endpoint) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=max(1.0, self.settings.connect_timeout_s))
        try:
            if e.health_url is None:
                await self._discover(e, timeout)
            async with self._http.get(e.health_url, timeout=timeout) as resp:
                text = await resp.text()
                if resp.status == 200:
                    if e.suspect:
                        return  # its health route answering says nothing of its speech: a speech probe decides
                    if not e.up:
                        log.info("speech server %s serves (%s)", e.base, e.flavour)
                    e.mark_up()
                else:
                    e.mark_down(f"{e.health_url} answered {resp.status}: {text[:200]}")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            was_up = e.up
            e.mark_down(f"no answer ({type(exc).__name__}: {exc})" if str(exc) else f"no answer ({type(exc).__name__})")
            if was_up:
                log.warning("speech server %s is out: %s", e.base, e.why_down)

    async def _speech_probe(self, e: Endpoint) -> None:
        """A suspect endpoint's way back: a short speech request whose first audio byte comes within the
        first-byte timeout. The request is closed at that byte (the server stops generating)."""
        import aiohttp

        voice = next((v for v in self.settings.voices_required if v != DEFAULT_VOICE), DEFAULT_VOICE)
        request = SynthesisRequest(text=PROBE_TEXT, voice=voice, tag="speech-probe")
        body = self._body(e, request)
        limit = self.settings.first_byte_timeout_s
        why = None
        try:
            async with asyncio.timeout(limit):
                async with self._http.post(f"{e.base}/audio/speech", json=body) as resp:
                    if resp.status >= 400:
                        why = f"its speech probe was answered {resp.status}: {await error_text(resp)}"
                    elif not_pcm(resp.headers):
                        why = f"its speech probe was answered with {not_pcm(resp.headers)}, not audio/pcm"
                    elif not await resp.content.readany():
                        why = "its speech probe was answered with no audio"
                    resp.close()  # the first byte is all the probe needs
        except TimeoutError:
            why = f"its speech probe got no audio byte in {limit:g} s (engine.first_byte_timeout_s)"
        except (aiohttp.ClientError, OSError) as exc:
            why = f"its speech probe got no answer ({type(exc).__name__}: {exc})"
        if why is None:
            log.info("speech server %s passed a speech probe: back in rotation", e.base)
            e.mark_up()
        else:
            e.speech_probe_failed(why)
            log.info("speech server %s stays out: %s (next probe in %.0f s)", e.base, why, e.speech_probe_wait)

    async def _discover(self, e: Endpoint, timeout) -> None:
        """What the server is (its /models), its voices, and which route tells its health."""
        async with self._http.get(f"{e.base}/models", timeout=timeout) as resp:
            models = await resp.json(content_type=None) if resp.status == 200 else None
        data = models.get("data") if isinstance(models, dict) else None
        if isinstance(data, list) and data and isinstance(data[0], dict):
            e.model = data[0].get("id")
            e.flavour = "voxgate" if "voxgate" in data[0] else "openai"
        voices_url = f"{e.base}/voices" if e.flavour == "voxgate" else f"{e.base}/audio/voices"
        async with self._http.get(voices_url, timeout=timeout) as resp:
            e.voices = voice_names(await resp.json(content_type=None)) if resp.status == 200 else None
        # the server's own health route: vLLM's /health, voxgate's /healthz; else its models route
        for url in (f"{e.root}/health", f"{e.root}/healthz"):
            async with self._http.get(url, timeout=timeout) as resp:
                if resp.status != 404:
                    e.health_url = url
                    return
        e.health_url = f"{e.base}/models"

    def health(self) -> str | None:
        if any(e.up for e in self.endpoints):
            return None
        return f"no speech server serves ({self._why_none()})"

    def _why_none(self) -> str:
        return "; ".join(f"{e.base}: {e.why_down or 'down'}" for e in self.endpoints)

    # ------------------------------------------------------------ requests
    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        if self._http is None:
            raise EngineError("engine_unavailable", "the openai-speech engine is not started")
        if not any(e.up for e in self.endpoints):
            self.counters["unavailable"] += 1
            raise EngineError("engine_unavailable", self.health())
        stream = SynthesisStream(request, self)
        self.counters["requests"] += 1
        task = asyncio.get_running_loop().create_task(
            self._run(stream), name=f"speech {request.tag or request.request_id}"
        )
        self._tasks[id(stream)] = task
        task.add_done_callback(lambda _t, key=id(stream): self._tasks.pop(key, None))
        return stream

    supports_turns = False

    def turn_supported(self, voice: str) -> str | None:
        return TURN_MODE_REASON

    def open_turn(self, request: SynthesisRequest) -> TurnStream:
        raise EngineError("unsupported_mode", TURN_MODE_REASON)

    def _cancel(self, stream: SynthesisStream) -> None:
        task = self._tasks.pop(id(stream), None)
        if task is not None and not task.done():
            self.counters["cancelled"] += 1
            e = self._serving.get(id(stream))
            if stream.cancel_error is not None and e is not None:
                # the consumer gave up on the chunk (the session's stall watchdog): the server's failure, not a
                # barge-in, so its next chunks go elsewhere
                self.counters["watchdog"] += 1
                e.errors["engine_error"] += 1
                self._suspect(e, f"a chunk it served was given up ({stream.cancel_error})")
            task.cancel()  # closes the HTTP connection: the server sees the disconnect

    def _suspect(self, e: Endpoint, why: str) -> None:
        if not e.suspect:
            log.warning("speech server %s is suspect: %s; out until a speech probe passes", e.base, why)
        e.mark_suspect(why, self.settings.probe_interval_s)

    def _choose(self, key: str, tried: set) -> Endpoint | None:
        candidates = [e for e in self.endpoints if e.up and e not in tried]
        if not candidates:
            return None
        sticky = self._affinity.get(key) if key else None
        if sticky in candidates:
            self._affinity.move_to_end(key)
            return sticky
        chosen = min(candidates, key=lambda e: (e.in_flight, e.requests))
        if key:
            self._affinity[key] = chosen
            self._affinity.move_to_end(key)
            while len(self._affinity) > AFFINITY_LIMIT:
                self._affinity.popitem(last=False)
        return chosen

    async def _run(self, stream: SynthesisStream) -> None:
        try:
            await self._place(stream)
        except asyncio.CancelledError:
            if not stream.done:  # close(), not the consumer's cancel: nobody may wait on it for ever
                stream._fail(EngineError("engine_unavailable", "the openai-speech engine closed"))
            raise

    async def _place(self, stream: SynthesisStream) -> None:
        """Try the chosen server, then the others, until the chunk streamed or failed for good."""
        request = stream.request
        key = request.tag.partition("/")[0] if "/" in request.tag else ""
        tried: set[Endpoint] = set()
        busy: list[str] = []
        while not stream.done:
            e = self._choose(key, tried)
            if e is None:
                if busy:
                    self.counters["refused_everywhere"] += 1
                    stream._fail(EngineError("overloaded", "every speech server is busy (" + "; ".join(busy) + ")"))
                else:
                    self.counters["unavailable"] += 1
                    stream._fail(EngineError("engine_unavailable", self.health() or "no speech server answered"))
                return
            if tried:
                self.counters["retried"] += 1
            tried.add(e)
            why_busy = await self._stream_from(e, stream)
            if why_busy is not None:
                busy.append(f"{e.base}: {why_busy}")

    def _body(self, e: Endpoint, request: SynthesisRequest) -> dict:
        return speech_body(
            request,
            flavour=e.flavour,
            model=self.settings.model,
            sample_rate=self.sample_rate,
            task_type=self.settings.task_type,
            clone=self._clones.get(request.voice),
        )

    async def _stream_from(self, e: Endpoint, stream: SynthesisStream) -> str | None:
        """Stream one chunk from `e`. Returns None when the stream ended here (audio, or a failure delivered) or
        `e` is out (the caller tries another), or why `e` was busy; raises nothing."""
        import aiohttp

        e.in_flight += 1
        e.requests += 1
        self._serving[id(stream)] = e
        attempt = _Attempt(time.monotonic())
        resp = None
        limit = self.settings.first_byte_timeout_s
        try:
            try:
                async with asyncio.timeout(limit):  # everything up to the first audio byte
                    if self.settings.transport == "websocket":
                        resp, first = await self._open_ws(e, stream)
                    else:
                        resp, first = await self._open_http(e, stream)
                    if isinstance(resp, str):
                        return resp  # busy
                    if resp is None:
                        return None  # refused: the chunk failed
            except aiohttp.ClientError:
                raise  # no answer (its connect timeout included): handled below
            except TimeoutError:
                self.counters["first_byte_timeouts"] += 1
                e.errors["engine_unavailable"] += 1
                self._suspect(e, f"no audio byte {limit:g} s after a request (engine.first_byte_timeout_s)")
                return None
            await self._relay(e, resp, stream, attempt, first)
            return None
        except asyncio.CancelledError:
            raise
        except ServerSaid as exc:
            e.errors["engine_error"] += 1
            stream._fail(EngineError("engine_error", f"speech server {e.base} {exc}"))
            return None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempt.got_bytes:
                e.errors["engine_error"] += 1
                self.counters["cut_mid_chunk"] += 1
                e.mark_down(f"a stream was cut mid-chunk ({what})")
                log.warning(
                    "speech server %s cut %s mid-chunk (%s); it is out until it answers again",
                    e.base,
                    stream.request.tag or "a request",
                    what,
                )
                stream._fail(EngineError("engine_error", f"speech server {e.base} cut the stream mid-chunk ({what})"))
            else:
                e.errors["engine_unavailable"] += 1
                e.mark_down(f"no answer ({what})")
                log.warning("speech server %s does not answer (%s); trying another", e.base, what)
            return None
        finally:
            e.in_flight -= 1
            self._serving.pop(id(stream), None)
            if isinstance(resp, WsAnswer):
                await resp.end(stream.done and not stream.cancelled and resp.content.at_eof())
            elif resp is not None and not isinstance(resp, str):
                if stream.done and not stream.cancelled and resp.content.at_eof():
                    resp.release()  # read to the end: the connection goes back to the pool
                else:
                    resp.close()  # cancelled, failed or cut short: close the connection so the server sees it

    async def _open_http(self, e: Endpoint, stream: SynthesisStream):
        """POST the chunk: (answer, its first bytes); (why busy, None); (None, None) when refused (failed)."""
        import aiohttp

        resp = await self._http.post(f"{e.base}/audio/speech", json=self._body(e, stream.request))
        try:
            if resp.status in (429, 503):
                e.errors["overloaded"] += 1
                why = f"{resp.status} {await error_text(resp)}"
                resp.close()
                return why, None
            if resp.status in (502, 504):
                raise aiohttp.ClientConnectionError(f"{resp.status} {await error_text(resp)}")
            if not await self._playable(e, resp, stream):
                resp.close()
                return None, None
            return resp, await resp.content.readany()
        except BaseException:  # the first-byte limit, a cut: close the connection so the server sees it
            resp.close()
            raise

    async def _open_ws(self, e: Endpoint, stream: SynthesisStream):
        """The chunk as one utterance on vLLM-Omni's speech WebSocket: as `_open_http`."""
        import aiohttp

        try:
            resp = await WsAnswer.open(
                self._http, e.base, self._body(e, stream.request), stream.request.text, self.sample_rate
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status in (429, 503):
                e.errors["overloaded"] += 1
                return f"{exc.status} {exc.message}", None
            if exc.status in (502, 504):
                raise
            e.errors["engine_error"] += 1
            stream._fail(
                EngineError("engine_error", f"speech server {e.base} refused the WebSocket {ROUTE} ({exc.status})")
            )
            return None, None
        try:
            return resp, await resp.content.readany()
        except BaseException:
            await resp.end(False)
            raise

    async def _playable(self, e: Endpoint, resp, stream: SynthesisStream) -> bool:
        """Whether a 2xx answer's body is the raw PCM asked for, at our rate; else the chunk fails with
        `engine_error` (a refusal quoted; a body that is not audio never plays, its type and first bytes logged)."""
        problem = None
        if resp.status >= 400:
            problem = f"refused the request ({resp.status}): {await error_text(resp)}"
        elif (wrong := not_pcm(resp.headers)) is not None:
            head = await resp.content.read(SHOWN_BYTES)
            self.counters["not_audio"] += 1
            log.warning(
                "speech server %s answered %s with Content-Type %r, not audio/pcm (first bytes %r): not played",
                e.base,
                stream.request.tag or "a request",
                wrong,
                head,
            )
            self._suspect(e, f"it answered {wrong!r}, not audio/pcm")
            problem = f"answered {wrong!r}, not audio/pcm: not played"
        elif (rate := stated_rate(resp.headers)) is not None and rate != self.sample_rate:
            problem = f"streams {rate} Hz, but engine.sample_rate is {self.sample_rate}: set engine.sample_rate: {rate}"
        if problem is None:
            return True
        e.errors["engine_error"] += 1
        stream._fail(EngineError("engine_error", f"speech server {e.base} {problem}"))
        return False

    async def _relay(self, e: Endpoint, resp, stream: SynthesisStream, attempt: "_Attempt", data: bytes) -> None:
        """The body's s16le bytes (`data` is its first piece) as float32 packets of whole `packet_ms` (the last
        one may be short); reading pauses while the stream holds `AHEAD_S` unread; a stall or a body far longer
        than the text ends the chunk with `engine_error`."""
        cutter = PacketCutter(self._packet)
        delivered = 0  # samples handed on; the chunks' frame index counts 80 ms codec frames
        codec_frame = self.sample_rate * 2 // 25
        ahead = int(AHEAD_S * self.sample_rate)
        most_s = CHUNK_MAX_BASE_S + CHUNK_MAX_S_PER_CHAR * len(stream.request.text)
        most = int(most_s * self.sample_rate)
        stall = self.settings.stream_stall_timeout_s
        received = 0
        while data:
            if not attempt.got_bytes:
                attempt.got_bytes = True
                e.record_ttfb(time.monotonic() - attempt.sent_at)
            received += len(data) // 2
            too_long = received > most
            if too_long:  # what fits under the cap plays; the rest is never read
                data = data[: max(0, len(data) - (received - most) * 2)]
            packets = cutter.feed(data)
            # one chunk a packet, however much one read brought (on loopback a read holds seconds of audio): a
            # consumer that paces its reads (a paced call) then overshoots its bound by a packet at most
            for start in range(0, len(packets) if packets is not None else 0, self._packet):
                self._deliver(stream, packets[start : start + self._packet], delivered // codec_frame, False)
                delivered += min(self._packet, len(packets) - start)
            if too_long:
                self.counters["too_long"] += 1
                e.errors["engine_error"] += 1
                log.warning("speech server %s streamed over %.0f s for %s: cut", e.base, most_s, stream.request.tag)
                stream._fail(
                    EngineError(
                        "engine_error",
                        f"speech server {e.base} streamed over {most_s:.0f} s of audio for "
                        f"{len(stream.request.text)} characters of text: cut there",
                    )
                )
                return
            await stream._wait_for_room(ahead)  # the consumer is behind: the server waits (TCP backpressure)
            if stream.done:
                return
            try:
                async with asyncio.timeout(stall):
                    data = await resp.content.readany()
            except TimeoutError:
                self.counters["stalled"] += 1
                e.errors["engine_error"] += 1
                self._suspect(e, f"a stream sent nothing for {stall:g} s mid-chunk")
                stream._fail(
                    EngineError(
                        "engine_error",
                        f"speech server {e.base} sent nothing for {stall:g} s mid-chunk "
                        "(engine.stream_stall_timeout_s)",
                    )
                )
                return
        words = resp.take_words() if isinstance(resp, WsAnswer) else None  # aligned once the audio has ended
        self._deliver(stream, cutter.flush(), delivered // codec_frame, True, words)

    def _deliver(self, stream: SynthesisStream, pcm: np.ndarray, frame: int, last: bool, words=None) -> None:
        self.audio_seconds += len(pcm) / self.sample_rate
        stream._deliver(PcmChunk(pcm, frame, last, words=words))

    # ------------------------------------------------------------ voices
    def voices(self) -> list[str]:
        names: set[str] = set()
        for e in self.endpoints:
            names.update(e.voices or ())
        return sorted(names | set(self._clones))

    async def add_voice(self, voice: VoiceClone) -> dict:
        """voxgate servers get the recording uploaded (`POST /v1/voices`); the others receive it with every request
        that speaks with it (`ref_audio`, as vLLM-Omni takes Base voice clones). A refusal names the server's answer."""
        import aiohttp

        uploads = [e for e in self.endpoints if e.up and e.flavour == "voxgate"]
        for e in uploads:
            form = aiohttp.FormData()
            form.add_field("name", voice.name)
            form.add_field("audio", voice.ref_audio, filename="reference.wav", content_type="audio/wav")
            if voice.ref_text:
                form.add_field("ref_text", voice.ref_text)
            form.add_field("x_vector_only", "true" if voice.x_vector_only else "false")
            try:
                async with self._http.post(f"{e.base}/voices", data=form) as resp:
                    if resp.status >= 400:
                        raise EngineError(
                            "bad_voice",
                            f"speech server {e.base} refused voice {voice.name!r} "
                            f"({resp.status}): {await error_text(resp)}",
                        )
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                raise EngineError(
                    "engine_unavailable", f"speech server {e.base} did not take voice {voice.name!r}: {exc}"
                ) from None
        self._clones[voice.name] = voice
        return {"name": voice.name, "kind": voice.kind, "sent": "uploaded" if uploads else "with each request"}

    def remove_voice(self, name: str) -> bool:
        return self._clones.pop(name, None) is not None

    def cloned_voices(self) -> list[dict]:
        return [{"name": v.name, "kind": v.kind} for v in self._clones.values()]

    # ------------------------------------------------------------ stats
    def stats(self) -> dict:
        up = sum(1 for e in self.endpoints if e.up)
        return {
            "queued": 0,
            "active": sum(e.in_flight for e in self.endpoints),
            "audio_seconds": self.audio_seconds,
            "endpoints": len(self.endpoints),
            "endpoints_up": up,
            **self.counters,
        }

    def endpoint_stats(self) -> list[dict]:
        """Per speech server: address, up (or why not), in flight, first-byte times, errors by code."""
        return [e.describe() for e in self.endpoints]


class _Attempt:
    """One request of a chunk to one server: before its first audio byte the chunk may still move elsewhere."""

    __slots__ = ("sent_at", "got_bytes")

    def __init__(self, sent_at: float):
        self.sent_at = sent_at
        self.got_bytes = False
