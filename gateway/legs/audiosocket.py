"""Asterisk AudioSocket: a TCP server on `telephony.audiosocket_port`, one media leg per connection.

The framing is `gateway.wire.audiosocket`. We own the far end's clock: one
320-byte frame every 20 ms from the shared clock, silence while idle. What
has been written cannot be taken back, so the send queue is kept short
(barge-in latency is at least what is queued).

Only peers in `telephony.audiosocket_allow` (IPs/CIDRs; empty = any) may connect, within the per-IP
caps (`server.limits`); others are closed at once, before a byte is read, and counted in
`voxgate_connections_refused_total{reason}`.

A peer whose length field lies either stalls mid-payload (the payload
timeout ends the call) or desynchronises the stream (its next "types" are
garbage: a few in a row end the call). Nothing a peer sends can touch
another connection.
"""

from __future__ import annotations

import asyncio
import logging

from audio.playout import PlayoutEvent
from gateway import protocol as P
from gateway.cluster.forward import accept_tcp_hop, forward_tcp, owner_elsewhere
from gateway.cluster.hop import Hop
from gateway.cluster.plane import ClusterUnavailable
from gateway.core import CallCore
from gateway.core.backpressure import frame_must_skip
from gateway.core.calls import TELEPHONY_PCM, Call
from gateway.legs.host import LegHost
from gateway.security.peers import in_networks, parse_networks
from gateway.wire import audiosocket as wire

log = logging.getLogger("voxgate.audiosocket")

HANDSHAKE_TIMEOUT_S = 5.0
PAYLOAD_TIMEOUT_S = 2.0  # a header promised this payload; it must follow promptly
HOP_FRAME_TIMEOUT_S = 1.0  # a peer outside audiosocket_allow gets this long to show it is a node of the call plane
MAX_BAD_FRAMES_IN_A_ROW = 3  # unknown types back to back: the framing is lost
# Asterisk plays each frame on arrival (no buffer to clear on barge-in), so the socket's own backlog is all that
# still plays after a `clear`: 160 ms, well under the frame cap of the WebSocket legs.
MAX_FRAME_BACKLOG_BYTES = 8 * (wire.HEADER_BYTES + wire.SLIN_FRAME_BYTES)


class AudioSocketLeg:
    """The media leg of one AudioSocket connection."""

    clock_driven = True
    send_idle_silence = True  # Asterisk expects a frame every 20 ms
    absorbs_bursts = False  # Asterisk writes each frame on arrival: a catch-up burst would leave as a burst of RTP
    output = TELEPHONY_PCM

    def __init__(self, writer: asyncio.StreamWriter, metrics):
        self.writer = writer
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="audiosocket")

    def _usable(self) -> bool:
        return not self.writer.is_closing()

    def congested(self) -> bool:
        return self._usable() and frame_must_skip(self.writer.transport, MAX_FRAME_BACKLOG_BYTES)

    async def send_audio(self, pcm16: bytes) -> bool:
        if not self._usable():
            return False
        if frame_must_skip(self.writer.transport, MAX_FRAME_BACKLOG_BYTES):
            self.metrics.frames_dropped.inc()
            return False
        self.writer.write(wire.audio_frame(pcm16))
        self._frames.inc()
        return True

    async def on_flush(self) -> None:
        pass  # written audio cannot be taken back; the backlog cap bounds what still plays

    def on_playout_event(self, event: PlayoutEvent) -> None:
        pass

    async def hangup(self) -> None:
        if self._usable():
            self.writer.write(wire.HANGUP)
            try:
                await asyncio.wait_for(self.writer.drain(), 1.0)
            except (OSError, asyncio.TimeoutError):
                pass
            self.writer.close()


