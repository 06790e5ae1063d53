"""POST /v1/audio/speech and GET /v1/models, driven by the real `openai` package against a real gateway on loopback."""

import asyncio
import base64
import io
import json
import time

import aiohttp
import numpy as np
import pytest

openai = pytest.importorskip("openai")
av = pytest.importorskip("av")

FORMATS = ["pcm", "wav", "opus", "mp3", "flac", "aac"]
VOICES = {"voices": {"narrator": {"aliases": ["alloy", "Nova"]}, "second": {}}}
TEXT = "Hello there. This is a test of the speech route, with a second sentence."


def client(gw, key: str = "none") -> "openai.AsyncOpenAI":
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key=key, max_retries=0, timeout=30)


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768, 24000
    with av.open(io.BytesIO(data)) as c:
        rate = c.streams.audio[0].codec_context.sample_rate
        pcm = np.concatenate(
            [
                f.to_ndarray().reshape(-1) if f.to_ndarray().shape[0] == 1 else f.to_ndarray()[0]
                for f in c.decode(audio=0)
            ]
        )
    if pcm.dtype.kind == "i":
        pcm = pcm.astype(np.float32) / (32768 if pcm.dtype == np.int16 else 2**31)
    return pcm, rate


def record_requests(gw) -> list:
    """(request, submitted at) as the engine received them (a spy on the real engine, which still does the work)."""
    seen = []
    real = gw.engine.synthesize

    def spy(request):
        seen.append((request, time.monotonic()))
        return real(request)

    gw.engine.synthesize = spy
    return seen


async def test_every_format_without_streaming_decodes_to_the_same_speech(start_gateway):
    gw = await start_gateway(VOICES)
    durations = {}
    async with client(gw) as oa:
        for fmt in FORMATS:
            resp = await oa.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt)
            pcm, rate = decode(resp.content, fmt)
            durations[fmt] = len(pcm) / rate
            assert resp.response.headers["x-voxgate-voice"] == "narrator"  # the alias answered
            assert resp.response.headers["x-voxgate-model"] == "tts-1"
            assert np.sqrt(np.mean(pcm**2)) > 0.01  # speech, not silence
    assert durations["pcm"] > 1.0
    for fmt, seconds in durations.items():
        assert abs(seconds - durations["pcm"]) <= 0.1, (fmt, durations)
    assert len(gw.sessions) == 0  # every request released its session


@pytest.mark.parametrize("fmt", FORMATS)
async def test_streamed_bodies_start_before_the_audio_is_complete(start_gateway, fmt):
    # An engine at RTF 0.5: the whole reply takes a while, so a buffered body would show up at the end.
    gw = await start_gateway({"simulated": {"stream_rtf": 0.5, "packet_ms": 160, "first_packet_ms": 30}})
    async with client(gw) as oa:
        t0 = time.monotonic()
        arrivals, body = [], b""
        async with oa.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="default", input=TEXT, response_format=fmt
        ) as resp:
            async for piece in resp.iter_bytes():
                arrivals.append(time.monotonic() - t0)
                body += piece
    ttfb, total = arrivals[0], arrivals[-1]
    print(f"\nTTFB {fmt}: {ttfb * 1000:.0f} ms (body complete at {total * 1000:.0f} ms, {len(arrivals)} pieces)")
    assert len(arrivals) >= 3 and ttfb < 0.5 * total  # streamed in pieces, the first well before the end
    pcm, rate = decode(body, fmt)
    assert len(pcm) / rate > 1.0


