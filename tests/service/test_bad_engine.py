"""A gateway's RemoteEngine against an engine that sends what no voxgate engine would: a packet naming a PCM frame
the message does not have, a welcome with a heartbeat of 0. The bad entry fails its own stream (engine_error at
once); the other streams in the same message get their audio; a welcome it cannot live with is refused.

The engine here is a raw ZeroMQ ROUTER on ipc:// speaking the real wire (tts/service/wire.py): a real engine never
sends these, so a hand-made peer is the only way to send them.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("zmq")
import zmq.asyncio  # noqa: E402

from tts import EngineError, SynthesisRequest  # noqa: E402
from tts.service import wire as W  # noqa: E402
from tts.service.remote import RemoteEngine  # noqa: E402


class FakeEngine:
    def __init__(self, endpoint: str, heartbeat_s: float = 1.0):
        self.endpoint, self.heartbeat_s = endpoint, heartbeat_s
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.submits: list[W.Submit] = []
        self.task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        while True:
            rid, *body = await self.sock.recv_multipart()
            msg = W.decode_from_gateway(body)
            if isinstance(msg, W.Hello):
                await self.send(
                    rid,
                    W.Welcome(
                        v=W.VERSION,
                        engine="simulated",
                        engine_id="fake",
                        sample_rate=24000,
                        heartbeat_s=self.heartbeat_s,
                    ),
                )
                self.rid = rid
            elif isinstance(msg, W.Ops):
                self.submits += msg.submit
            if isinstance(msg, (W.Hello, W.Ping, W.Ops)) and self.heartbeat_s > 0:
                await self.send(rid, W.Beat(W.Load()))

    async def send(self, rid: bytes, msg, parts: list | None = None) -> None:
        await self.sock.send_multipart([rid, *W.encode(msg, parts)])

    async def close(self) -> None:
        self.task.cancel()
        self.sock.close()
        self.ctx.term()


async def _ready(remote: RemoteEngine, timeout: float = 5.0) -> bool:
    for _ in range(int(timeout / 0.02)):
        if any(link.ready for link in remote.links):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_packet_naming_a_missing_frame_fails_its_stream_and_the_others_get_their_audio(tmp_path):
    fake = FakeEngine(f"ipc://{tmp_path}/engine.sock")
    remote = RemoteEngine([fake.endpoint], connect_timeout_s=5)
    try:
        await remote.start()
        assert await _ready(remote)
        bad = remote.synthesize(SynthesisRequest(text="bad one", tag="s1/t/0"))
        good = remote.synthesize(SynthesisRequest(text="good one", tag="s2/t/0"))
        for _ in range(250):
            if len(fake.submits) == 2:
                break
            await asyncio.sleep(0.02)
        sid_bad, sid_good = (s.sid for s in fake.submits)
        pcm = np.zeros(1920, dtype=np.float32)
        await fake.send(
            fake.rid,
            W.Packets(chunks=[W.Chunk(sid_bad, 0, True, 99), W.Chunk(sid_good, 0, True, 1)]),
            [W.pcm_part(pcm)],
        )
        chunk = await asyncio.wait_for(anext(aiter(good)), 3)
        assert chunk.is_last and len(chunk.pcm) == 1920
        with pytest.raises(EngineError) as err:
            await asyncio.wait_for(anext(aiter(bad)), 3)
        assert err.value.code == "engine_error"
    finally:
        await remote.close()
        await fake.close()


async def test_a_welcome_with_no_heartbeat_is_refused(tmp_path):
    fake = FakeEngine(f"ipc://{tmp_path}/engine.sock", heartbeat_s=0.0)
    remote = RemoteEngine([fake.endpoint], connect_timeout_s=0)
    try:
        await remote.start()
        assert not await _ready(remote, timeout=1.0)
        assert "heartbeat" in (remote.links[0].why_down or ""), remote.links[0].why_down
    finally:
        await remote.close()
        await fake.close()
