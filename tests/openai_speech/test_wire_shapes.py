"""What openai-speech sends and how it reads what comes back, against a small aiohttp server on loopback that
answers as vLLM-Omni's speech route does (it stands in for vLLM-Omni, which does not run on this CPU-only
machine; see docs/speech-servers.md): the request's fields, PCM in pieces that split samples, a server that
states another sample rate, a voice the server refuses, and a body cut mid-chunk."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp import web

from tts import EngineError, SynthesisRequest, VoiceClone
from tts.openai_speech import OpenAISpeechEngine, SpeechServerSettings
from tts.openai_speech.request_body import speech_body, voice_names

RAMP = (np.arange(24_000 + 777) % 20_000 - 10_000).astype("<i2")  # a second of known samples, not a packet multiple


class VllmLike:
    """`POST /v1/audio/speech`, `GET /v1/audio/voices`, `GET /v1/models`, `GET /health` shaped like vLLM-Omni's."""

    def __init__(self, piece_bytes: int = 1001, content_type: str = "audio/pcm", cut_after: int | None = None):
        self.piece_bytes, self.content_type, self.cut_after = piece_bytes, content_type, cut_after
        self.bodies: list[dict] = []

    async def speech(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if body.get("voice") not in (None, "vivian", "ryan"):
            return web.json_response(
                {"error": {"message": f"Invalid speaker '{body['voice']}'", "type": "BadRequestError", "code": 400}},
                status=400,
            )
        resp = web.StreamResponse(headers={"Content-Type": self.content_type})
        await resp.prepare(request)
        data = RAMP.tobytes()
        for start in range(0, len(data), self.piece_bytes):
            if self.cut_after is not None and start >= self.cut_after:
                request.transport.close()  # the server dies mid-body
                return resp
            await resp.write(data[start : start + self.piece_bytes])
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    def app(self) -> web.Application:
        def answer(make):
            async def handler(request: web.Request) -> web.Response:
                return make()

            return handler

        app = web.Application()
        app.add_routes(
            [
                web.post("/v1/audio/speech", self.speech),
                web.get("/v1/audio/voices", answer(lambda: web.json_response({"voices": ["vivian", "ryan"]}))),
                web.get(
                    "/v1/models",
                    answer(
                        lambda: web.json_response(
                            {"object": "list", "data": [{"id": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"}]}
                        )
                    ),
                ),
                web.get("/health", answer(lambda: web.Response(status=200))),
            ]
        )
        return app


@pytest.fixture
async def vllm_like():
    runners = []

    async def _start(**kw) -> tuple[VllmLike, str]:
        server = VllmLike(**kw)
        runner = server.runner = web.AppRunner(server.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return server, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"

    yield _start
    for runner in runners:
        await runner.cleanup()  # idempotent: a test may have stopped one already


async def engine_for(base: str, **kw) -> OpenAISpeechEngine:
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[base], connect_timeout_s=2, **kw))
    await engine.start()
    return engine


async def collect(stream) -> list:
    return [chunk async for chunk in stream]


async def test_pieces_that_split_samples_come_out_as_whole_packets_sample_for_sample(vllm_like):
    server, base = await vllm_like(piece_bytes=1001)  # odd: every other piece ends inside a sample
    engine = await engine_for(base, model="Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", task_type="CustomVoice")
    try:
        chunks = await collect(
            engine.synthesize(SynthesisRequest(text="Привет.", voice="vivian", language="ru", instruct="calm"))
        )
    finally:
        await engine.close()
    pcm = np.concatenate([c.pcm for c in chunks])
    assert np.array_equal(np.round(pcm * 32768).astype(np.int32), RAMP.astype(np.int32))  # nothing lost, nothing torn
    assert all(len(c.pcm) % 1920 == 0 for c in chunks[:-1]) and chunks[-1].is_last  # whole 80 ms packets, short tail
    assert [c.frame_index for c in chunks] == sorted(c.frame_index for c in chunks)
    (body,) = server.bodies
    assert body == {
        "input": "Привет.",
        "response_format": "pcm",
        "stream": True,
        "stream_format": "audio",
        "model": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
        "sample_rate": 24000,
        "language": "Russian",
        "voice": "vivian",
        "task_type": "CustomVoice",
        "instructions": "calm",
    }


async def test_a_server_that_states_another_rate_is_refused_with_the_setting_to_change(vllm_like):
    _, base = await vllm_like(content_type="audio/pcm;rate=44100")
    engine = await engine_for(base)
    try:
        with pytest.raises(EngineError) as err:
            await collect(engine.synthesize(SynthesisRequest(text="Hi.", voice="ryan")))
    finally:
        await engine.close()
    assert err.value.code == "engine_error" and "engine.sample_rate: 44100" in err.value.message


async def test_a_voice_the_server_refuses_names_its_answer_and_a_cut_body_is_engine_error(vllm_like):
    _, base = await vllm_like()
    engine = await engine_for(base)
    try:
        with pytest.raises(EngineError) as err:
            await collect(engine.synthesize(SynthesisRequest(text="Hi.", voice="nobody")))
        assert err.value.code == "engine_error" and "(400): Invalid speaker 'nobody'" in err.value.message
    finally:
        await engine.close()

    _, base = await vllm_like(cut_after=20_000)
    engine = await engine_for(base)
    try:
        stream = engine.synthesize(SynthesisRequest(text="Hi.", voice="ryan", tag="s/t/0"))
        got = []
        with pytest.raises(EngineError) as err:
            async for chunk in stream:
                got.append(chunk)
        assert err.value.code == "engine_error" and "mid-chunk" in err.value.message
        assert got and sum(len(c.pcm) for c in got) < len(RAMP)  # audio went out before the cut
        assert engine.endpoint_stats()[0]["up"] is False  # taken out until the probe finds it again
    finally:
        await engine.close()


async def test_a_config_voice_the_server_does_not_list_is_refused_at_start(vllm_like):
    _, base = await vllm_like()
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[base], voices_required=["default", "Vivian", "serena"]))
    with pytest.raises(ValueError, match=r"has no voice 'serena' \(it lists: ryan, vivian\)"):
        await engine.start()
    await engine.close()


def test_base_voice_clones_travel_as_vllm_omni_takes_them_and_voxgate_gets_codes():
    clone = VoiceClone("anna", b"RIFF....WAVE", ref_text="Reference words.")
    body = speech_body(
        SynthesisRequest(text="Hi.", voice="anna", language="en"),
        flavour="openai",
        model=None,
        sample_rate=24000,
        task_type="CustomVoice",
        clone=clone,
    )
    assert body["task_type"] == "Base" and body["ref_text"] == "Reference words." and "voice" not in body
    assert body["ref_audio"].startswith("data:audio/wav;base64,") and body["language"] == "English"
    body = speech_body(
        SynthesisRequest(text="Hi.", voice="default", language="auto"),
        flavour="voxgate",
        model=None,
        sample_rate=24000,
        task_type=None,
        clone=None,
    )
    assert body == {
        "input": "Hi.",
        "response_format": "pcm",
        "stream": True,
        "stream_format": "audio",
        "model": "voxgate",
        "language": "auto",
    }
    assert voice_names({"voices": [{"name": "narrator", "aliases": ["alloy"]}], "uploaded_voices": ["mine"]}) == {
        "narrator",
        "alloy",
        "mine",
    }
    assert voice_names(json.loads('{"detail": "Not Found"}')) is None


async def test_a_call_sends_the_frontends_text_and_the_voices_speaker(vllm_like):
    from gateway.app import Gateway
    from gateway.config import load_config
    from tests.conftest import Client

    server, base = await vllm_like()
    gw = Gateway(
        load_config(
            None,
            {
                "engine": {"kind": "openai-speech", "endpoints": [base]},
                "voices": {"agent": {"speaker": "ryan", "language": "en"}},
            },
        )
    )
    await gw.start(host="127.0.0.1", port=0)
    try:
        c = await Client.connect(gw)
        await c.start()
        await c.send({"type": "text", "turn_id": "t1", "text": "I have 42 apples.", "final": True})
        await c.until("turn.done", timeout=15)
        await c.ws.close()
    finally:
        await gw.stop()
    (body,) = server.bodies
    assert body["voice"] == "ryan" and body["language"] == "English"
    assert "42" not in body["input"] and "forty" in body["input"].lower()  # normalised before it was sent


async def test_a_server_gone_before_the_first_byte_is_taken_out_and_the_chunk_moves(vllm_like):
    gone, base_gone = await vllm_like()
    other, base_other = await vllm_like()
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[base_gone, base_other], connect_timeout_s=2))
    await engine.start()
    try:
        assert [e["up"] for e in engine.endpoint_stats()] == [True, True]
        await gone.runner.cleanup()  # it goes away between two probes: the next chunk placed there finds nobody
        chunks = await collect(engine.synthesize(SynthesisRequest(text="Hi.", voice="ryan", tag="s1/t1/0")))
        assert sum(len(c.pcm) for c in chunks) == len(RAMP) and len(other.bodies) == 1  # whole, from the other one
        down, up = engine.endpoint_stats()
        assert not down["up"] and down["errors"] == {"engine_unavailable": 1} and up["up"]
        assert engine.stats()["retried"] == 1
    finally:
        await engine.close()


def test_packet_cutter_keeps_every_sample_across_any_split():
    from tts.openai_speech.packets import PacketCutter

    data = RAMP.tobytes()
    rng = np.random.default_rng(3)
    for _ in range(20):
        cutter, out, pos = PacketCutter(1920), [], 0
        while pos < len(data):
            n = int(rng.integers(1, 9000))
            packets = cutter.feed(data[pos : pos + n])
            pos += n
            if packets is not None:
                assert len(packets) % 1920 == 0
                out.append(packets)
        tail = cutter.flush()
        assert len(tail) < 1920
        got = np.round(np.concatenate(out + [tail]) * 32768).astype(np.int32)
        assert np.array_equal(got, RAMP.astype(np.int32))


async def test_closing_the_engine_ends_its_streams_with_a_code(vllm_like):
    _, base = await vllm_like(piece_bytes=2)  # a slow body: still streaming when the engine closes
    engine = await engine_for(base)
    stream = engine.synthesize(SynthesisRequest(text="Hi.", voice="ryan"))
    await asyncio.sleep(0.05)
    await engine.close()
    with pytest.raises(EngineError) as err:
        await asyncio.wait_for(collect(stream), 5)
    assert err.value.code == "engine_unavailable"
