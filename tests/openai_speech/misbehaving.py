"""A speech server that misbehaves the way a sick GPU server does, for the openai-speech engine's tests: real HTTP
on loopback (aiohttp), healthy on `/health` and `/v1/models` whatever its speech route does.

Modes of `POST /v1/audio/speech` (switched at run time with `POST /control {"mode": ...}`):

* `silent`: accepts the request and never answers (no status line, no byte);
* `headers`: answers `200 audio/pcm` and then sends nothing;
* `stall`: answers with half a second of audio, then nothing;
* `html`: answers `200 text/html` with an error page (what a proxy in front of a dead server sends);
* `runaway`: streams audio as fast as the socket takes it, for ever;
* `error_flood`: answers `500` with an error text that never ends;
* `ok`: half a second of audio, then the end, like a healthy server.

`GET /stats` says how many speech requests came, how many bytes of audio were written (a reader that stops
reading holds that at the socket buffers) and how many requests are open. Run in its own process with
`python -m tests.openai_speech.misbehaving --port N --mode M`, or in the test's loop with `Misbehaving(mode)`.
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np
from aiohttp import web

RATE = 24_000
TONE = (np.sin(np.arange(RATE // 2) * 2 * np.pi * 220 / RATE) * 8000).astype("<i2").tobytes()  # 0.5 s, 220 Hz
HTML = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>" + b" " * 50_000 + b"</html>"
MODES = ("silent", "headers", "stall", "html", "runaway", "error_flood", "ok")


async def _until_gone(request: web.Request) -> None:
    """Hang, sending nothing, until the client closes the connection (aiohttp does not cancel a handler then)."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.05)


class Misbehaving:
    def __init__(self, mode: str):
        self.mode = mode
        self.requests = 0
        self.audio_bytes = 0
        self.open = 0

    async def speech(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.requests += 1
        self.open += 1
        try:
            return await self._answer(request, self.mode)
        finally:
            self.open -= 1

    async def _answer(self, request: web.Request, mode: str) -> web.StreamResponse:
        if mode == "silent":
            await _until_gone(request)
            return web.Response()  # to nobody: the connection is gone
        if mode == "html":
            return web.Response(body=HTML, content_type="text/html")
        if mode == "error_flood":
            resp = web.StreamResponse(status=500, headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            while True:
                await resp.write(b"internal error, and again: " * 1000)
        resp = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        await resp.prepare(request)
        if mode == "headers":
            await _until_gone(request)
            return resp
        if mode == "runaway":
            while True:
                await resp.write(TONE)  # waits while the socket is full: the reader's pace, not ours
                self.audio_bytes += len(TONE)
        await resp.write(TONE)
        self.audio_bytes += len(TONE)
        if mode == "stall":
            await _until_gone(request)
            return resp
        await resp.write_eof()
        return resp

    async def control(self, request: web.Request) -> web.Response:
        mode = (await request.json())["mode"]
        if mode not in MODES:
            return web.json_response({"error": f"mode must be one of {MODES}"}, status=400)
        self.mode = mode
        return web.json_response({"mode": mode})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests, "audio_bytes": self.audio_bytes, "open": self.open})

    def app(self) -> web.Application:
        async def health(request: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "misbehaving"}]})

        app = web.Application()
        app.add_routes(
            [
                web.post("/v1/audio/speech", self.speech),
                web.get("/v1/models", models),
                web.get("/health", health),
                web.post("/control", self.control),
                web.get("/stats", self.stats),
            ]
        )
        return app

    async def start(self, port: int = 0) -> tuple[web.AppRunner, str]:
        """Serves in the running loop; returns the runner (to clean up) and the base URL (`http://…/v1`)."""
        runner = web.AppRunner(self.app(), shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    args = parser.parse_args()
    web.run_app(Misbehaving(args.mode).app(), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
