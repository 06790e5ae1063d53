"""Asterisk AudioSocket: a TCP server on `telephony.audiosocket_port`, one media leg per connection.

Each message is `type: u8`, `length: u16 big-endian`, `payload`. Asterisk
opens with the call's UUID (0x01, 16 bytes), then sends slin 8 kHz audio
(0x10), DTMF (0x03), errors (0xff) and hangup (0x00). We own the far end's
clock: one 320-byte frame every 20 ms from the shared clock, silence while
idle. What has been written cannot be taken back, so the send queue is kept
short (barge-in latency is at least what is queued).

A peer whose length field lies either stalls mid-payload (the payload
timeout ends the call) or desynchronises the stream (its next "types" are
garbage: a few in a row end the call). Nothing a peer sends can touch
another connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import TYPE_CHECKING

import numpy as np

from audio.playout import PlayoutEvent
from gateway import protocol as P
from gateway.calls import TELEPHONY_PCM, Call, CallRegistry

if TYPE_CHECKING:
    from gateway.server import Gateway

log = logging.getLogger("voxgate.audiosocket")

KIND_HANGUP = 0x00
KIND_UUID = 0x01
KIND_DTMF = 0x03
KIND_SLIN = 0x10  # signed linear 16-bit LE, 8 kHz, mono
KIND_ERROR = 0xFF
SLIN_HIGHER_RATES = range(0x11, 0x19)  # newer Asterisk: slin at 12..192 kHz (not supported here)
ASTERISK_CALLER_HUNG_UP = 0x01  # error code in an 0xff frame

HANDSHAKE_TIMEOUT_S = 5.0
PAYLOAD_TIMEOUT_S = 2.0  # a header promised this payload; it must follow promptly
MAX_BAD_FRAMES_IN_A_ROW = 3  # unknown types back to back: the framing is lost
MAX_SEND_BACKLOG_BYTES = 8 * (3 + 320)  # 160 ms: our share of barge-in latency
DTMF_DIGITS = frozenset(b"0123456789*#ABCDabcd")


def frame(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BH", kind, len(payload)) + payload


HANGUP = frame(KIND_HANGUP)


class AudioSocketLeg:
    """The media leg of one AudioSocket connection."""

    clock_driven = True
    send_idle_silence = True  # Asterisk expects a frame every 20 ms
    output = TELEPHONY_PCM

    def __init__(self, writer: asyncio.StreamWriter, metrics):
        self.writer = writer
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="audiosocket")
        self._header = struct.pack(">BH", KIND_SLIN, TELEPHONY_PCM.frame_bytes)

    def _usable(self) -> bool:
        return not self.writer.is_closing()

    async def send_audio(self, pcm16: bytes) -> None:
        if not self._usable():
            return
        if self.writer.transport.get_write_buffer_size() > MAX_SEND_BACKLOG_BYTES:
            self.metrics.frames_dropped.inc()
            return
        self.writer.write(self._header + pcm16 if len(pcm16) == TELEPHONY_PCM.frame_bytes else frame(KIND_SLIN, pcm16))
        self._frames.inc()

    async def on_flush(self) -> None:
        pass  # written audio cannot be taken back; the backlog cap bounds what still plays

    def on_playout_event(self, event: PlayoutEvent) -> None:
        pass

    async def hangup(self) -> None:
        if self._usable():
            self.writer.write(HANGUP)
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
    def __init__(self, gateway: "Gateway", registry: CallRegistry):
        self.gateway = gateway
        self.registry = registry
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        conn = _Connection(self, reader, writer)
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
                writer.write(HANGUP)
                writer.close()


class _Connection:
    def __init__(self, server: AudioSocketServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.gateway = server.gateway
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
            self.writer.write(HANGUP)
            self.writer.close()

    async def run(self) -> None:
        try:
            kind, payload = await self._read(HANDSHAKE_TIMEOUT_S)
            if kind != KIND_UUID or len(payload) != 16:
                raise _Lost(P.BAD_MESSAGE, f"the first message must be the UUID (type 0x01, 16 bytes), got type 0x{kind:02x} with {len(payload)} bytes")
            if not self.gateway.accepting:
                raise _Lost(P.SHUTTING_DOWN, "the gateway is not accepting calls")
            call_id = str(uuid.UUID(bytes=payload))
            leg = AudioSocketLeg(self.writer, self.gateway.metrics)
            try:
                self.call = self.registry.connect_media([call_id], leg, "audiosocket")
            except P.ProtocolError as exc:
                raise _Lost(exc.code, f"call {call_id}: {exc.message}") from None
            await self.call.session.flush_events()
            idle = self.gateway.config.server.limits.idle_timeout_s
            while True:
                kind, payload = await self._read(idle)
                if await self._on_message(kind, payload):
                    return
        except _Lost as exc:
            self.end_reason = exc.code
            await self.error(exc.code, exc.message)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.end_reason = "disconnected"  # abrupt close, possibly mid-message

    async def _read(self, header_timeout: float) -> tuple[int, bytes]:
        try:
            header = await asyncio.wait_for(self.reader.readexactly(3), header_timeout)
        except asyncio.TimeoutError:
            raise _Lost(P.IDLE_TIMEOUT, f"nothing from Asterisk for {header_timeout:g} s") from None
        kind, length = struct.unpack(">BH", header)
        if not length:
            return kind, b""
        try:
            payload = await asyncio.wait_for(self.reader.readexactly(length), PAYLOAD_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise _Lost(P.BAD_MESSAGE, f"type 0x{kind:02x} promised {length} payload bytes that did not arrive within {PAYLOAD_TIMEOUT_S:g} s") from None
        return kind, payload

    async def _on_message(self, kind: int, payload: bytes) -> bool:
        """One message after the handshake; True when the call is over."""
        known = True
        if kind == KIND_SLIN:
            if len(payload) % 2:
                await self.error(P.BAD_AUDIO, f"slin payload of odd length {len(payload)}; frame dropped")
            elif payload:
                self.call.inbound.push(np.frombuffer(payload, dtype="<i2"))
        elif kind == KIND_HANGUP:
            self.end_reason = "hangup"
            return True
        elif kind == KIND_DTMF:
            if len(payload) != 1 or payload[0] not in DTMF_DIGITS:
                await self.error(P.BAD_MESSAGE, f"DTMF payload must be one digit 0-9 * # A-D, got {payload[:8]!r}")
            else:
                await self.call.notify({"type": "dtmf", "digit": payload.decode("ascii").upper()})
        elif kind == KIND_ERROR:
            code = payload[0] if payload else None
            await self.error(P.MEDIA_ERROR, f"Asterisk reported an error (code {code if code is None else hex(code)})")
            if code == ASTERISK_CALLER_HUNG_UP:
                self.end_reason = "hangup"
                return True
        elif kind in SLIN_HIGHER_RATES:
            if not self._warned_rate:
                self._warned_rate = True
                await self.error(P.UNSUPPORTED_FORMAT, f"audio type 0x{kind:02x} (slin above 8 kHz) is not supported; use slin 8 kHz (0x10)")
        elif kind == KIND_UUID:
            await self.error(P.BAD_MESSAGE, "a second UUID message; ignored")
        else:
            known = False
            self._bad_in_a_row += 1
            if self._bad_in_a_row >= MAX_BAD_FRAMES_IN_A_ROW:
                raise _Lost(P.BAD_MESSAGE, f"{self._bad_in_a_row} unknown message types in a row (last 0x{kind:02x}): the framing is lost")
            await self.error(P.BAD_MESSAGE, f"unknown AudioSocket message type 0x{kind:02x} ({len(payload)} bytes); skipped")
        if known:
            self._bad_in_a_row = 0
        return False

    async def error(self, code: str, message: str) -> None:
        if self.call is not None and not self.call.session.closed:
            await self.call.report(code, message)  # the session counts it
        else:
            self.gateway.metrics.errors.labels(code=code).inc()
        log.info("audiosocket %s %s: %s: %s", self.peer, self.call.call_id if self.call else "(no call)", code, message)
