"""WebRTC media leg and data-channel text leg with aiortc (docs/webrtc.md, docs/protocol.md).

Signalling is one HTTP exchange: `POST /v1/webrtc/offer {sdp, type}` →
`{sdp, type, session_id}`; the browser gathers ICE fully before it posts.
The outbound audio track's `recv()` pulls one 20 ms frame from the session's
Playout per call and paces itself on an absolute schedule: it is the
session's one ticker (the shared gateway clock never ticks WebRTC sessions).
The playout runs at the codec's rate (48 kHz for Opus, 8 kHz for PCMU/PCMA)
so aiortc's encoders only change the channel layout.

The first data channel the client opens carries the native protocol's JSON
messages; `session.start` on it is optional (voice, language) and creates
the session, as does any first message.

TURN: with `webrtc.turn_urls` and `webrtc.turn_secret_env`, each `GET /v1/webrtc/config` and each offer
gets credentials minted from the shared secret (coturn's REST scheme, `gateway/security/turn.py`), so no
long-lived TURN password reaches a page. Static `turn:user:pass@host` entries in `ice_servers` still work.

When the gateway listens on a loopback address its clients are local, so
127.0.0.1 is made a host ICE candidate (aioice leaves it out; a namespace
with only `lo` would otherwise have no candidate at all).
"""

from __future__ import annotations

import asyncio
import fractions
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Callable

import aioice.ice
import numpy as np
from aiohttp import web
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.sdp import SessionDescription
from av import AudioFrame

from audio.encode import OutputFormat
from audio.resample import StreamResampler
from gateway import protocol as P
from gateway.core import CallCore, Session
from gateway.core.caller_voice import session_settings
from gateway.core.inbound import InboundAudio
from gateway.cluster.plane import ClusterUnavailable
from gateway.http.static_files import StaticFiles
from gateway.legs.accept import UNAUTHORIZED_MESSAGE, admit, authorized
from gateway.legs.host import LegHost
from gateway.security.turn import turn_credentials

log = logging.getLogger("voxgate.webrtc")

STATIC_DIR = Path(__file__).parent.parent / "static"
CONNECT_TIMEOUT_S = 30.0  # an offer whose peer never connects is dropped
STATS_INTERVAL_S = 0.25  # `playout.stats` events for the demo page's buffer meter
MAX_OFFER_BYTES = 64 * 1024
MAX_CHANNEL_BACKLOG_BYTES = 1 << 20  # events queued for a peer that does not take them (SCTP unacknowledged)
CODEC_RATES = {"opus": 48000, "pcmu": 8000, "pcma": 8000}
INBOUND_RATE = 16000  # the caller's microphone, as every leg hands it to the core


# ---------------------------------------------------------------- ICE
def include_loopback_candidates() -> None:
    """Make 127.0.0.1 a host candidate of every peer connection in this process (idempotent)."""
    original = aioice.ice.get_host_addresses
    if getattr(original, "voxgate_loopback", False):
        return

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        addresses = original(use_ipv4=use_ipv4, use_ipv6=use_ipv6)
        return (["127.0.0.1"] if use_ipv4 and "127.0.0.1" not in addresses else []) + addresses

    get_host_addresses.voxgate_loopback = True  # type: ignore[attr-defined]
    aioice.ice.get_host_addresses = get_host_addresses


def ice_servers(urls: list[str]) -> list[RTCIceServer]:
    """`stun:host:port`, `turn:host:port` or `turn:user:password@host:port` → RTCIceServer."""
    servers = []
    for url in urls:
        scheme, _, rest = url.partition(":")
        if scheme in ("turn", "turns") and "@" in rest:
            creds, _, host = rest.rpartition("@")
            user, _, password = creds.partition(":")
            servers.append(RTCIceServer(urls=f"{scheme}:{host}", username=user, credential=password))
        else:
            servers.append(RTCIceServer(urls=url))
    return servers


