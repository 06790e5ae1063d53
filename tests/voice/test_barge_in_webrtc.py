"""The WebRTC caller's microphone: an aiortc peer sends recorded speech on its audio track while the agent
speaks; the gateway consumes the track, reports `user.speech` and the caller barges in. Noise does not."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

pytest.importorskip("aiortc")

from tests import caller_audio as ca  # noqa: E402
from tests.voice.callers import MicTrack, PacedSource, resample  # noqa: E402
from tests.webrtc.peer import ClientPeer  # noqa: E402

LONG = "The agent is speaking over WebRTC now, a long reply that keeps going for a good while longer. " * 4


class MicPeer(ClientPeer):
    """A browser-like peer that sends its microphone (sendrecv audio) and hears the agent."""

    def __init__(self, base_url: str):
        super().__init__(base_url)
        self.source = PacedSource(48000)
        self.mic = MicTrack(self.source)

    async def connect(self) -> dict:
        self.pc.addTrack(self.mic)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        import aiohttp
        from aiortc import RTCSessionDescription

        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{self.base_url}/v1/webrtc/offer", json={"sdp": self.pc.localDescription.sdp, "type": "offer"}
            ) as resp:
                self.answer = await resp.json()
                assert resp.status == 200, self.answer
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=self.answer["sdp"], type=self.answer["type"]))
        await asyncio.wait_for(self.opened.wait(), 10)
        return self.answer

    def silent_from(self, after: float, threshold: float = 0.003) -> float | None:
        """Arrival of the first received frame after `after` that starts a run of silence (the agent stopped)."""
        frames = [(at, s) for at, s, _, _ in self.frames if at >= after]
        rms = [float(np.sqrt(np.mean((s / 32768.0) ** 2))) for _, s in frames]
        for i in range(len(frames) - 5):
            if all(r < threshold for r in rms[i : i + 5]):
                return frames[i][0]
        return None


async def start_call(gw, barge_in: dict | None = None) -> MicPeer:
    peer = MicPeer(gw.url)
    await peer.connect()
    peer.send({"type": "session.start", **({"barge_in": barge_in} if barge_in else {})})
    started = await peer.next_event("session.started")
    assert started["input"]["microphone"] is True
    return peer


async def test_webrtc_caller_interrupts_by_voice(make_voice_gateway):
    gw = await make_voice_gateway()
    peer = await start_call(gw)
    try:
        peer.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        start = await peer.next_event("audio.start")
        start_at = time.monotonic()
        await asyncio.sleep(0.6)
        pcm16, onset_ms = ca.caller_track(16000, lead_ms=200)
        peer.source.play(resample(pcm16, 16000, 48000), onset_ms)
        speech = await peer.next_event("user.speech", state="started")
        done = await peer.next_event("turn.done")
        assert done["interrupted"] is True and done["interrupted_by"] == "caller"
        assert abs((speech["at_ms"] - start["at_ms"]) - (peer.source.onset_at - start_at) * 1000) < 300
        await asyncio.sleep(0.4)
        silent = peer.silent_from(peer.source.onset_at)
        assert silent is not None, "the agent's audio never stopped at the caller"
        assert 250 <= (silent - peer.source.onset_at) * 1000 < 2000
    finally:
        await peer.close()


async def test_webrtc_noise_does_not_interrupt(make_voice_gateway):
    gw = await make_voice_gateway()
    peer = await start_call(gw)
    try:
        peer.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        await peer.next_event("audio.start")
        noise = np.concatenate([ca.noise(1200, 16000, level=0.08), ca.tones(1200, 16000, level=0.15)])
        peer.source.play(resample(noise, 16000, 48000))
        await asyncio.wait_for(peer.source.played_all.wait(), 8)
        await asyncio.sleep(0.4)
        heard = [e for e in peer.all_events if e.get("type") in ("user.speech", "turn.done")]
        assert not heard, heard
    finally:
        await peer.close()
