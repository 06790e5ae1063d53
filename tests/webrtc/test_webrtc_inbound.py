"""A browser that sends its microphone: the gateway consumes the inbound track into the session's
inbound stream (nothing queues without bound inside aiortc), next to the playout."""

from __future__ import annotations

import asyncio

import numpy as np

from tests import caller_audio as ca
from tests.voice.callers import MicTrack, PacedSource
from tests.webrtc.peer import ClientPeer


class MicPeer(ClientPeer):
    """A ClientPeer whose audio transceiver also sends a microphone track."""

    def __init__(self, base_url: str, mic: MicTrack):
        super().__init__(base_url)
        add = self.pc.addTransceiver
        self.pc.addTransceiver = lambda kind, direction="sendrecv": add(mic, direction="sendrecv")


async def test_the_callers_microphone_reaches_the_inbound_stream_as_it_arrives(gateway):
    source = PacedSource(48000)
    source.play(ca.tones(1500, 48000, level=0.2))
    peer = MicPeer(gateway.url, MicTrack(source))
    try:
        answer = await peer.connect()
        peer.send({"type": "session.start"})
        await peer.next_event("session.started")
        session = gateway.sessions[answer["session_id"]]
        assert session.inbound is not None
        stream = session.inbound.subscribe()
        got = []

        async def read() -> None:
            async for pcm in stream:
                got.append(pcm)

        reader = asyncio.get_running_loop().create_task(read())
        await asyncio.sleep(1.0)
        reader.cancel()
        heard = np.concatenate(got) if got else np.zeros(0, np.int16)
        rate = session.inbound.sample_rate
        assert 0.5 * rate <= len(heard) <= 1.3 * rate  # about a second of it, as it arrived
        assert np.abs(heard.astype(int)).max() > 1000  # the tones, not silence
    finally:
        await peer.close()
