"""Far-end clients written from the wire specs: Twilio Media Streams, Asterisk AudioSocket, and the agent's control socket."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
import uuid

import numpy as np
import websockets

from audio.g711 import ulaw_encode
from gateway.app import Gateway


def ws_url(gw: Gateway, path: str) -> str:
    return f"ws://127.0.0.1:{gw.port}{path}"


# ---------------------------------------------------------------- control channel
class Control:
    """The agent side: /v1/control."""

    def __init__(self, ws):
        self.ws = ws
        self.events: list[dict] = []  # everything received, in order
        self.times: list[float] = []  # when each of `events` arrived
        self._unread: list[dict] = []  # received but not yet returned by `expect`

    @classmethod
    async def connect(cls, gw: Gateway, **kw) -> "Control":
        return cls(await websockets.connect(ws_url(gw, "/v1/control"), **kw))

    async def send(self, msg: dict | str) -> None:
        await self.ws.send(msg if isinstance(msg, str) else json.dumps(msg))

    async def attach(self, call_id: str, **fields) -> dict:
        await self.send({"type": "call.attach", "call_id": call_id, **fields})
        return await self.expect("call.attached")

    async def recv(self, timeout: float = 5.0) -> dict:
        event = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(event)
        self.times.append(time.monotonic())
        self._unread.append(event)
        return event

    async def expect(self, etype: str, timeout: float = 5.0, **match) -> dict:
        """The first not yet expected event of this type (and fields), waiting for it if need be."""

        def matches(event: dict) -> bool:
            return event["type"] == etype and all(event.get(k) == v for k, v in match.items())

        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._unread):
                if matches(event):
                    del self._unread[i]
                    return event
            await self.recv(max(0.01, deadline - time.monotonic()))

    async def expect_closed(self, timeout: float = 5.0) -> list[dict]:
        """Reads to the end of the socket; returns what came."""
        rest = []
        try:
            while True:
                rest.append(await self.recv(timeout))
        except websockets.ConnectionClosed:
            return rest

    async def close(self) -> None:
        await self.ws.close()


# ---------------------------------------------------------------- Twilio
def tone_ulaw(ms: int = 20, freq: float = 440.0) -> bytes:
    n = 8 * ms
    t = np.arange(n) / 8000.0
    return ulaw_encode((np.sin(2 * np.pi * freq * t) * 8000).astype(np.int16))


class TwilioClient:
    """Behaves like Twilio's side of a bidirectional Media Stream."""

    def __init__(self, ws, stream_sid: str, call_sid: str):
        self.ws = ws
        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.seq = 0
        self.chunk = 0
        self._inbox: asyncio.Queue | None = None  # set while echo_marks runs: it reads the socket, recv() reads this
        self._echo_tasks: set[asyncio.Task] = set()
        self.marks_received: list[tuple[str, float]] = []  # (name, arrival) while echo_marks runs
        self.marks_echoed: list[tuple[str, float]] = []
        self.clear_at: float | None = None

    @classmethod
    async def connect(
        cls, gw: Gateway, stream_sid: str = "MZ0001", call_sid: str = "CA0001", headers=None
    ) -> "TwilioClient":
        ws = await websockets.connect(ws_url(gw, "/v1/twilio"), additional_headers=headers, compression=None)
        return cls(ws, stream_sid, call_sid)

    async def send(self, msg: dict | str | bytes) -> None:
        await self.ws.send(msg if isinstance(msg, (str, bytes)) else json.dumps(msg))

    def _seq(self) -> str:
        self.seq += 1
        return str(self.seq)

    async def start(self, params: dict | None = None, media_format: dict | None = None) -> None:
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.send(
            {
                "event": "start",
                "sequenceNumber": self._seq(),
                "streamSid": self.stream_sid,
                "start": {
                    "accountSid": "AC0001",
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "customParameters": params or {},
                    "mediaFormat": media_format or {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                },
            }
        )

    async def media(self, payload: bytes, timestamp_ms: int | None = None) -> None:
        self.chunk += 1
        ts = (self.chunk - 1) * 20 if timestamp_ms is None else timestamp_ms
        await self.send(
            {
                "event": "media",
                "sequenceNumber": self._seq(),
                "streamSid": self.stream_sid,
                "media": {
                    "track": "inbound",
                    "chunk": str(self.chunk),
                    "timestamp": str(ts),
                    "payload": base64.b64encode(payload).decode(),
                },
            }
        )

    async def dtmf(self, digit: str) -> None:
        await self.send(
            {
                "event": "dtmf",
                "streamSid": self.stream_sid,
                "sequenceNumber": self._seq(),
                "dtmf": {"track": "inbound_track", "digit": digit},
            }
        )

    async def echo_mark(self, name: str) -> None:
        await self.send(
            {"event": "mark", "sequenceNumber": self._seq(), "streamSid": self.stream_sid, "mark": {"name": name}}
        )

    async def stop(self) -> None:
        await self.send(
            {
                "event": "stop",
                "sequenceNumber": self._seq(),
                "streamSid": self.stream_sid,
                "stop": {"accountSid": "AC0001", "callSid": self.call_sid},
            }
        )

    async def recv(self, timeout: float = 5.0) -> tuple[dict, float]:
        if self._inbox is not None:
            return await asyncio.wait_for(self._inbox.get(), timeout)
        msg = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        return msg, time.monotonic()

    def echo_marks(self, delay_s: float) -> None:
        """Play like Twilio: echo each mark `delay_s` after it arrives (the audio before it has played by then);
        after a `clear`, echo the marks still pending at once (as Twilio does)."""
        self._inbox = asyncio.Queue()
        pending: dict[str, asyncio.Task] = {}

        async def echo(name: str, wait: float) -> None:
            await asyncio.sleep(wait)
            pending.pop(name, None)
            self.marks_echoed.append((name, time.monotonic()))
            await self.echo_mark(name)

        async def read() -> None:
            async for raw in self.ws:
                msg, now = json.loads(raw), time.monotonic()
                if msg["event"] == "mark":
                    name = msg["mark"]["name"]
                    self.marks_received.append((name, now))
                    pending[name] = asyncio.get_running_loop().create_task(echo(name, delay_s))
                elif msg["event"] == "clear":
                    self.clear_at = now
                    for name, task in list(pending.items()):
                        task.cancel()
                        pending[name] = asyncio.get_running_loop().create_task(echo(name, 0.0))
                self._inbox.put_nowait((msg, now))

        task = asyncio.get_running_loop().create_task(read())
        self._echo_tasks.add(task)


# ---------------------------------------------------------------- AudioSocket
class AudioSocketClient:
    """Behaves like Asterisk's AudioSocket() application over TCP."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, call_uuid: uuid.UUID):
        self.reader = reader
        self.writer = writer
        self.uuid = call_uuid

    @classmethod
    async def connect(
        cls, gw: Gateway, call_uuid: uuid.UUID | None = None, handshake: bool = True
    ) -> "AudioSocketClient":
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.audiosocket.port)
        client = cls(reader, writer, call_uuid or uuid.uuid4())
        if handshake:
            client.send(0x01, client.uuid.bytes)
        return client

    def send(self, kind: int, payload: bytes = b"") -> None:
        self.writer.write(struct.pack(">BH", kind, len(payload)) + payload)

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def read(self, timeout: float = 5.0) -> tuple[int, bytes, float]:
        """One message: (type, payload, arrival time); raises IncompleteReadError at EOF."""
        kind, length = struct.unpack(">BH", await asyncio.wait_for(self.reader.readexactly(3), timeout))
        payload = await asyncio.wait_for(self.reader.readexactly(length), timeout) if length else b""
        return kind, payload, time.monotonic()

    async def read_until_eof(self, timeout: float = 5.0) -> list[tuple[int, bytes]]:
        out = []
        try:
            while True:
                kind, payload, _ = await self.read(timeout)
                out.append((kind, payload))
        except asyncio.IncompleteReadError:
            return out

    def close(self) -> None:
        self.writer.close()


def is_silent(pcm16: bytes) -> bool:
    return not np.frombuffer(pcm16, dtype="<i2").any()
