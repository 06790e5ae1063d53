"""`POST /v1/audio/speech` and `GET /v1/models`, OpenAI-compatible.

A speech request is a headless session (gateway/core/headless.py): one turn with
the request's whole input, through the same frontend, chunker, two chunks in
flight, engine deadlines and `server.max_sessions` as a call. Nothing paces
its audio: each piece goes out (encoded to the response format) as the
engine yields it, so the body's first bytes leave with the first packet.

The status line waits for the first audio (or the first failure), so an
engine that refuses the request still gets an honest 429, not a 200 with an
empty body. A failure after audio went out cannot change the status: an
`audio` body is cut off (the client sees an incomplete body, never a silent
hole in the speech), an `sse` body ends with an `error` event.

Errors use OpenAI's body, `{"error": {"message", "type", "param", "code"}}`,
with our stable error codes in `code` (docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from audio.containers import FORMATS, ContainerError, container_encoder, containers_available
from gateway import protocol as P
from gateway.core import CallCore
from gateway.core.headless import HeadlessError
from gateway.cluster.plane import ClusterUnavailable
from gateway.legs.accept import admit, authorized
from tts import CODEC_FRAME_SAMPLES, SAMPLE_RATE

log = logging.getLogger("voxgate.openai_speech")

TURN_ID = "speech"
STREAM_FORMATS = ("audio", "sse")
MAX_INSTRUCTIONS = 4096
ENCODE_SLICE = SAMPLE_RATE // 5  # encode (and send) at most 200 ms of audio at a time
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
    504: "server_error",
}
# Our error codes that mean "try again later" rather than "your request is wrong".
_RETRY_LATER = {P.AT_CAPACITY: 429, P.OVERLOADED: 429, P.SHUTTING_DOWN: 503, P.ENGINE_UNAVAILABLE: 503}


class SpeechError(Exception):
    def __init__(self, status: int, code: str, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": _TYPES.get(self.status, "server_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> web.Response:
        headers = {"Retry-After": "1"} if self.status in (429, 503) else None
        return web.json_response(self.body(), status=self.status, headers=headers)


@dataclass(frozen=True)
class SpeechRequest:
    model: str
    input: str
    voice: str | None
    instructions: str | None
    response_format: str
    speed: float
    stream_format: str
    language: str


def _field(body: dict, name: str, kind: type | tuple, default: Any = None, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise SpeechError(400, P.BAD_MESSAGE, f"missing required parameter {name!r}", name)
        return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise SpeechError(400, P.BAD_MESSAGE, f"{name!r} must be {_kind_name(kind)}, not a boolean", name)
    if not isinstance(value, kind):
        raise SpeechError(400, P.BAD_MESSAGE, f"{name!r} must be {_kind_name(kind)}, got {type(value).__name__}", name)
    return value


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(
        {"str": "a string", "int": "a number", "float": "a number", "dict": "an object"}[k.__name__] for k in kinds
    )


def parse_speech_request(body: Any) -> SpeechRequest:
    """Validates the JSON body (fields OpenAI does not define are ignored, except `language`, ours)."""
    if not isinstance(body, dict):
        raise SpeechError(400, P.BAD_MESSAGE, "the request body must be a JSON object")
    model = _field(body, "model", str, required=True)
    if not model or len(model) > 256 or not model.isascii() or not model.isprintable():
        raise SpeechError(400, P.BAD_MESSAGE, "'model' must be 1..256 printable ASCII characters", "model")
    text = _field(body, "input", str, required=True)
    if not text.strip():
        raise SpeechError(400, P.BAD_MESSAGE, "'input' must not be empty", "input")
    voice = _field(body, "voice", (str, dict))
    if isinstance(voice, dict):  # OpenAI's custom-voice form: {"id": "..."}
        voice = voice.get("id")
        if not isinstance(voice, str):
            raise SpeechError(400, P.BAD_MESSAGE, "'voice' as an object needs a string 'id'", "voice")
    instructions = _field(body, "instructions", str)
    if instructions is not None and len(instructions) > MAX_INSTRUCTIONS:
        raise SpeechError(
            400, P.TEXT_TOO_LONG, f"'instructions' is longer than {MAX_INSTRUCTIONS} characters", "instructions"
        )
    fmt = _field(body, "response_format", str, "mp3")
    if fmt not in FORMATS:
        raise SpeechError(
            400, P.UNSUPPORTED_FORMAT, f"response_format {fmt!r} is not one of {', '.join(FORMATS)}", "response_format"
        )
    if fmt not in containers_available():
        raise SpeechError(
            400,
            P.UNSUPPORTED_FORMAT,
            f"response_format {fmt!r} needs PyAV on the server (pip install 'voxgate[speech]'); pcm and wav work without it",
            "response_format",
        )
    speed = _field(body, "speed", (int, float), 1.0)
    if not math.isfinite(speed) or not 0.25 <= speed <= 4.0:
        raise SpeechError(400, P.BAD_MESSAGE, f"'speed' must be between 0.25 and 4.0, got {speed}", "speed")
    if abs(speed - 1.0) > 1e-9:
        # Qwen3-TTS has no speaking-rate control, and time-stretching would change the voice: refuse, never ignore.
        raise SpeechError(400, P.UNSUPPORTED_SPEED, f"this engine speaks at speed 1.0 only, not {speed}", "speed")
    stream_format = _field(body, "stream_format", str, "audio")
    if stream_format not in STREAM_FORMATS:
        raise SpeechError(
            400, P.BAD_MESSAGE, f"stream_format {stream_format!r} is not one of audio, sse", "stream_format"
        )
    language = _field(body, "language", str, "auto")
    return SpeechRequest(model, text, voice, instructions, fmt, float(speed), stream_format, language)


class OpenAISpeech:
    def __init__(self, core: CallCore):
        self.core = core
        self.created = int(time.time())

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/audio/speech", self.speech), web.get("/v1/models", self.models)]

    @property
    def model_id(self) -> str:
        """What serves: the checkpoint's folder name for Qwen3, else the engine kind."""
        model_dir = self.core.config.engine.model_dir
        if self.core.engine_kind == "qwen3" and model_dir:
            return os.path.basename(os.path.normpath(model_dir))
        return f"voxgate-{self.core.engine_kind}"

    # ------------------------------------------------------------ GET /v1/models
    async def models(self, request: web.Request) -> web.Response:
        if not authorized(self.core, request):
            return _unauthorized().response()
        config = self.core.config
        voices = {name: v.aliases for name, v in config.voices.items()}
        model = {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "voxgate",
            # ours, beside OpenAI's fields: what /v1/audio/speech takes
            "voxgate": {
                "engine": self.core.engine_kind,
                "voices": voices,
                "default_voice": config.default_voice_name,
                "response_formats": list(containers_available()),
                "stream_formats": list(STREAM_FORMATS),
            },
        }
        return web.json_response({"object": "list", "data": [model]})

    # ------------------------------------------------------------ POST /v1/audio/speech
    async def speech(self, request: web.Request) -> web.StreamResponse:
        core = self.core
        try:
            try:
                if await admit(core, request) is not None:
                    raise _unauthorized()
            except ClusterUnavailable as exc:
                raise SpeechError(
                    503, P.CLUSTER_UNAVAILABLE, f"the call plane is unavailable ({exc}); try again shortly"
                ) from None
            if not core.accepting or core.draining:
                raise SpeechError(503, P.SHUTTING_DOWN, "the gateway is draining and takes no new requests")
            req = parse_speech_request(await _read_json(request))
            encoder = container_encoder(req.response_format, SAMPLE_RATE)
            session = await self._open_session(req)
        except SpeechError as exc:
            core.metrics.errors.labels(code=exc.code).inc()
            return exc.response()
        except ContainerError as exc:
            return SpeechError(400, P.UNSUPPORTED_FORMAT, str(exc), "response_format").response()
        # A request is a call without a media leg: it ends at limits.max_call_s like one (an engine that never
        # answers must not hold a session for ever).
        limit = core.config.server.limits.max_call_s
        timer = asyncio.get_running_loop().call_later(
            limit, session.playout.fail, P.CALL_TOO_LONG, f"the request reached limits.max_call_s = {limit:g} s"
        )
        core.metrics.speech_in_flight.inc()
        try:
            return await self._stream(request, req, session, encoder)
        finally:
            core.metrics.speech_in_flight.dec()
            timer.cancel()
            if not session.closed:
                await session.close()

    async def _open_session(self, req: SpeechRequest):
        """A registered headless session (counts against max_sessions) with the request's turn queued."""
        try:
            session = self.core.new_headless_session("openai", req.voice, req.language, req.instructions)
        except P.ProtocolError as exc:
            raise _from_protocol(
                exc, "voice" if exc.code == P.UNKNOWN_VOICE else "language" if exc.code == P.BAD_MESSAGE else None
            ) from None
        try:
            session.add_text(TURN_ID, req.input, final=True)
        except P.ProtocolError as exc:
            await session.close()
            raise _from_protocol(exc, "input") from None
        return session

    async def _stream(self, request: web.Request, req: SpeechRequest, session, encoder) -> web.StreamResponse:
        metrics = self.core.metrics
        pieces = session.playout.audio()
        started = time.monotonic()
        try:
            first = await pieces.__anext__()
        except StopAsyncIteration:
            first = None
        except HeadlessError as exc:
            error = _from_engine(exc)
            metrics.errors.labels(code=error.code).inc()
            return error.response()
        sse = req.stream_format == "sse"
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream" if sse else encoder.media_type,
                "Cache-Control": "no-cache",
                "X-Voxgate-Model": req.model,  # the model the client asked for; the configured engine served it
                "X-Voxgate-Served-By": self.model_id,
                "X-Voxgate-Voice": session.voice_name,
                "X-Voxgate-Session": session.session_id,
            }
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        samples = 0

        async def encode(pcm=None) -> bytes:
            """A real codec runs in a worker thread: a second of mp3 must not stall the clock that paces calls."""
            work = encoder.finish if pcm is None else (lambda: encoder.encode(pcm))
            return await asyncio.to_thread(work) if encoder.cpu_heavy else work()

        async def send_pcm(pcm) -> None:
            # An engine that yields a whole sentence at once (eSpeak) would wait for all of it to be encoded.
            for start in range(0, len(pcm), ENCODE_SLICE):
                await send(await encode(pcm[start : start + ENCODE_SLICE]))

        async def send(data: bytes) -> None:
            if not data:
                return
            if sse:
                event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
                data = f"data: {json.dumps(event)}\n\n".encode()
            await response.write(data)

        try:
            if first is not None:
                samples += len(first)
                await send_pcm(first)
            async for pcm in pieces:
                samples += len(pcm)
                await send_pcm(pcm)
            await send(await encode())
        except HeadlessError as exc:
            error = _from_engine(exc)
            metrics.errors.labels(code=error.code).inc()
            log.warning("speech request %s failed after audio went out: %s", session.session_id, exc.message)
            if sse:
                await response.write(f"data: {json.dumps({'type': 'error', **error.body()})}\n\n".encode())
                await response.write_eof()
            else:
                request.transport.close()  # an incomplete body: the client knows the audio is not whole
            return response
        except (ConnectionResetError, OSError):
            log.info("speech request %s: the client went away", session.session_id)
            return response
        if sse:
            frames = math.ceil(samples / CODEC_FRAME_SAMPLES)
            done = {
                "type": "speech.audio.done",
                "model": req.model,
                # input counted in characters, output in 80 ms codec frames (Qwen3-TTS's tokens)
                "usage": {
                    "input_tokens": len(req.input),
                    "output_tokens": frames,
                    "total_tokens": len(req.input) + frames,
                },
                "audio_ms": round(samples * 1000 / SAMPLE_RATE, 1),
                "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
            }
            await response.write(f"data: {json.dumps(done)}\n\n".encode())
        await response.write_eof()
        return response


async def _read_json(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise SpeechError(
            413, P.TOO_LARGE, "the request body is too large (the limit is 4 × server.limits.max_message_bytes)"
        ) from None
    try:
        return P.loads_json(raw)
    except ValueError as exc:  # UnicodeDecodeError and too-deep nesting included
        raise SpeechError(400, P.BAD_JSON, f"the request body is not valid JSON: {exc}") from None


def _unauthorized() -> SpeechError:
    return SpeechError(401, P.UNAUTHORIZED, "missing or wrong API key (Authorization: Bearer <key>)")


def _from_protocol(exc: P.ProtocolError, param: str | None) -> SpeechError:
    status = _RETRY_LATER.get(exc.code, 413 if exc.code == P.TEXT_TOO_LONG else 400)
    return SpeechError(status, exc.code, exc.message, param if status == 400 else None)


def _from_engine(exc: HeadlessError) -> SpeechError:
    status = 504 if exc.code == P.CALL_TOO_LONG else _RETRY_LATER.get(exc.code, 500)
    return SpeechError(status, exc.code, exc.message)


def routes(core: CallCore) -> list[web.RouteDef]:
    return OpenAISpeech(core).routes()
