"""Far ends written from the vendors' docs: Asterisk chan_websocket, Telnyx media streaming, Vonage WebSocket, jambonz listen.

Each client plays what it receives the way its far end does: a queue drained
in real time, one 20 ms frame per tick, with our marks in it. A mark is
confirmed (in that vendor's words) when playback reaches it; a clear drops
the queue and answers for the dropped marks as that vendor does (Asterisk:
not at all; Telnyx: echoes them; jambonz: `"event": "cleared"`; Vonage: not
at all, then `websocket:cleared`). Anything a real far end would refuse
(a partial frame, an unknown command, an oversized message) is recorded in
`violations`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import websockets

from audio.g711 import ulaw_encode
from gateway.app import Gateway
from gateway.wire.events import WireAudio

ASTERISK_COMMANDS = {
    "ANSWER",
    "HANGUP",
    "START_MEDIA_BUFFERING",
    "STOP_MEDIA_BUFFERING",
    "MARK_MEDIA",
    "FLUSH_MEDIA",
    "PAUSE_MEDIA",
    "CONTINUE_MEDIA",
    "GET_STATUS",
    "REPORT_QUEUE_DRAINED",
    "SET_MEDIA_DIRECTION",
}


def ws_url(gw: Gateway, path: str, **query: str) -> str:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    return f"ws://127.0.0.1:{gw.port}{path}" + (f"?{qs}" if qs else "")


def tone(samples: int, freq: float = 440.0, rate: int = 8000) -> np.ndarray:
    return (np.sin(2 * np.pi * freq * np.arange(samples) / rate) * 8000).astype(np.int16)


@dataclass
class Received:
    media: list[tuple[bytes, float]] = field(default_factory=list)  # (one message's audio, arrival time)
    commands: list[tuple[str, dict | str, float]] = field(
        default_factory=list
    )  # (name, text message, arrival) in order


class FarEnd:
    """The playback side shared by every far end: a real-time queue of frames and marks."""

    def __init__(self, ws, audio_out: WireAudio):
        self.ws = ws
        self.out = audio_out  # what we receive and play
        self.got = Received()
        self.played: list[bytes] = []  # frames in the order they were "heard"
        self.confirmed: list[str] = []
        self.violations: list[str] = []
        self.closed = asyncio.Event()
        self._queue: deque[tuple[str, object]] = deque()  # ("audio", bytes of one frame) | ("mark", name)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self._player = asyncio.get_running_loop().create_task(self._play())
        self.playing = True  # False: playback stalls (a deep far-end buffer), queued audio and marks wait

    # -- subclasses: on_text(msg) for TEXT, on_binary(data) for BINARY, confirm(name) when a mark is reached
    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if isinstance(msg, bytes):
                    self.got.media.append((msg, time.monotonic()))
                    self.on_binary(msg)
                else:
                    self.on_text(msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()

    def queue_audio(self, data: bytes) -> None:
        fb = self.out.frame_bytes
        if len(data) % fb:
            self.violations.append(f"audio message of {len(data)} bytes is not whole {fb}-byte frames")
        for i in range(0, len(data) - len(data) % fb, fb):
            self._queue.append(("audio", data[i : i + fb]))

    def queue_mark(self, name: str) -> None:
        self._queue.append(("mark", name))

    def drop_queue(self) -> list[str]:
        """Barge-in: drop queued audio; returns the names of the dropped marks."""
        marks = [v for k, v in self._queue if k == "mark"]
        self._queue.clear()
        return marks

    @property
    def queued_frames(self) -> int:
        return sum(1 for k, _ in self._queue if k == "audio")

    async def _play(self) -> None:
        start, n = time.monotonic(), 0
        while not self.closed.is_set():
            n += 1
            await asyncio.sleep(max(0.0, start + n * 0.020 - time.monotonic()))
            if not self.playing:
                continue
            while self._queue and self._queue[0][0] == "mark":
                name = self._queue.popleft()[1]
                self.confirmed.append(name)
                await self._safe(self.confirm(name))
            if self._queue:
                self.played.append(self._queue.popleft()[1])

    async def _safe(self, coro) -> None:
        try:
            await coro
        except websockets.ConnectionClosed:
            pass

    async def send(self, msg: dict | str | bytes) -> None:
        await self.ws.send(msg if isinstance(msg, (str, bytes)) else json.dumps(msg))

    def on_text(self, raw: str) -> None:
        raise NotImplementedError

    def on_binary(self, data: bytes) -> None:
        self.queue_audio(data)

    async def confirm(self, name: str) -> None:
        raise NotImplementedError

    def commands(self, name: str) -> list:
        return [msg for n, msg, _ in self.got.commands if n == name]

    def command_names(self) -> list[str]:
        return [n for n, _, _ in self.got.commands]

    def audio_pcm(self) -> np.ndarray:
        return (
            np.concatenate([self.out.decode(m) for m, _ in self.got.media]) if self.got.media else np.zeros(0, np.int16)
        )

    async def close(self) -> None:
        await self.ws.close()
        self._player.cancel()
        await asyncio.gather(self._reader, self._player, return_exceptions=True)


# ---------------------------------------------------------------- Asterisk chan_websocket
class AsteriskClient(FarEnd):
    """Asterisk dialling `WebSocket/voxgate/c(ulaw)f(json)`: subprotocol `media`, MEDIA_START, binary media, TEXT control."""

    FORMATS = {
        "ulaw": WireAudio("mulaw", 8000),
        "slin16": WireAudio("pcm16le", 16000),
        "slin": WireAudio("pcm16le", 8000),
    }

    def __init__(self, ws, fmt: str, json_control: bool, channel_id: str):
        super().__init__(ws, self.FORMATS[fmt])
        self.fmt = fmt
        self.json = json_control
        self.channel_id = channel_id
        self.optimal = self.out.frame_bytes

    @classmethod
    async def connect(
        cls,
        gw: Gateway,
        channel_id: str = "1761245643.1",
        fmt: str = "ulaw",
        json_control: bool = True,
        start: bool = True,
        **query,
    ) -> "AsteriskClient":
        ws = await websockets.connect(ws_url(gw, "/v1/asterisk", **query), subprotocols=["media"], compression=None)
        if ws.subprotocol != "media":  # Asterisk refuses an answer naming another subprotocol
            raise AssertionError(f"server answered subprotocol {ws.subprotocol!r}")
        client = cls(ws, fmt, json_control, channel_id)
        if start:
            await client.media_start()
        return client

    async def media_start(self) -> None:
        fields = {
            "connection_id": "voxgate",
            "channel": f"WebSocket/voxgate/0x{abs(hash(self.channel_id)) % 10**8:x}",
            "channel_id": self.channel_id,
            "format": self.fmt,
            "optimal_frame_size": self.optimal,
            "ptime": 20,
        }
        if self.json:
            await self.send(
                {"event": "MEDIA_START", **fields, "channel_variables": {"MEDIA_WEBSOCKET_CONNECTION_ID": "voxgate"}}
            )
        else:
            await self.send("MEDIA_START " + " ".join(f"{k}:{v}" for k, v in fields.items()))

    async def event(self, name: str, **fields) -> None:
        if self.json:
            await self.send({"event": name, "channel_id": self.channel_id, **fields})
        else:
            await self.send(" ".join([name, *(f"{k}:{v}" for k, v in fields.items()), f"channel_id:{self.channel_id}"]))

    async def caller_audio(self, pcm: np.ndarray) -> None:
        await self.send(self.out.encode(pcm))

    def on_text(self, raw: str) -> None:
        if len(raw.encode()) > 128:
            self.violations.append(f"TEXT message of {len(raw)} bytes (Asterisk ignores commands over 128)")
        if self.json:
            try:
                cmd = json.loads(raw)
            except ValueError:
                self.violations.append(f"not JSON: {raw!r}")
                return
            name, arg = cmd.get("command"), cmd.get("correlation_id")
        else:
            name, _, arg = raw.partition(" ")
            cmd = raw
        if name not in ASTERISK_COMMANDS:
            self.violations.append(f"unknown command {raw!r}")
        self.got.commands.append((name, cmd, time.monotonic()))
        if name == "MARK_MEDIA":
            self.queue_mark(arg)
        elif name == "FLUSH_MEDIA":
            self.drop_queue()  # marks go with it, unanswered

    def on_binary(self, data: bytes) -> None:
        if len(data) > 65_500:
            self.violations.append(f"binary message of {len(data)} bytes (Asterisk hangs up above 65,500)")
        if len(data) % self.optimal:
            self.violations.append(f"media of {len(data)} bytes: not a multiple of optimal_frame_size {self.optimal}")
        self.queue_audio(data)

    async def confirm(self, name: str) -> None:
        if self.json:
            await self.send({"event": "MEDIA_MARK_PROCESSED", "channel_id": self.channel_id, "correlation_id": name})
        else:
            await self.send(f"MEDIA_MARK_PROCESSED {name}")


# ---------------------------------------------------------------- Telnyx
class TelnyxClient(FarEnd):
    """Telnyx's side of a bidirectional (RTP mode) media stream."""

    CODECS = {"PCMU": WireAudio("mulaw", 8000), "L16": WireAudio("pcm16be", 16000)}

    def __init__(self, ws, codec: str, stream_id: str, call_control_id: str):
        super().__init__(ws, self.CODECS[codec])
        self.codec = codec
        self.stream_id = stream_id
        self.call_control_id = call_control_id
        self.seq = 0
        self.chunk = 0

    @classmethod
    async def connect(
        cls,
        gw: Gateway,
        codec: str = "PCMU",
        stream_id: str = "32DE0DEA-0001",
        call_control_id: str = "v3:ccid-0001",
        custom_parameters: dict | None = None,
        start: bool = True,
        **query,
    ) -> "TelnyxClient":
        ws = await websockets.connect(ws_url(gw, "/v1/telnyx", **query), compression=None)
        client = cls(ws, codec, stream_id, call_control_id)
        if start:
            await client.send({"event": "connected", "version": "1.0.0"})
            rate = client.out.sample_rate
            await client.send(
                {
                    "event": "start",
                    "sequence_number": client._seq(),
                    "stream_id": stream_id,
                    "start": {
                        "user_id": "3E6F995F-0001",
                        "call_control_id": call_control_id,
                        "call_session_id": "ff55a038-0001",
                        "from": "+13122010094",
                        "to": "+13122123456",
                        "custom_parameters": custom_parameters or {},
                        "media_format": {"encoding": codec, "sample_rate": rate, "channels": 1},
                    },
                }
            )
        return client

    def _seq(self) -> str:
        self.seq += 1
        return str(self.seq)

    def media_msg(self, pcm: np.ndarray) -> str:
        self.chunk += 1
        return json.dumps(
            {
                "event": "media",
                "sequence_number": self._seq(),
                "stream_id": self.stream_id,
                "media": {
                    "track": "inbound",
                    "chunk": str(self.chunk),
                    "timestamp": str((self.chunk - 1) * 20),
                    "payload": base64.b64encode(self.out.encode(pcm)).decode(),
                },
            }
        )

    async def dtmf(self, digit: str) -> None:
        await self.send(
            {
                "event": "dtmf",
                "sequence_number": self._seq(),
                "stream_id": self.stream_id,
                "occurred_at": "2026-12-01T10:00:00Z",
                "dtmf": {"digit": digit},
            }
        )

    async def stop(self) -> None:
        await self.send(
            {
                "event": "stop",
                "sequence_number": self._seq(),
                "stream_id": self.stream_id,
                "stop": {"user_id": "3E6F995F-0001", "call_control_id": self.call_control_id},
            }
        )

    def on_text(self, raw: str) -> None:
        msg = json.loads(raw)
        event = msg.get("event")
        self.got.commands.append((event, msg, time.monotonic()))
        if event == "media":
            data = base64.b64decode(msg["media"]["payload"])
            self.got.media.append((data, time.monotonic()))
            self.queue_audio(data)
        elif event == "mark":
            self.queue_mark(msg["mark"]["name"])
        elif event == "clear":
            for name in self.drop_queue():  # Telnyx sends the queued marks back after a clear
                asyncio.get_running_loop().create_task(self._safe(self.confirm(name)))
        else:
            self.violations.append(f"Telnyx does not accept {raw[:80]!r}")

    def on_binary(self, data: bytes) -> None:
        self.violations.append("Telnyx media streams take JSON TEXT frames only")

    async def confirm(self, name: str) -> None:
        await self.send(
            {"event": "mark", "sequence_number": self._seq(), "stream_id": self.stream_id, "mark": {"name": name}}
        )