async def test_sse_stream_carries_base64_deltas_and_a_done_event(start_gateway):
    gw = await start_gateway()
    async with client(gw) as oa:
        async with oa.audio.speech.with_streaming_response.create(
            model="tts-1", voice="default", input=TEXT, response_format="wav", stream_format="sse"
        ) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = [json.loads(line[6:]) async for line in resp.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    pcm, rate = decode(audio, "wav")
    done = events[-1]
    assert done["model"] == "tts-1" and done["audio_ms"] == pytest.approx(len(pcm) * 1000 / rate, abs=1)
    assert done["usage"]["input_tokens"] == len(TEXT) and done["usage"]["output_tokens"] == -(-len(pcm) // 1920)


async def test_the_request_goes_through_the_calls_frontend_chunker_and_deadlines(start_gateway):
    gw = await start_gateway(VOICES)
    seen = record_requests(gw)
    async with client(gw) as oa:
        await oa.audio.speech.create(
            model="tts-1",
            voice="second",
            instructions="A calm, low voice.",
            response_format="pcm",
            input="I have 3 apples, said the man. Then he left the room quietly. He did not come back that day.",
        )
    texts = [r.text for r, _ in seen]
    assert len(texts) >= 3  # the chunker split it as it would a call's turn
    assert "three" in texts[0] and "3" not in " ".join(texts)  # the frontend normalised the number
    assert all(r.instruct == "A calm, low voice." and r.voice == "second" for r, _ in seen)
    # A chunk submitted once audio exists is due when a client playing that audio in real time would run dry,
    # not at once: the engine serves a request like a call with that much audio buffered.
    (first, first_at), _, (third, third_at) = seen[:3]
    assert first.deadline - first_at < 0.05
    assert third.deadline - third_at > 0.3


async def test_models_lists_what_serves(start_gateway):
    gw = await start_gateway(VOICES)
    async with client(gw) as oa:
        models = await oa.models.list()
    (model,) = models.data
    assert model.id == "voxgate-simulated" and model.owned_by == "voxgate"
    extra = model.model_extra["voxgate"]
    assert extra["voices"] == {"narrator": ["alloy", "Nova"], "second": []} and "opus" in extra["response_formats"]


@pytest.mark.parametrize(
    "kwargs,code,param",
    [
        ({"response_format": "ogg-vorbis"}, "unsupported_format", "response_format"),
        ({"speed": 1.5}, "unsupported_speed", "speed"),
        ({"speed": 9.0}, "bad_message", "speed"),
        ({"voice": "shimmer"}, "unknown_voice", "voice"),
        ({"input": "   "}, "bad_message", "input"),
        ({"extra_body": {"stream_format": "video"}}, "bad_message", "stream_format"),
        ({"extra_body": {"language": "english"}}, "bad_message", "language"),
    ],
)
async def test_bad_requests_get_openai_shaped_400s(start_gateway, kwargs, code, param):
    gw = await start_gateway(VOICES)
    args = {"model": "tts-1", "voice": "alloy", "input": "Hi there.", **kwargs}
    async with client(gw) as oa:
        with pytest.raises(openai.BadRequestError) as exc:
            await oa.audio.speech.create(**args)
    assert exc.value.status_code == 400
    assert exc.value.code == code and exc.value.param == param and exc.value.type == "invalid_request_error"
    assert len(gw.sessions) == 0


async def test_bodies_that_are_not_json_or_too_large(start_gateway):
    gw = await start_gateway({"server": {"limits": {"max_text_per_turn": 200}}})
    url = f"http://127.0.0.1:{gw.port}/v1/audio/speech"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=b"{nope") as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_json"
        async with http.post(url, json=["a list"]) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_message"
        async with http.post(url, data=b"x" * (gw.config.server.limits.max_message_bytes * 4 + 10)) as r:
            assert r.status == 413 and (await r.json())["error"]["code"] == "too_large"
        async with http.post(url, json={"model": "m", "input": "word " * 100}) as r:
            assert r.status == 413 and (await r.json())["error"]["code"] == "text_too_long"
        async with http.post(url, json={"model": "m\nX-Evil: 1", "input": "Hi."}) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "model"
    assert len(gw.sessions) == 0


async def test_a_missing_or_wrong_key_gets_401(start_gateway):
    gw = await start_gateway({"server": {"api_keys": ["right"]}})
    async with client(gw, "wrong") as oa:
        with pytest.raises(openai.AuthenticationError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="Hi.")
        assert (
            exc.value.status_code == 401
            and exc.value.code == "unauthorized"
            and exc.value.type == "authentication_error"
        )
        with pytest.raises(openai.AuthenticationError):
            await oa.models.list()
    async with aiohttp.ClientSession() as http:  # no Authorization header at all (the SDK always sends one)
        async with http.post(
            f"http://127.0.0.1:{gw.port}/v1/audio/speech", json={"model": "tts-1", "input": "Hi."}
        ) as r:
            assert r.status == 401 and (await r.json())["error"]["code"] == "unauthorized"
    async with client(gw, "right") as oa:
        resp = await oa.audio.speech.create(model="tts-1", voice="default", input="Hi there.", response_format="pcm")
        assert len(resp.content) > 0


async def test_a_full_engine_and_a_full_gateway_get_429(start_gateway):
    # The engine holds one request at a time and is slow to start it.
    gw = await start_gateway({"simulated": {"max_queued": 1, "first_packet_ms": 600}, "server": {"max_sessions": 2}})
    async with client(gw) as oa:
        first = asyncio.ensure_future(
            oa.audio.speech.create(model="tts-1", voice="default", input="Short one.", response_format="pcm")
        )
        await asyncio.sleep(0.2)
        with pytest.raises(openai.RateLimitError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="Another one.", response_format="pcm")
        assert exc.value.status_code == 429 and exc.value.code == "overloaded"
        assert exc.value.response.headers["retry-after"] == "1"
        # Two sessions open (a call and the speech request): the third thing gets at_capacity.
        from tests.conftest import Client

        call = await Client.connect(gw)
        await call.start()
        with pytest.raises(openai.RateLimitError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="A third.", response_format="pcm")
        assert exc.value.code == "at_capacity"
        assert len((await first).content) > 0  # the admitted request was served in full
        await call.close()


async def test_draining_refuses_new_requests_with_503_and_finishes_the_open_one(start_gateway):
    gw = await start_gateway({"simulated": {"stream_rtf": 0.5, "first_packet_ms": 30}})
    async with client(gw) as oa:
        open_one = asyncio.ensure_future(
            oa.audio.speech.create(model="tts-1", voice="default", input=TEXT, response_format="wav")
        )
        while not gw.sessions:
            await asyncio.sleep(0.01)
        drain = asyncio.ensure_future(gw.drain(timeout=20))
        await asyncio.sleep(0.05)
        with pytest.raises(openai.InternalServerError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="Too late.", response_format="wav")
        assert exc.value.status_code == 503 and exc.value.code == "shutting_down"
        body = (await open_one).content
        await drain
    pcm, rate = decode(body, "wav")
    assert len(pcm) / rate > 1.0  # the request that was in progress got all of its audio


async def test_a_client_that_goes_away_frees_its_session(start_gateway):
    gw = await start_gateway({"simulated": {"stream_rtf": 1.0, "first_packet_ms": 20}})
    async with client(gw) as oa:
        async with oa.audio.speech.with_streaming_response.create(
            model="tts-1", voice="default", input=TEXT * 3, response_format="pcm"
        ) as resp:
            async for _ in resp.iter_bytes():
                break  # hang up after the first bytes
    for _ in range(200):
        if not gw.sessions:
            break
        await asyncio.sleep(0.02)
    assert not gw.sessions and not gw.engine._jobs


async def test_aliases_answer_on_the_native_protocol_too_and_clashes_are_refused(start_gateway):
    from gateway.config import ConfigError, load_config
    from tests.conftest import Client

    gw = await start_gateway(VOICES)
    c = await Client.connect(gw)
    assert (await c.start(voice="nova"))["voice"] == "narrator"  # aliases match in any case
    await c.close()
    with pytest.raises(ConfigError, match="voices.b.aliases: 'ALLOY' is already the name or an alias of voice 'a'"):
        load_config(None, {"voices": {"a": {"aliases": ["alloy"]}, "b": {"aliases": ["ALLOY"]}}})
    with pytest.raises(ConfigError, match="voices.a.aliases: 'b'"):
        load_config(None, {"voices": {"a": {"aliases": ["b"]}, "b": {}}})


def fail_chunk(gw, index: int) -> None:
    """Fault injection on the real engine: the `index`-th text chunk it is given is refused."""
    from tts import EngineError

    real = gw.engine.synthesize
    count = iter(range(10**6))

    def faulty(request):
        if next(count) == index:
            raise EngineError("engine_error", "injected fault")
        return real(request)

    gw.engine.synthesize = faulty


LONG = "First sentence goes here. Second sentence follows it. Third sentence ends the reply. Fourth one, just in case."


async def test_a_chunk_failing_after_audio_went_out_cuts_an_audio_body_short(start_gateway):
    gw = await start_gateway({"simulated": {"stream_rtf": 0.3}})
    fail_chunk(gw, 2)
    got = b""
    async with client(gw) as oa:
        # The SDK hands the body to httpx as is: the client's transport reports the cut.
        with pytest.raises(Exception, match="incomplete chunked read"):
            async with oa.audio.speech.with_streaming_response.create(
                model="tts-1", voice="default", input=LONG, response_format="pcm"
            ) as resp:
                assert resp.status_code == 200
                async for piece in resp.iter_bytes():
                    got += piece
    assert len(got) > 0  # audio had gone out; the body then ended without its last chunk marker
    assert len(gw.sessions) == 0


async def test_a_chunk_failing_after_audio_went_out_ends_an_sse_body_with_an_error_event(start_gateway):
    gw = await start_gateway({"simulated": {"stream_rtf": 0.3}})
    fail_chunk(gw, 2)
    async with client(gw) as oa:
        async with oa.audio.speech.with_streaming_response.create(
            model="tts-1", voice="default", input=LONG, response_format="pcm", stream_format="sse"
        ) as resp:
            events = [json.loads(line[6:]) async for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "engine_error"
    assert not any(e["type"] == "speech.audio.done" for e in events)


async def test_a_first_chunk_failure_is_a_500_with_the_engines_code(start_gateway):
    gw = await start_gateway()
    fail_chunk(gw, 0)
    async with client(gw) as oa:
        with pytest.raises(openai.InternalServerError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="Hello there.", response_format="wav")
    assert exc.value.status_code == 500 and exc.value.code == "engine_error"


async def test_without_pyav_compressed_formats_get_a_clear_400_and_pcm_still_works(start_gateway, monkeypatch):
    import gateway.http.openai_speech as route

    monkeypatch.setattr(route, "containers_available", lambda: ("pcm", "wav"))  # as on an install without PyAV
    gw = await start_gateway()
    async with client(gw) as oa:
        with pytest.raises(openai.BadRequestError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="Hi.", response_format="mp3")
        assert exc.value.code == "unsupported_format" and "voxgate[speech]" in exc.value.message
        assert (
            len(
                (
                    await oa.audio.speech.create(
                        model="tts-1", voice="default", input="Hi there.", response_format="wav"
                    )
                ).content
            )
            > 44
        )


async def test_a_request_ends_at_max_call_s_like_a_call(start_gateway):
    gw = await start_gateway({"simulated": {"first_packet_ms": 3000}, "server": {"limits": {"max_call_s": 0.3}}})
    async with client(gw) as oa:
        with pytest.raises(openai.InternalServerError) as exc:
            await oa.audio.speech.create(model="tts-1", voice="default", input="Hello there.", response_format="pcm")
    assert exc.value.status_code == 504 and exc.value.code == "call_too_long"
    assert not gw.sessions and not gw.engine._jobs
