"""A stand-in gateway that costs almost nothing: for measuring the load client itself.

It speaks just enough of the native protocol (docs/protocol.md) — session.start,
text, session.end → session.started, audio.start, paced binary frames,
turn.done, session.ended — with a fixed latency and `ms_per_char` of audio
per character, every frame a prebuilt constant, all sessions paced by one
clock task. With the server this cheap, the level at which the client's own
clock slips is the client's capacity, not the gateway's.

    python -m bench.loadtest.stub --port 8765
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import WSMsgType, web

FRAME_S = 0.02


class _StubSession:
    def __init__(self, ws: web.WebSocketResponse, frame: bytes):
        self.ws = ws
        self.frame = frame
        self.chars: dict[str, int] = {}
        self.queue: list[tuple[str, int, float]] = []  # (turn_id, frames, start time)
        self.playing: tuple[str, int] | None = None
        self.sent = 0


class StubGateway:
    def __init__(self, latency_ms: float = 150.0, ms_per_char: float = 70.0):
        self.latency_s = latency_ms / 1000.0
        self.ms_per_char = ms_per_char
        self.sessions: set[_StubSession] = set()
        self.app = web.Application()
        self.app.add_routes(
            [web.get("/v1/ws", self._ws), web.get("/readyz", self._ready), web.get("/metrics", self._metrics)]
        )

    async def _ready(self, request: web.Request) -> web.Response:
        return web.json_response({"ready": True, "engine": "stub"})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=f'voxgate_engine_info{{kind="stub",vocoder="none"}} 1.0\nvoxgate_sessions_active {len(self.sessions)}\n'
        )

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        session: _StubSession | None = None
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            m = json.loads(msg.data)
            if m["type"] == "session.start":
                out = m.get("output") or {}
                rate = int(out.get("sample_rate", 24000))
                width = 2 if out.get("encoding", "pcm16") == "pcm16" else 1
                session = _StubSession(ws, b"\x01\x02" * (rate // 50 * width // 2))
                self.sessions.add(session)
                await ws.send_json(
                    {"type": "session.started", "session_id": hex(id(session)), "output": {"frame_ms": 20, **out}}
                )
            elif m["type"] == "text" and session is not None:
                tid = m["turn_id"]
                session.chars[tid] = session.chars.get(tid, 0) + len(m.get("text", ""))
                if m.get("final"):
                    frames = max(1, round(session.chars.pop(tid) * self.ms_per_char / 20.0))
                    session.queue.append((tid, frames, time.monotonic() + self.latency_s))
            elif m["type"] == "session.end":
                await ws.send_json({"type": "session.ended"})
                break
        if session is not None:
            self.sessions.discard(session)
        return ws

    async def clock(self) -> None:
        start = time.monotonic()
        n = 0
        while True:
            n += 1
            await asyncio.sleep(max(0.0, start + n * FRAME_S - time.monotonic()))
            now = time.monotonic()
            for s in list(self.sessions):
                try:
                    await self._tick(s, now)
                except ConnectionError:
                    self.sessions.discard(s)

    async def _tick(self, s: _StubSession, now: float) -> None:
        if s.playing is None:
            if not s.queue or s.queue[0][2] > now:
                return
            tid, frames, t0 = s.queue.pop(0)
            s.playing = (tid, frames)
            s.sent = 0
            await s.ws.send_str(
                json.dumps(
                    {
                        "type": "audio.start",
                        "turn_id": tid,
                        "ttfa_ms": round((now - t0) * 1000 + self.latency_s * 1000, 1),
                    }
                )
            )
        tid, frames = s.playing
        await s.ws.send_bytes(s.frame)
        s.sent += 1
        if s.sent >= frames:
            s.playing = None
            await s.ws.send_str(
                json.dumps(
                    {
                        "type": "turn.done",
                        "turn_id": tid,
                        "played_ms": frames * 20,
                        "interrupted": False,
                        "gaps": {"micro": 0, "audible": 0},
                        "played_text": "",
                    }
                )
            )


async def serve(host: str, port: int, latency_ms: float, ms_per_char: float) -> None:
    stub = StubGateway(latency_ms, ms_per_char)
    runner = web.AppRunner(stub.app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"stub gateway on ws://{host}:{port}/v1/ws", flush=True)
    await stub.clock()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--latency-ms", type=float, default=150.0)
    p.add_argument("--ms-per-char", type=float, default=70.0)
    a = p.parse_args(argv)
    try:
        asyncio.run(serve(a.host, a.port, a.latency_ms, a.ms_per_char))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