# ---------------------------------------------------------------- media
class PlayoutTrack(MediaStreamTrack):
    """Outbound audio: each `recv()` is one playout tick, paced against an absolute schedule.

    After a stall it catches up (up to `max_catchup` frames back to back, which
    the far end's jitter buffer absorbs); a longer stall restarts the schedule.
    """

    kind = "audio"

    def __init__(self, sample_rate: int, frame_ms: int = 20, max_catchup: int = 10):
        super().__init__()
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * frame_ms // 1000
        self.period = frame_ms / 1000.0
        self.max_catchup = max_catchup
        self.time_base = fractions.Fraction(1, sample_rate)
        self.source: Callable[[], tuple[np.ndarray, str]] | None = None  # Session.pull_frame
        self._start: float | None = None
        self._n = 0
        self._pts = 0
        self._scaled = np.zeros(self.frame_samples, dtype=np.float32)
        self._int16 = np.zeros(self.frame_samples, dtype=np.int16)
        self.frames = 0
        self.restarts = 0
        self.on_frame: Callable[[], None] | None = None  # e.g. a frames-sent counter
        self.on_stall: Callable[[int], None] | None = None  # Session.stalled: frames skipped by a schedule restart

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self._n * self.period
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > self.max_catchup * self.period:
            missed = int((now - due) / self.period)
            self._start, self._n = now, 0  # too far behind: drop the backlog
            self.restarts += 1
            if self.on_stall is not None:
                self.on_stall(missed)  # those frames were silence at the caller: the session reports the gap
        self._n += 1
        source = self.source
        if source is None:
            self._int16.fill(0)
        else:
            pcm, _kind = source()
            np.multiply(pcm, 32767.0, out=self._scaled)
            np.clip(self._scaled, -32767.0, 32767.0, out=self._scaled)
            self._int16[:] = self._scaled
        frame = AudioFrame(format="s16", layout="mono", samples=self.frame_samples)
        frame.planes[0].update(self._int16.tobytes())
        frame.pts = self._pts
        frame.sample_rate = self.sample_rate
        frame.time_base = self.time_base
        self._pts += self.frame_samples
        self.frames += 1
        if self.on_frame is not None:
            self.on_frame()
        return frame


