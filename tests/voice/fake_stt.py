"""A local OpenAI-compatible transcription server for the tests (the real ones need a model).

It checks the request the way whisper.cpp's and vLLM's servers read it —
multipart with `file` (a WAV), `model`, `response_format` — and answers with
a transcript chosen by the test; it records what it got (duration, rate,
headers) so tests can check what the gateway sent.
"""

from __future__ import annotations

import asyncio
import io
import wave

from aiohttp import web


class FakeTranscriptionServer:
    def __init__(self, text: str = "hello there", status: int = 200, delay_s: float = 0.0, body: str | None = None):
        self.text = text
        self.status = status
        self.delay_s = delay_s
        self.body = body  # raw body instead of the JSON answer
        self.requests: list[dict] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        got = {
            "model": form.get("model"),
            "response_format": form.get("response_format"),
            "language": form.get("language"),
            "authorization": request.headers.get("Authorization"),
        }
        if upload is None or not hasattr(upload, "file"):
            return web.json_response({"error": {"message": "file is required"}}, status=400)
        with wave.open(io.BytesIO(upload.file.read()), "rb") as w:
            got.update(rate=w.getframerate(), channels=w.getnchannels(), ms=w.getnframes() * 1000 / w.getframerate())
        self.requests.append(got)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.body is not None:
            return web.Response(text=self.body, status=self.status)
        if self.status != 200:
            return web.json_response({"error": {"message": "model exploded"}}, status=self.status)
        return web.json_response({"text": self.text})

    async def start(self) -> "FakeTranscriptionServer":
        app = web.Application()
        app.router.add_post("/v1/audio/transcriptions", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
