"""/v1/twilio: Twilio Media Streams, bidirectional (`<Connect><Stream>`), as a media leg.

Twilio sends JSON text frames (connected, start, media, dtmf, mark, stop)
with base64 μ-law 8 kHz audio; we send `media` frames paced by the shared
clock, a `mark` after each text chunk's last frame, and `clear` on barge-in.
Twilio buffers what it is sent and echoes a mark once the audio before it
has played; after a `clear` it echoes the pending marks too, so a mark
echoed after our `clear` means its chunk was dropped, not played. The
control socket learns each outcome as `call.mark`.

Nothing but media, mark and clear may go to Twilio (anything else is a
protocol error there), so problems with Twilio's input are reported to the
call's control socket and to metrics and logs, never on this socket.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import itertools
import json
import logging
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from aiohttp import WSCloseCode, WSMsgType, web

from audio.g711 import ulaw_decode, ulaw_encode
from audio.playout import PlayoutEvent
from gateway import protocol as P
from gateway.calls import TELEPHONY_PCM, Call, CallRegistry

if TYPE_CHECKING:
    from gateway.server import Gateway

log = logging.getLogger("voxgate.twilio")

MAX_SEND_BACKLOG_BYTES = 48 * 1024
MAX_MARK_BACKLOG_BYTES = 256 * 1024  # marks and clear still go out above the media cap, up to this much unsent
MAX_MEDIA_BYTES = 8000  # one second of μ-law; Twilio sends 160-byte (20 ms) chunks
DTMF_DIGITS = frozenset("0123456789*#ABCDabcd")
MAX_OUTSTANDING_MARKS = 256
START_TIMEOUT_S = 10.0  # Twilio sends `start` right after connecting; a socket that does not is not Twilio
CLOSE_POLICY = 1008
CLOSE_TRY_AGAIN_LATER = 1013


def twilio_signature(auth_token: str, url: str, params: dict[str, str] | None = None) -> str:
    """base64(HMAC-SHA1(token, url + sorted POST params)) — what Twilio puts in X-Twilio-Signature."""
    data = url + "".join(k + params[k] for k in sorted(params or {}))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode()


@dataclass
class _SentMark:
    epoch: int  # the number of `clear`s sent before it
    turn_id: str
    chunk: int
    played_ms: float


class TwilioLeg:
    """The media leg of one Twilio stream: μ-law frames, marks and clear."""

    clock_driven = True
    send_idle_silence = False
    output = TELEPHONY_PCM  # the session hands us PCM16 8 kHz; each frame is converted to μ-law here

    def __init__(self, ws: web.WebSocketResponse, transport, stream_sid: str, metrics, protocol=None):
        self.ws = ws
        self.transport = transport
        self.protocol = protocol  # aiohttp's request protocol: tells whether a send would wait for Twilio to read
        if transport is not None and protocol is not None:
            transport.set_write_buffer_limits(high=MAX_MARK_BACKLOG_BYTES)  # room for a mark that names a long turn id
        self.stream_sid = stream_sid
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="twilio")
        sid = json.dumps(stream_sid)
        self._media_head = '{"event":"media","streamSid":' + sid + ',"media":{"payload":"'
        self._clear = '{"event":"clear","streamSid":' + sid + "}"
        self._sid = sid
        self._names = itertools.count()
        self._to_send: list[tuple[str, _SentMark]] = []  # marks whose chunk's last frame is being sent
        self.sent_marks: dict[str, _SentMark] = {}
        self.epoch = 0
        self.clears_sent = 0

    def _usable(self) -> bool:
        t = self.transport
        return not self.ws.closed and t is not None and not t.is_closing()

    def _would_wait(self, nbytes: int) -> bool:
        """True when sending `nbytes` would wait for Twilio to read (inside the shared clock's tick: every call would stall)."""
        if self.protocol is not None and self.protocol.writing_paused:
            return True
        t = self.transport
        return t.get_write_buffer_size() + nbytes + 16 > t.get_write_buffer_limits()[1]

    async def _send_or_drop_stream(self, text: str) -> None:
        """A mark or clear: it cannot be dropped alone, so a stream backed up this far (megabytes unread) is cut."""
        if self._would_wait(len(text)):
            log.warning("twilio stream %s is not reading (%d bytes unsent); closing it", self.stream_sid, self.transport.get_write_buffer_size())
            self.transport.abort()
            return
        await self.ws.send_str(text)

    async def send_audio(self, frame: bytes) -> None:
        if self._usable():
            if self.transport.get_write_buffer_size() > MAX_SEND_BACKLOG_BYTES or self._would_wait(len(self._media_head) + 2 * len(frame)):
                self.metrics.frames_dropped.inc()  # as Twilio does when congested: drop, never block the clock
            else:
                payload = base64.b64encode(ulaw_encode(np.frombuffer(frame, dtype="<i2"))).decode("ascii")
                await self.ws.send_str(self._media_head + payload + '"}}')
                self._frames.inc()
        await self._send_marks()

    async def _send_marks(self) -> None:
        """Marks go after the frame that holds their chunk's last audio."""
        while self._to_send:
            name, mark = self._to_send.pop(0)
            if not self._usable():
                continue
            if len(self.sent_marks) >= MAX_OUTSTANDING_MARKS:  # a far end that never echoes must not grow our memory
                del self.sent_marks[next(iter(self.sent_marks))]
            self.sent_marks[name] = mark
            await self._send_or_drop_stream('{"event":"mark","streamSid":' + self._sid + ',"mark":{"name":' + json.dumps(name) + "}}")

    def on_playout_event(self, event: PlayoutEvent) -> None:
        if event.type == "mark":
            name = f"{event.turn_id}/{event.data['chunk']}/{next(self._names)}"
            self._to_send.append((name, _SentMark(self.epoch, event.turn_id, event.data["chunk"], event.data["played_ms"])))

    async def on_flush(self) -> None:
        self._to_send.clear()  # their audio was flushed before it went out
        self.epoch += 1
        self.clears_sent += 1
        if self._usable():
            await self._send_or_drop_stream(self._clear)

    def on_mark_echo(self, name: str) -> dict | None:
        """Twilio echoed a mark: the `call.mark` event for the control socket, or None if we never sent it."""
        mark = self.sent_marks.pop(name, None)
        if mark is None:
            return None
        status = "played" if mark.epoch == self.epoch else "dropped"
        return {"type": "call.mark", "turn_id": mark.turn_id, "chunk": mark.chunk, "status": status, "played_ms": mark.played_ms}

    async def hangup(self) -> None:
        if not self.ws.closed:
            await self.ws.close(code=WSCloseCode.OK)


class TwilioEndpoint:
    def __init__(self, gateway: "Gateway", registry: CallRegistry):
        self.gateway = gateway
        self.registry = registry
        env = gateway.config.telephony.twilio_auth_token_env
        self.auth_token: str | None = None
        if env:
            self.auth_token = os.environ.get(env)
            if not self.auth_token:
                raise ValueError(f"telephony.twilio_auth_token_env names {env!r}, but that environment variable is empty or unset")
        elif gateway.config.server.api_keys:
            # Twilio cannot send an API key (no headers, no query string in <Stream>): its signature is /v1/twilio's only guard.
            log.warning("server.api_keys is set but telephony.twilio_auth_token_env is not: /v1/twilio is OPEN to anyone who can reach it")

    def route(self) -> web.RouteDef:
        return web.get("/v1/twilio", self.handle)

    def signed_url(self, request: web.Request) -> str:
        """The URL Twilio signed: `telephony.public_url` (behind proxies) or the one this request reached."""
        public = self.gateway.config.telephony.public_url
        if public:
            public = public.rstrip("/")
            return public if public.endswith(request.path) else public + request.path_qs
        scheme = "wss" if request.secure else "ws"
        return f"{scheme}://{request.host}{request.path_qs}"

    def signature_ok(self, request: web.Request) -> bool:
        if self.auth_token is None:
            return True
        got = request.headers.get("X-Twilio-Signature", "")
        want = twilio_signature(self.auth_token, self.signed_url(request))
        return hmac.compare_digest(got.encode(), want.encode())

    async def handle(self, request: web.Request) -> web.StreamResponse:
        gw = self.gateway
        if not self.signature_ok(request):
            gw.metrics.errors.labels(code=P.UNAUTHORIZED).inc()
            log.warning("twilio: refused a stream with a missing or wrong X-Twilio-Signature (signed URL %s)", self.signed_url(request))
            return web.json_response(P.error_event(P.UNAUTHORIZED, "missing or wrong X-Twilio-Signature"), status=403)
        limits = gw.config.server.limits
        ws = web.WebSocketResponse(heartbeat=limits.ping_interval_s, max_msg_size=limits.max_message_bytes * 4, compress=False)
        await ws.prepare(request)
        if not gw.accepting:
            await ws.close(code=CLOSE_TRY_AGAIN_LATER)
            return ws
        stream = _TwilioStream(self, ws, request)
        self.registry.track(ws.close)
        try:
            await stream.run()
        except Exception:
            log.exception("twilio stream failed")
            gw.metrics.errors.labels(code=P.INTERNAL).inc()
            if stream.call is not None:
                await stream.call.report(P.INTERNAL, "internal error in the Twilio media leg; the call was ended")
        finally:
            if stream.call is not None:
                await self.registry.end_media(stream.call, stream.end_reason)
            if not ws.closed:
                await ws.close(code=WSCloseCode.OK)
        return ws


class _TwilioStream:
    """The reading side of one Twilio WebSocket."""

    def __init__(self, endpoint: TwilioEndpoint, ws: web.WebSocketResponse, request: web.Request):
        self.endpoint = endpoint
        self.gateway = endpoint.gateway
        self.ws = ws
        self.request = request
        self.leg: TwilioLeg | None = None
        self.call: Call | None = None
        self.end_reason = "disconnected"

    async def run(self) -> None:
        limits = self.gateway.config.server.limits
        while not self.ws.closed:
            timeout = limits.idle_timeout_s if self.call is not None else START_TIMEOUT_S
            try:
                msg = await asyncio.wait_for(self.ws.receive(), timeout=timeout)
            except asyncio.TimeoutError:  # Twilio may never send `stop`
                self.end_reason = "idle_timeout"
                await self._error(P.IDLE_TIMEOUT, f"no {'message' if self.call else 'start'} from Twilio for {timeout:g} s")
                return
            if msg.type == WSMsgType.TEXT:
                try:
                    if await self._on_text(msg.data):
                        return
                except _StreamEnds as exc:  # a stream that cannot start: nothing else on it can work
                    await self._error(exc.code, exc.message)
                    self.end_reason = exc.code
                    await self.ws.close(code=CLOSE_TRY_AGAIN_LATER if exc.code == P.AT_CAPACITY else CLOSE_POLICY)
                    return
                except P.ProtocolError as exc:
                    await self._error(exc.code, exc.message)
            elif msg.type == WSMsgType.BINARY:
                await self._error(P.BINARY_NOT_ALLOWED, "Twilio media streams carry JSON text frames only")
            elif msg.type == WSMsgType.ERROR:
                log.info("twilio ws error: %s", self.ws.exception())
                await self._error(P.TOO_LARGE if "size" in str(self.ws.exception()) else P.BAD_MESSAGE, f"Twilio socket error: {self.ws.exception()}")
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    async def _on_text(self, raw: str) -> bool:
        """One Twilio message; True when the stream is over."""
        try:
            m = P.loads_json(raw)
        except ValueError as exc:
            raise P.ProtocolError(P.BAD_JSON, f"Twilio message is not valid JSON: {exc}") from None
        if not isinstance(m, dict) or not isinstance(m.get("event"), str):
            raise P.ProtocolError(P.BAD_MESSAGE, "a Twilio message must be a JSON object with a string 'event'")
        event = m["event"]
        if event == "connected":
            return False
        if event == "start":
            if self.call is not None:
                raise P.ProtocolError(P.BAD_MESSAGE, "Twilio sent a second 'start' on one stream; ignored")
            try:
                await self._on_start(m)
            except P.ProtocolError as exc:
                raise _StreamEnds(exc.code, exc.message) from None
            return False
        if event == "stop":
            self.end_reason = "stop"
            return True
        if self.call is None:
            if event in ("media", "dtmf", "mark"):
                raise P.ProtocolError(P.NO_SESSION, f"Twilio sent {event!r} before 'start'")
            raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown Twilio event {event!r}")
        if event == "media":
            self._on_media(_obj(m, "media"))
        elif event == "dtmf":
            digit = _obj(m, "dtmf").get("digit")
            if not isinstance(digit, str) or len(digit) != 1 or digit not in DTMF_DIGITS:
                raise P.ProtocolError(P.BAD_MESSAGE, f"dtmf: 'digit' must be one of 0-9 * # A-D, got {digit!r}")
            await self.call.notify({"type": "dtmf", "digit": digit.upper()})
        elif event == "mark":
            name = _obj(m, "mark").get("name")
            if not isinstance(name, str):
                raise P.ProtocolError(P.BAD_MESSAGE, "mark: 'name' must be a string")
            outcome = self.leg.on_mark_echo(name)
            if outcome is None:
                raise P.ProtocolError(P.BAD_MESSAGE, f"Twilio echoed mark {name!r}, which was never sent")
            await self.call.notify(outcome)
        else:
            raise P.ProtocolError(P.UNKNOWN_TYPE, f"unknown Twilio event {event!r}")
        return False

    async def _on_start(self, m: dict) -> None:
        start = _obj(m, "start")
        stream_sid = start.get("streamSid") or m.get("streamSid")
        if not isinstance(stream_sid, str) or not stream_sid:
            raise P.ProtocolError(P.BAD_MESSAGE, "start: missing 'streamSid'")
        call_sid = start.get("callSid")
        params = start.get("customParameters") or {}
        if not isinstance(params, dict):
            raise P.ProtocolError(P.BAD_MESSAGE, "start: 'customParameters' must be an object")
        fmt = start.get("mediaFormat") or {}
        if isinstance(fmt, dict) and fmt and (
            fmt.get("encoding") != "audio/x-mulaw" or fmt.get("sampleRate") not in (8000, "8000") or fmt.get("channels", 1) not in (1, "1")
        ):
            raise P.ProtocolError(P.UNSUPPORTED_FORMAT, f"start: mediaFormat {fmt} is not μ-law 8 kHz mono")
        ids = [v for v in (params.get("call_id"), call_sid, stream_sid) if isinstance(v, str) and v]
        leg = TwilioLeg(self.ws, self.request.transport, stream_sid, self.gateway.metrics, self.request.protocol)
        voice, language = params.get("voice"), params.get("language")
        call = self.endpoint.registry.connect_media(
            ids, leg, "twilio", voice if isinstance(voice, str) else None, language if isinstance(language, str) else None
        )
        self.leg, self.call = leg, call
        await call.session.flush_events()

    def _on_media(self, media: dict) -> None:
        track = media.get("track", "inbound")
        if track not in ("inbound", "inbound_track"):
            return  # only the caller's side is ours to hear
        payload = media.get("payload")
        if not isinstance(payload, str):
            raise P.ProtocolError(P.BAD_AUDIO, "media: 'payload' must be a base64 string")
        if len(payload) > MAX_MEDIA_BYTES * 4 // 3 + 4:
            raise P.ProtocolError(P.BAD_AUDIO, f"media: payload longer than {MAX_MEDIA_BYTES} bytes")
        try:
            audio = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise P.ProtocolError(P.BAD_AUDIO, "media: payload is not valid base64") from None
        if not audio:
            raise P.ProtocolError(P.BAD_AUDIO, "media: empty payload")
        timestamp = media.get("timestamp")
        try:
            at = float(timestamp) if timestamp is not None else None
        except (TypeError, ValueError):
            at = None
        if at is not None and not math.isfinite(at):
            at = None  # "nan" and "inf" parse as floats but place nothing on the timeline
        self.call.inbound.push(ulaw_decode(audio), at)

    async def _error(self, code: str, message: str) -> None:
        if self.call is not None and not self.call.session.closed:
            await self.call.report(code, message)  # the session counts it
        else:
            self.gateway.metrics.errors.labels(code=code).inc()
        log.info("twilio stream %s: %s: %s", self.leg.stream_sid if self.leg else "(not started)", code, message)


class _StreamEnds(P.ProtocolError):
    """An error that ends the stream (its `start` was unusable)."""


def _obj(m: dict, key: str) -> dict:
    value = m.get(key)
    if not isinstance(value, dict):
        raise P.ProtocolError(P.BAD_MESSAGE, f"{m.get('event')}: field {key!r} must be an object")
    return value