# ---------------------------------------------------------------- one call
class WebrtcCall:
    """One peer connection: the session's media leg (the track) and text leg (the data channel)."""

    clock_driven = False
    send_idle_silence = True

    def __init__(
        self, transport: "WebrtcTransport", pc: RTCPeerConnection, track: PlayoutTrack, output: OutputFormat, codec: str
    ):
        self.transport = transport
        self.core = transport.core
        self.pc = pc
        self.track = track
        self.output = output
        self.codec = codec
        self.session_id = uuid.uuid4().hex[:16]
        self.session: Session | None = None
        self.channel = None
        self.closed = False
        self._tasks: list[asyncio.Task] = []
        self._idle_timer: asyncio.TimerHandle | None = None
        self.inbound: InboundAudio | None = None  # the caller's microphone track, decoded (when the offer sends one)

    # -- the caller's microphone
    def consume(self, track) -> None:
        """Read the peer's audio track for the whole call: mono 16 kHz int16 into `self.inbound`."""
        if track.kind != "audio" or self.inbound is not None:
            return
        self.inbound = InboundAudio(INBOUND_RATE)
        self._spawn(self._read_mic(track, self.inbound))

    async def _read_mic(self, track, inbound: InboundAudio) -> None:
        resampler: StreamResampler | None = None
        try:
            while True:
                frame = await track.recv()
                pcm = frame.to_ndarray().reshape(-1).astype(np.float32) / 32768.0
                channels = len(frame.layout.channels)
                if channels > 1:  # interleaved s16: average to mono
                    pcm = pcm.reshape(-1, channels).mean(axis=1)
                if resampler is None or resampler.in_rate != frame.sample_rate:
                    resampler = StreamResampler(frame.sample_rate, INBOUND_RATE)
                out = resampler.process(pcm)
                if len(out):
                    inbound.push(np.clip(out * 32768.0, -32768, 32767).astype(np.int16))
        except MediaStreamError:
            pass  # the peer's track ended
        finally:
            inbound.close()

    def arm_idle_timer(self) -> None:
        """(Re)starts the idle timeout: a peer that sends nothing for limits.idle_timeout_s is dropped, as on /v1/ws
        (a connected peer that never opens its data channel would otherwise hold a session slot for good)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if not self.closed:
            timeout = self.core.config.server.limits.idle_timeout_s
            self._idle_timer = asyncio.get_running_loop().call_later(timeout, self._on_idle, timeout)

    def _on_idle(self, timeout: float) -> None:
        if self.closed:
            return
        if self.session is not None and not self.session.closed:
            self._spawn(
                self.session.close(P.error_event(P.IDLE_TIMEOUT, f"no message for {timeout:g} s"))
            )  # _watch then closes the call
        else:
            self.core.metrics.errors.labels(code=P.IDLE_TIMEOUT).inc()
            self._spawn(self.close())

    # -- MediaLeg (audio is pulled by the track; nothing is pushed)
    async def send_audio(self, frame: bytes) -> bool:
        return True

    async def on_flush(self) -> None:
        pass  # frames leave as they are pulled: nothing is buffered on our side of the wire

    def on_playout_event(self, event) -> None:
        pass

    # -- TextLeg
    async def send_event(self, event: dict) -> None:
        channel = self.channel
        if channel is not None and channel.readyState == "open":
            if channel.bufferedAmount > MAX_CHANNEL_BACKLOG_BYTES:  # aiortc queues without bound: drop the peer instead
                if not self.closed:
                    log.warning(
                        "webrtc call %s: %d bytes of events unacknowledged; closing",
                        self.session_id,
                        channel.bufferedAmount,
                    )
                    self._spawn(self.close())
                return
            channel.send(P.dump_event(event))

    # -- data channel input
    def on_datachannel(self, channel) -> None:
        if self.channel is not None:
            return  # the first channel is the protocol's; others are ignored
        self.channel = channel
        inbox: asyncio.Queue = asyncio.Queue()
        channel.on("message", inbox.put_nowait)
        self._spawn(self._read(inbox))

    async def _read(self, inbox: asyncio.Queue) -> None:
        """One reader, so messages are handled strictly in the order they came."""
        while True:
            await self._on_message(await inbox.get())

    async def _on_message(self, data) -> None:
        limits = self.core.config.server.limits
        self.arm_idle_timer()
        try:
            if isinstance(data, bytes):
                raise P.ProtocolError(P.BINARY_NOT_ALLOWED, "binary messages are not accepted on the data channel")
            msg = P.parse_message(data, limits.max_message_bytes)
            if msg["type"] == "session.start":
                if self.session is not None:
                    raise P.ProtocolError(P.SESSION_EXISTS, "this call already has a session")
                await self._start_session(msg)
                return
            if self.session is None:
                await self._start_session({})
            if msg["type"] == "user.text":
                await self.core.handle_user_text(self.session, msg["text"])
            else:
                await self.session.handle(msg)
        except P.ProtocolError as exc:
            self.core.metrics.errors.labels(code=exc.code).inc()
            await self.send_event(exc.event())
        except Exception:
            log.exception("webrtc call %s: message failed", self.session_id)
            await self.send_event(P.error_event(P.INTERNAL, "internal error handling the message"))
        if self.session is not None:
            await self.session.flush_events()

    async def _start_session(self, msg: dict) -> None:
        if "output" in msg and msg["output"]:
            log.info("webrtc call %s: output %r ignored; the codec is %s", self.session_id, msg["output"], self.codec)
        language = msg.get("language") or "auto"
        barge_in = session_settings(self.core.config.barge_in, msg.get("barge_in"))
        mode = P.check_mode(msg.get("mode"))
        session = self.core.new_session(
            "webrtc", msg.get("voice"), language, msg.get("instruct"), self.output, session_id=self.session_id
        )
        session.set_mode(mode)
        session.word_timings = bool(msg.get("word_timings"))
        self.session = session
        session.attach_text(self)
        session.attach_media(self)
        if self.inbound is not None:  # the page sends its microphone: the caller's voice is heard next to the playout
            session.inbound = self.inbound
            self.core.voice.attach(session, self.inbound, barge_in)
        self.track.source = session.pull_frame
        self.track.on_frame = self.core.metrics.frames_sent.labels(leg="webrtc").inc
        self.track.on_stall = session.stalled
        self.core.play(session)  # the track pulls frames; this arms the max-call timer
        session.emit(
            {
                "type": "session.started",
                "session_id": session.session_id,
                "voice": session.voice_name,
                "language": language,
                "output": {
                    "encoding": self.codec,
                    "sample_rate": self.output.sample_rate,
                    "frame_ms": self.output.frame_ms,
                },
                "input": {
                    "microphone": self.inbound is not None,
                    "barge_in": barge_in.mode if session.caller_voice is not None else "off",
                },
                "mode": session.mode,  # as the native leg echoes it (sentence | turn, with why when turn was refused)
                **({"mode_note": session.mode_note} if session.mode_note else {}),
                **({"word_timings": True} if session.word_timings else {}),
            }
        )
        await session.flush_events()
        self._spawn(self._watch(session))

    async def _watch(self, session: Session) -> None:
        """Playout stats for the page while the session lives; the call ends with the session."""
        while not session.closed:
            await self.send_event(
                {
                    "type": "playout.stats",
                    "buffered_ms": round(session.playout.buffered_ms, 1),
                    "turn_id": session.playout.current_turn,
                }
            )
            try:
                await asyncio.wait_for(session.wait_closed(), STATS_INTERVAL_S)
            except asyncio.TimeoutError:
                pass
        await self.close()

    async def watch_connection(self) -> None:
        """Drop a peer that never connects."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while self.pc.connectionState not in ("connected", "closed", "failed") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if self.pc.connectionState != "connected":
            log.info("webrtc call %s: peer did not connect (%s)", self.session_id, self.pc.connectionState)
            await self.close()

    def on_connection_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self._spawn(self.close())

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self.transport.calls.discard(self)
        self.track.source = None
        if self.session is not None and not self.session.closed:
            await self.session.close()
        self.track.stop()
        await self.pc.close()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()


