"""The capacity bench's epoll load client against a real aiohttp WebSocket server on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from aiohttp import WSMsgType, web

from bench.capacity_client import OP_TEXT, LoadClient, client_frame


def unmask(frame: bytes) -> bytes:
    n = frame[1] & 0x7F
    key, payload = frame[2:6], frame[6 : 6 + n]
    return bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def test_client_frames_are_masked_and_round_trip():
    data = json.dumps({"type": "session.end"}).encode()
    frame = client_frame(OP_TEXT, data)
    assert frame[0] == 0x81 and frame[1] & 0x80 and frame[6:] != data  # final text frame, masked
    assert unmask(frame) == data


class _Server:
    """A tiny /v1/ws: answers session.start with 25 binary frames, a ping and a turn.done per text, logs what it got."""

    def __init__(self):
        self.got: list = []
        self.pongs = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/v1/ws", self.handle)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def handle(self, request):
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.PONG:
                self.pongs += 1
                continue
            if msg.type != WSMsgType.TEXT:
                break
            m = json.loads(msg.data)
            self.got.append(m["type"])
            if m["type"] == "text":
                for _ in range(25):
                    await ws.send_bytes(b"\xff" * 160)
                await ws.send_bytes(b"\x00" * 70000)  # a 64-bit length
                await ws.ping(b"hi")
                await ws.send_str(json.dumps({"type": "turn.done", "turn_id": m["turn_id"]}))
            elif m["type"] == "session.end":
                await ws.close()
        return ws


def test_callers_count_frames_answer_pings_take_turns_and_end_cleanly():
    server = _Server()
    client = LoadClient("127.0.0.1", server.port, pause_s=0.05, read_interval_s=0.005)
    client.start(3, 0.01)
    deadline = time.monotonic() + 10
    while client.stats.turns < 6 and time.monotonic() < deadline:  # at least two turns each, paced by the pause
        client.run_once()
    assert client.stats.connected == 3 and client.stats.errors == 0
    assert client.stats.frames >= 26 * client.stats.turns - 26 * 3  # every turn's frames, bar the ones still in flight
    client.stop_all()
    deadline = time.monotonic() + 10
    while client.callers and time.monotonic() < deadline:
        client.run_once()
    assert not client.callers and client.stats.disconnects == 0  # the server closed because the caller ended
    assert server.pongs >= 6
    assert server.got.count("session.start") == 3 and server.got.count("session.end") == 3
    server.loop.call_soon_threadsafe(server.loop.stop)