# ---------------------------------------------------------------- Vonage
class VonageClient(FarEnd):
    """Vonage's side of an NCCO `connect` to a websocket endpoint (audio/l16;rate=16000)."""

    def __init__(self, ws, rate: int):
        super().__init__(ws, WireAudio("pcm16le", rate))
        self.notifies: list[dict] = []

    @classmethod
    async def connect(
        cls, gw: Gateway, rate: int = 16000, headers: dict | None = None, start: bool = True, **query
    ) -> "VonageClient":
        ws = await websockets.connect(ws_url(gw, "/v1/vonage", **query), compression=None)
        client = cls(ws, rate)
        if start:
            await client.send(
                {"event": "websocket:connected", "content-type": f"audio/l16;rate={rate}", **(headers or {})}
            )
        return client

    def on_text(self, raw: str) -> None:
        msg = json.loads(raw)
        action = msg.get("action")
        self.got.commands.append((action, msg, time.monotonic()))
        if action == "notify":
            self.queue_mark(json.dumps(msg.get("payload")))
        elif action == "clear":
            self.drop_queue()
            asyncio.get_running_loop().create_task(self._safe(self.send({"event": "websocket:cleared"})))
        else:
            self.violations.append(f"Vonage does not accept {raw[:80]!r}")

    def on_binary(self, data: bytes) -> None:
        if len(data) != self.out.frame_bytes:  # Vonage wants exactly 20 ms per message
            self.violations.append(f"audio message of {len(data)} bytes; Vonage takes exactly {self.out.frame_bytes}")
        self.queue_audio(data)

    async def confirm(self, name: str) -> None:
        await self.send({"event": "websocket:notify", "payload": json.loads(name)})


