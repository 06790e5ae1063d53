"""A real aiortc client peer for the gateway's WebRTC leg (tests and the TTFA probe)."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpsender import RTCRtpSender


class ClientPeer:
    """Offers recvonly audio plus one data channel; records frames and events with arrival times."""

    def __init__(
        self,
        base_url: str,
        codecs: list[str] | None = None,
        token: str | None = None,
        configuration: RTCConfiguration | None = None,
    ):
        self.base_url = base_url
        self.codecs = codecs  # e.g. ["PCMU"] to offer only that
        self.token = token
        self.pc = RTCPeerConnection(configuration or RTCConfiguration(iceServers=[]))
        self.events: asyncio.Queue = asyncio.Queue()
        self.all_events: list[dict] = []
        self.frames: list[tuple[float, np.ndarray, int, str]] = []  # (arrival, int16 samples, rate, layout)
        self.answer: dict = {}
        self._reader: asyncio.Task | None = None
        self.channel = self.pc.createDataChannel("voxgate")
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self.channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)

    def _on_message(self, data) -> None:
        event = json.loads(data)
        event["_at"] = time.monotonic()
        self.all_events.append(event)
        if event.get("type") != "playout.stats":
            self.events.put_nowait(event)

    def _on_track(self, track) -> None:
        async def read() -> None:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                self.frames.append(
                    (time.monotonic(), frame.to_ndarray().reshape(-1).copy(), frame.sample_rate, frame.layout.name)
                )

        self._reader = asyncio.get_running_loop().create_task(read())

    async def connect(self) -> dict:
        transceiver = self.pc.addTransceiver("audio", direction="recvonly")
        if self.codecs:
            caps = RTCRtpSender.getCapabilities("audio").codecs
            transceiver.setCodecPreferences([c for c in caps if c.mimeType.split("/")[1] in self.codecs])
        await self.pc.setLocalDescription(await self.pc.createOffer())
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{self.base_url}/v1/webrtc/offer",
                json={"sdp": self.pc.localDescription.sdp, "type": "offer"},
                headers=headers,
            ) as resp:
                self.answer = await resp.json()
                if resp.status != 200:
                    raise RuntimeError(f"offer refused: {resp.status} {self.answer}")
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=self.answer["sdp"], type=self.answer["type"]))
        await asyncio.wait_for(self.opened.wait(), 10)
        return self.answer

    def send(self, msg: dict | str) -> float:
        self.channel.send(msg if isinstance(msg, str) else json.dumps(msg))
        return time.monotonic()

    async def next_event(self, type_: str, timeout: float = 10.0, **match) -> dict:
        """The next event of `type_` (matching `match`); earlier events of other types are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"no {type_} event {match or ''} within {timeout} s; seen: {[e.get('type') for e in self.all_events][-20:]}"
                )
            event = await asyncio.wait_for(self.events.get(), left)
            if event.get("type") == type_ and all(event.get(k) == v for k, v in match.items()):
                return event

    def first_sound_after(self, t0: float, threshold: float = 0.01) -> float | None:
        """Arrival time of the first received frame after `t0` whose RMS exceeds `threshold`."""
        for at, samples, _, _ in self.frames:
            if at >= t0 and np.sqrt(np.mean((samples / 32768.0) ** 2)) > threshold:
                return at
        return None

    def rms_between(self, t0: float, t1: float) -> float:
        chunk = [s for at, s, _, _ in self.frames if t0 <= at < t1]
        if not chunk:
            return 0.0
        x = np.concatenate(chunk) / 32768.0
        return float(np.sqrt(np.mean(x**2)))

    async def close(self) -> None:
        await self.pc.close()
        if self._reader:
            self._reader.cancel()