class _Lost(Exception):
    """The connection is unusable (framing lost, payload stalled); the message says why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class AudioSocketServer:
    def __init__(self, core: CallCore):
        self.core = core
        self.registry = core.calls
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self.port: int | None = None
        self.host: str | None = None
        self.allow = parse_networks(core.config.telephony.audiosocket_allow)

    async def start(self, host: str, port: int, reuse_port: bool = False) -> int:
        self._server = await asyncio.start_server(self._handle, host, port, reuse_port=reuse_port or None)
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("AudioSocket server listening on %s:%d", host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    def _refusal(self, address: str | None) -> str | None:
        """Why a new connection from `address` is closed at once, or None (then it counts against its address)."""
        if self.allow and not in_networks(address, self.allow):
            return "audiosocket_allow"
        return self.core.peers.open(address)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer else None
        refused = self._refusal(address)
        if refused is not None:
            # a node of the call plane forwarding a leg (its signed hop frame comes first) was checked where it landed
            hop = await self._hop_frame(reader, address) if self.core.cluster is not None else None
            if hop is None:
                self.core.metrics.connections_refused.labels(reason=refused).inc()
                log.info("audiosocket: refused %s (%s)", address, refused)
                writer.transport.abort()  # no hangup frame: nothing is said to a peer we do not serve
                return
            await self._serve(reader, writer, hop=hop)
            return
        counted = True

        def uncount() -> None:  # a forwarded leg counts where it landed, not here
            nonlocal counted
            if counted:
                counted = False
                self.core.peers.close(address)

        try:
            await self._serve(reader, writer, on_hop=uncount)
        finally:
            uncount()

    async def _hop_frame(self, reader: asyncio.StreamReader, address: str | None) -> Hop | None:
        try:
            kind, payload = await _read_frame(reader, HOP_FRAME_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, P.ProtocolError):
            return None
        return await accept_tcp_hop(self.core, payload, address) if kind == wire.KIND_VOXGATE_HOP else None

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hop: Hop | None = None, on_hop=None
    ) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        conn = _Connection(self, reader, writer, hop, on_hop)
        self.registry.track(conn.hangup)
        try:
            await conn.run()
        except asyncio.CancelledError:
            conn.end_reason = "shutdown"
        except Exception:
            log.exception("audiosocket connection failed")
            await conn.error(P.INTERNAL, "internal error in the AudioSocket leg; the call was ended")
        finally:
            self._connections.discard(task)
            if conn.call is not None:
                await self.registry.end_media(conn.call, conn.end_reason)
            if not writer.is_closing():
                writer.write(wire.HANGUP)
                writer.close()


class _Connection:
    def __init__(
        self,
        server: AudioSocketServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        hop: Hop | None = None,
        on_hop=None,
    ):
        self.hop = hop  # the hop of the node that forwarded this connection (then served here, never forwarded again)
        self.on_hop = on_hop
        self.core = server.core
        self.registry = server.registry
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.call: Call | None = None
        self.end_reason = "disconnected"
        self._bad_in_a_row = 0
        self._warned_rate = False

    async def hangup(self) -> None:
        """Shutdown: hang up this connection (its reader then sees EOF)."""
        if not self.writer.is_closing():
            self.writer.write(wire.HANGUP)
            self.writer.close()

    async def run(self) -> None:
        try:
            kind, payload = await self._read(HANDSHAKE_TIMEOUT_S)
            if kind == wire.KIND_VOXGATE_HOP and self.core.cluster is not None and self.hop is None:
                peer = self.peer[0] if isinstance(self.peer, tuple) and self.peer else None
                self.hop = await accept_tcp_hop(
                    self.core, payload, peer
                )  # a node of the plane forwards a leg it checked
                if self.hop is None:
                    raise _Lost(P.UNAUTHORIZED, "a hop frame that does not verify")
                if self.on_hop is not None:
                    self.on_hop()
                kind, payload = await self._read(HANDSHAKE_TIMEOUT_S)
            try:
                call_id = wire.call_uuid(kind, payload)
            except P.ProtocolError as exc:
                raise _Lost(exc.code, exc.message) from None
            if self.hop is not None and self.hop.call_id != call_id:  # a hop opens the one call it was signed for
                log.warning(
                    "cluster: refused an AudioSocket leg forwarded by node %s: its hop was signed for call %s, "
                    "the leg names %s",
                    self.hop.node,
                    self.hop.call_id,
                    call_id,
                )
                raise _Lost(P.UNAUTHORIZED, "the hop frame was signed for another call")
            if (
                self.core.cluster is not None
                and self.hop is None
                and await self._forwarded(call_id, wire.frame(kind, payload))
            ):
                return
            if not self.core.accepting:
                raise _Lost(P.SHUTTING_DOWN, "the gateway is not accepting calls")
            leg = AudioSocketLeg(self.writer, self.core.metrics)
            try:
                self.call = self.registry.connect_media([call_id], leg, "audiosocket")
            except P.ProtocolError as exc:
                raise _Lost(exc.code, f"call {call_id}: {exc.message}") from None
            await self.call.session.flush_events()
            idle = self.core.config.server.limits.idle_timeout_s
            while True:
                kind, payload = await self._read(idle)
                if await self._on_message(kind, payload):
                    return
        except _Lost as exc:
            self.end_reason = exc.code
            await self.error(exc.code, exc.message)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.end_reason = "disconnected"  # abrupt close, possibly mid-message

    async def _forwarded(self, call_id: str, handshake: bytes) -> bool:
        """Another node owns the call: splice this connection to it (True), else serve it here."""
        try:
            owner = await owner_elsewhere(self.core, None, [call_id])
            if owner is None:
                return False
            done = await forward_tcp(
                self.core, owner, [call_id], handshake, self.reader, self.writer, wire.KIND_VOXGATE_HOP
            )
        except ClusterUnavailable as exc:
            raise _Lost(P.CLUSTER_UNAVAILABLE, f"call {call_id}: the call plane is unavailable ({exc})") from None
        if done:
            self.end_reason = "forwarded"
        return done

    async def _read(self, header_timeout: float) -> tuple[int, bytes]:
        try:
            header = await asyncio.wait_for(self.reader.readexactly(wire.HEADER_BYTES), header_timeout)
        except asyncio.TimeoutError:
            raise _Lost(P.IDLE_TIMEOUT, f"nothing from Asterisk for {header_timeout:g} s") from None
        kind, length = wire.parse_header(header)
        if not length:
            return kind, b""
        try:
            payload = await asyncio.wait_for(self.reader.readexactly(length), PAYLOAD_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise _Lost(
                P.BAD_MESSAGE,
                f"type 0x{kind:02x} promised {length} payload bytes that did not arrive within {PAYLOAD_TIMEOUT_S:g} s",
            ) from None
        return kind, payload

    async def _on_message(self, kind: int, payload: bytes) -> bool:
        """One message after the handshake; True when the call is over."""
        try:
            msg = wire.decode(kind, payload)
        except P.ProtocolError as exc:
            self._bad_in_a_row = 0  # a known type with a bad payload: the framing holds
            await self.error(exc.code, exc.message)
            return False
        if isinstance(msg, wire.Unknown):
            self._bad_in_a_row += 1
            if self._bad_in_a_row >= MAX_BAD_FRAMES_IN_A_ROW:
                raise _Lost(
                    P.BAD_MESSAGE,
                    f"{self._bad_in_a_row} unknown message types in a row (last 0x{kind:02x}): the framing is lost",
                )
            await self.error(
                P.BAD_MESSAGE, f"unknown AudioSocket message type 0x{kind:02x} ({msg.length} bytes); skipped"
            )
            return False
        self._bad_in_a_row = 0
        if isinstance(msg, wire.Audio):
            self.call.inbound.push(msg.pcm)
        elif isinstance(msg, wire.Hangup):
            self.end_reason = "hangup"
            return True
        elif isinstance(msg, wire.Dtmf):
            await self.call.notify({"type": "dtmf", "digit": msg.digit})
        elif isinstance(msg, wire.FarEndError):
            await self.error(
                P.MEDIA_ERROR, f"Asterisk reported an error (code {msg.code if msg.code is None else hex(msg.code)})"
            )
            if msg.caller_hung_up:
                self.end_reason = "hangup"
                return True
        elif isinstance(msg, wire.HigherRateAudio):
            if not self._warned_rate:
                self._warned_rate = True
                await self.error(
                    P.UNSUPPORTED_FORMAT,
                    f"audio type 0x{kind:02x} (slin above 8 kHz) is not supported; use slin 8 kHz (0x10)",
                )
        elif isinstance(msg, wire.SecondUuid):
            await self.error(P.BAD_MESSAGE, "a second UUID message; ignored")
        return False

    async def error(self, code: str, message: str) -> None:
        if self.call is not None and not self.call.session.closed:
            await self.call.report(code, message)  # the session counts it
        else:
            self.core.metrics.errors.labels(code=code).inc()
        log.info("audiosocket %s %s: %s: %s", self.peer, self.call.call_id if self.call else "(no call)", code, message)


async def _read_frame(reader: asyncio.StreamReader, timeout: float) -> tuple[int, bytes]:
    kind, length = wire.parse_header(await asyncio.wait_for(reader.readexactly(wire.HEADER_BYTES), timeout))
    return kind, (await asyncio.wait_for(reader.readexactly(length), PAYLOAD_TIMEOUT_S) if length else b"")


def install(core: CallCore, host: LegHost) -> AudioSocketServer | None:
    """The AudioSocket TCP server, when `telephony.audiosocket_port` is set (it is not HTTP: its own port)."""
    tel = core.config.telephony
    if tel.audiosocket_port is None:
        return None
    server = AudioSocketServer(core)

    async def start() -> None:
        # `serve --workers`: every worker listens on the one AudioSocket port (SO_REUSEPORT)
        await server.start(
            tel.audiosocket_host or core.config.server.host, tel.audiosocket_port, getattr(host, "reuse_port", False)
        )

    host.on_start(start)
    host.on_stop(server.stop)
    return server