# ---------------------------------------------------------------- jambonz
class JambonzClient(FarEnd):
    """jambonz running `listen` with bidirectionalAudio {enabled, streaming, sampleRate}."""

    def __init__(self, ws, rate: int, out_rate: int):
        super().__init__(ws, WireAudio("pcm16le", out_rate))
        self.rate = rate
        self.disconnected = False

    @classmethod
    async def connect(
        cls,
        gw: Gateway,
        call_sid: str = "8d1d3b2e-0001",
        rate: int = 8000,
        out_rate: int | None = None,
        metadata: dict | None = None,
        start: bool = True,
        **query,
    ) -> "JambonzClient":
        ws = await websockets.connect(
            ws_url(gw, "/v1/jambonz", **query), subprotocols=["audio.jambonz.org"], compression=None
        )
        client = cls(ws, rate, out_rate or rate)
        if start:
            await client.send(
                {
                    "callSid": call_sid,
                    "callId": f"{call_sid}@10.0.0.1",
                    "direction": "inbound",
                    "from": "+15083084809",
                    "to": "+15083728299",
                    "accountSid": "acc-1",
                    "applicationSid": "app-1",
                    "sampleRate": rate,
                    "mixType": "mono",
                    "metadata": metadata or {},
                }
            )
        return client

    def on_text(self, raw: str) -> None:
        msg = json.loads(raw)
        kind = msg.get("type")
        self.got.commands.append((kind, msg, time.monotonic()))
        if kind == "mark":
            self.queue_mark(msg["data"]["name"])
        elif kind == "killAudio":
            for name in self.drop_queue():  # queued marks come back as cleared
                asyncio.get_running_loop().create_task(
                    self._safe(self.send({"type": "mark", "data": {"name": name, "event": "cleared"}}))
                )
        elif kind == "disconnect":
            self.disconnected = True
        elif kind != "clearMarks":
            self.violations.append(f"jambonz does not accept {raw[:80]!r}")

    async def confirm(self, name: str) -> None:
        await self.send({"type": "mark", "data": {"name": name, "event": "playout"}})


def ulaw_tone(ms: int = 20) -> bytes:
    return ulaw_encode(tone(8 * ms))