# ---------------------------------------------------------------- signalling
class WebrtcTransport:
    def __init__(self, core: CallCore):
        self.core = core
        self.ice = ice_servers(core.config.webrtc.ice_servers)
        rtc = core.config.webrtc
        self.turn_secret: str | None = None
        if rtc.turn_urls:
            self.turn_secret = os.environ.get(rtc.turn_secret_env or "")
            if not self.turn_secret:
                raise ValueError(
                    f"webrtc.turn_secret_env names {rtc.turn_secret_env!r}, but that environment variable is empty or unset"
                )
        self.turn_ttl_s = rtc.turn_ttl_s or core.config.server.limits.max_call_s + 300.0  # outlives the longest call
        self.calls: set[WebrtcCall] = set()
        self._answering = 0  # offers past the capacity check whose answer is still being made

    def routes(self) -> list:
        return [
            web.post("/v1/webrtc/offer", self.offer),
            web.get("/v1/webrtc/config", self.client_config),
            web.get("/", self.index),
            StaticFiles(STATIC_DIR).route("/static"),  # by exact name: the path never reaches the file system
        ]

    def minted_turn(self) -> dict | None:
        """One set of TURN credentials for one peer: {"urls", "username", "credential"} (None without TURN)."""
        if self.turn_secret is None:
            return None
        username, password = turn_credentials(self.turn_secret, self.turn_ttl_s)
        return {"urls": list(self.core.config.webrtc.turn_urls), "username": username, "credential": password}

    def _rtc_configuration(self) -> RTCConfiguration:
        turn = self.minted_turn()
        extra = (
            [RTCIceServer(urls=turn["urls"], username=turn["username"], credential=turn["credential"])] if turn else []
        )
        return RTCConfiguration(iceServers=self.ice + extra)

    async def index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def client_config(self, request: web.Request) -> web.Response:
        if not authorized(self.core, request):  # ICE servers may carry TURN credentials
            return _error(401, P.UNAUTHORIZED, UNAUTHORIZED_MESSAGE)
        cfg = self.core.config
        turn = self.minted_turn()
        servers = list(cfg.webrtc.ice_servers) + ([turn] if turn else [])
        # stt tells the page whether the caller's speech reaches the agent (off: it can only interrupt)
        return web.json_response(
            {"ice_servers": servers, "agent": cfg.llm.kind, "engine": self.core.engine_kind, "stt": cfg.stt.kind},
            headers={"Cache-Control": "no-store"},
        )

    async def offer(self, request: web.Request) -> web.Response:
        gw = self.core
        try:
            problem = await admit(gw, request)
        except ClusterUnavailable as exc:
            return _error(503, P.CLUSTER_UNAVAILABLE, f"the call plane is unavailable ({exc}); try again shortly")
        if problem is not None:
            return _error(401, P.UNAUTHORIZED, problem)
        if not gw.accepting or gw.draining:  # a draining node of a cluster finishes its calls, starts none
            return _error(503, P.SHUTTING_DOWN, "the gateway is not accepting calls")
        if request.content_length and request.content_length > MAX_OFFER_BYTES:
            return _error(413, P.TOO_LARGE, f"an offer may be at most {MAX_OFFER_BYTES} bytes")
        try:
            body = P.loads_json(await request.read())
        except ValueError:
            return _error(400, P.BAD_JSON, 'the offer must be JSON: {"sdp": "…", "type": "offer"}')
        if not isinstance(body, dict) or not isinstance(body.get("sdp"), str) or body.get("type") != "offer":
            return _error(400, P.BAD_MESSAGE, "the offer needs string 'sdp' and 'type': 'offer'")
        if "m=audio" not in body["sdp"]:
            return _error(
                400, P.BAD_MESSAGE, "the offer needs an audio m-line (addTransceiver('audio', {direction: 'recvonly'}))"
            )

        # No await between this check and taking the slot: concurrent offers cannot all pass it.
        waiting = self._answering + sum(1 for call in self.calls if call.session is None)  # answered, no session yet
        if gw.registry.full(waiting):
            error = gw.registry.capacity_error()
            gw.metrics.errors.labels(code=error.code).inc()
            return _error(503, error.code, error.message)
        pc = RTCPeerConnection(self._rtc_configuration())
        remote_tracks: list = []
        pc.on("track", remote_tracks.append)  # fires inside setRemoteDescription for a sendrecv offer
        self._answering += 1  # holds a slot across the awaits below, so concurrent offers see it
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type="offer"))
            codec = _offered_audio_codec(pc)
            if codec is None:
                raise ValueError("no common audio codec (voxgate sends Opus, PCMU or PCMA)")
            output = OutputFormat("pcm16", CODEC_RATES[codec])
            track = PlayoutTrack(output.sample_rate, output.frame_ms)
            pc.addTrack(track)
            await pc.setLocalDescription(await pc.createAnswer())
        except Exception as exc:  # aiortc raises ValueError and friends for SDP it cannot use
            try:
                await pc.close()
            except Exception:  # a peer connection left half-built by the bad SDP may fail to close too
                log.debug("closing a refused peer connection failed", exc_info=True)
            return _error(400, P.BAD_MESSAGE, f"cannot answer this offer: {exc}")
        finally:
            self._answering -= 1
        call = WebrtcCall(self, pc, track, output, codec)
        self.calls.add(call)
        for remote in remote_tracks:
            call.consume(remote)
        pc.on("track", call.consume)
        pc.on("datachannel", call.on_datachannel)
        pc.on("connectionstatechange", call.on_connection_state)
        call._spawn(call.watch_connection())
        call.arm_idle_timer()
        local = pc.localDescription
        return web.json_response({"sdp": local.sdp, "type": local.type, "session_id": call.session_id})

    async def close(self) -> None:
        for call in list(self.calls):
            await call.close()


def _offered_audio_codec(pc: RTCPeerConnection) -> str | None:
    """The codec the answer will use: the first of the offer's audio codecs that aiortc can send."""
    remote = SessionDescription.parse(pc.remoteDescription.sdp)
    for media in remote.media:
        if media.kind != "audio":
            continue
        for codec in media.rtp.codecs:
            name = codec.mimeType.split("/")[-1].lower()
            if name in CODEC_RATES:
                return name
    return None


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(P.error_event(code, message), status=status)


def install(core: CallCore, host: LegHost) -> WebrtcTransport:
    """The WebRTC routes and the demo page (before the gateway starts)."""
    transport = WebrtcTransport(core)
    host.add_routes(transport.routes())
    host.on_stop(transport.close)
    if core.config.server.host in ("127.0.0.1", "localhost", "::1"):
        include_loopback_candidates()
    return transport
