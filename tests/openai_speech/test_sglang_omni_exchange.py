"""openai-speech against SGLang-Omni's speech routes as written down in exchanges/sglang_omni_0.1.9.json (from its
source: it needs a CUDA GPU and does not run here, docs/speech-servers.md). A loopback server replays the exchange
and checks each request voxgate sends against what SGLang-Omni takes: the fields it knows, streaming only with
`pcm`, its language and task names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from tts import EngineError, SynthesisRequest
from tts.openai_speech import OpenAISpeechEngine, SpeechServerSettings

EXCHANGE = json.loads((Path(__file__).parent / "exchanges" / "sglang_omni_0.1.9.json").read_text())
AUDIO = (np.arange(9_000) % 4_000 - 2_000).astype("<i2")


class SglangOmniReplay:
    def __init__(self):
        self.bodies: list[dict] = []
        self.problems: list[str] = []

    def check(self, body: dict) -> None:
        """What SGLang-Omni would make of the body; anything it would refuse or misread is a problem."""
        known = EXCHANGE["request"]
        unknown = set(body) - set(known["fields"])
        if unknown != {"sample_rate"}:  # voxgate's rate request: SGLang-Omni ignores it and states its own rate
            self.problems.append(f"fields SGLang-Omni does not take: {sorted(unknown)}")
        if body.get("stream") is not True or body.get("response_format") != "pcm":
            self.problems.append("not a raw PCM stream request")
        if body.get("stream_format") not in known["stream_formats"]:
            self.problems.append(f"stream_format {body.get('stream_format')!r}")
        if "language" in body and body["language"] not in known["languages"]:
            self.problems.append(f"language {body['language']!r}")
        if "task_type" in body and body["task_type"] not in known["task_types"]:
            self.problems.append(f"task_type {body['task_type']!r}")

    async def speech(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.check(body)
        if not body.get("input", "").strip():
            error = EXCHANGE["error"]
            return web.json_response(error["body"], status=error["status"])
        resp = web.StreamResponse(status=EXCHANGE["response"]["status"], headers=EXCHANGE["response"]["headers"])
        await resp.prepare(request)
        data = AUDIO.tobytes()
        for start in range(0, len(data), 3_333):  # odd pieces, as network reads come
            await resp.write(data[start : start + 3_333])
        await resp.write_eof()
        return resp

    def app(self) -> web.Application:
        def replay(route: str):
            async def handler(request: web.Request) -> web.Response:
                answer = EXCHANGE["routes"][route]
                return web.json_response(answer["body"], status=answer["status"])

            return handler

        app = web.Application()
        app.add_routes([web.post("/v1/audio/speech", self.speech)])
        app.add_routes([web.get(route.split(" ", 1)[1], replay(route)) for route in EXCHANGE["routes"]])
        return app


@pytest.fixture
async def sglang():
    server = SglangOmniReplay()
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield server, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    await runner.cleanup()


async def test_voxgate_speaks_to_sglang_omni_as_it_takes_requests_and_reads_its_stream(sglang):
    server, base = sglang
    engine = OpenAISpeechEngine(
        SpeechServerSettings(endpoints=[base], connect_timeout_s=2, task_type="CustomVoice", voices_required=["vivian"])
    )
    await engine.start()  # its voice list (case aside) names vivian: the config is accepted
    try:
        (ep,) = engine.endpoint_stats()
        assert ep["up"] and ep["flavour"] == "openai" and engine.voices() == ["Ryan", "Vivian", "default", "mine"]
        chunks = [
            c
            async for c in engine.synthesize(
                SynthesisRequest(text="Hello there.", voice="vivian", language="en", instruct="warmly", tag="s/t/0")
            )
        ]
        pcm = np.concatenate([c.pcm for c in chunks])
        assert np.array_equal(np.round(pcm * 32768).astype(np.int32), AUDIO.astype(np.int32))
        with pytest.raises(EngineError) as err:  # its error answer is quoted
            async for _ in engine.synthesize(SynthesisRequest(text=" ", voice="vivian", tag="s/t/1")):
                pass
        assert err.value.code == "engine_error" and "(400): input must be a non-empty string" in err.value.message
    finally:
        await engine.close()
    assert server.problems == []
    assert server.bodies[0] == {
        "input": "Hello there.",
        "response_format": "pcm",
        "stream": True,
        "stream_format": "audio",
        "sample_rate": 24000,
        "language": "English",
        "voice": "vivian",
        "task_type": "CustomVoice",
        "instructions": "warmly",
    }


async def test_sglang_omnis_stated_rate_is_checked(sglang):
    _, base = sglang
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[base], connect_timeout_s=2, sample_rate=16000))
    await engine.start()
    try:
        with pytest.raises(EngineError) as err:  # it ignores the body's sample_rate and says X-Sample-Rate: 24000
            async for _ in engine.synthesize(SynthesisRequest(text="Hi.", voice="vivian")):
                pass
        assert err.value.code == "engine_error" and "set engine.sample_rate: 24000" in err.value.message
    finally:
        await engine.close()
