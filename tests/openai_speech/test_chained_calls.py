"""Calls spoken through `engine.kind: openai-speech`, the upstream a real `voxgate serve` in another process
(its OpenAI-compatible `POST /v1/audio/speech`): a native WebSocket call, a Twilio call, the OpenAI route itself
(voxgate chained to voxgate), and an interrupt that really closes the upstream request."""

from __future__ import annotations

import asyncio
import base64
import time

import aiohttp
import numpy as np

from audio.g711 import ulaw_decode
from tests.conftest import Client
from tests.openai_speech.servers import SLOW_SIM
from tests.telephony.clients import Control, TwilioClient

TEXT = "Hello there. This call is spoken by another server, chunk by chunk."
LONG = (
    "This turn is long enough to be interrupted while its second chunk still streams from the server and "
    "the server makes its audio no faster than real time so that the chunk takes many seconds to finish. "
)
REAL_TIME_SIM = {**SLOW_SIM, "stream_rtf": 1.0}  # each request's audio made at real time: a chunk streams for seconds


async def wait_for(predicate, timeout: float = 5.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await asyncio.sleep(step)
    return await asyncio.to_thread(predicate)


async def test_native_ws_call_plays_whole_turns_with_marks_and_no_gaps(speech_servers, chained_gateway):
    up = await speech_servers("up")
    gw = await chained_gateway([up.base])
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    start = await c.until("audio.start")
    done = await c.until("turn.done")
    marks = [m for _, m in c.events if m["type"] == "mark"]
    assert start["turn_id"] == "t1" and start["ttfa_ms"] > 0
    assert done["interrupted"] is False and done["gaps"] == {"micro": 0, "audible": 0}
    assert done["played_text"] == TEXT
    assert [m["chunk"] for m in marks] == list(range(len(marks))) and len(marks) >= 2  # several chunks, in order
    audio = np.frombuffer(b"".join(f for _, f in c.frames), "<i2")
    assert len(audio) / 24000 >= done["played_ms"] / 1000 - 0.05 and np.abs(audio).max() > 1000
    # the upstream answered one speech request per text chunk
    assert up.metric('voxgate_sessions_total{leg="openai"}') == len(marks)
    (ep,) = gw.engine.endpoint_stats()
    assert ep["up"] and ep["in_flight"] == 0 and ep["ttfb_count"] == len(marks) and not ep["errors"]
    await c.ws.close()


async def test_interrupt_closes_the_upstream_request_and_reports_what_played(speech_servers, chained_gateway):
    up = await speech_servers("slow", REAL_TIME_SIM)
    gw = await chained_gateway([up.base])
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
    await c.until("audio.start")
    await asyncio.sleep(0.3)
    assert await wait_for(lambda: up.in_flight() >= 1)  # the upstream is still answering the chunk
    await c.send({"type": "interrupt"})
    done = await c.until("turn.done")
    assert done["interrupted"] is True and 0 < done["played_ms"] < 2000
    assert LONG.startswith(done["played_text"].rstrip(".")) and len(done["played_text"]) < len(LONG)
    # the upstream saw the disconnect: its own count of requests in flight goes back to 0 long before the second
    # chunk (about 8 s of audio made at real time) would have ended
    t0 = time.monotonic()
    assert await wait_for(lambda: up.in_flight() == 0, timeout=2.0), "the upstream request was not closed"
    closed_after = time.monotonic() - t0
    assert gw.engine.stats()["active"] == 0 and gw.engine.counters["cancelled"] >= 1
    print(f"\nupstream in-flight back to 0 {closed_after * 1000:.0f} ms after turn.done")
    await c.ws.close()


async def test_twilio_call_speaks_through_the_speech_server(speech_servers, chained_gateway):
    up = await speech_servers("up")
    gw = await chained_gateway([up.base])
    control = await Control.connect(gw)
    await control.attach("call-os")
    tw = await TwilioClient.connect(gw)
    await tw.start(params={"call_id": "call-os"})
    assert (await control.expect("call.media"))["state"] == "connected"
    tw.echo_marks(0.05)  # played, as Twilio confirms
    await control.send({"type": "text", "turn_id": "t1", "text": "Hello there caller.", "final": True})
    done = await control.expect("turn.done", turn_id="t1", timeout=10)
    assert done["interrupted"] is False and done["played_text"] == "Hello there caller."
    frames = []
    while not tw._inbox.empty():
        msg, _ = tw._inbox.get_nowait()
        if msg["event"] == "media":
            frames.append(base64.b64decode(msg["media"]["payload"]))
    assert len(frames) >= 10 and all(len(f) == 160 for f in frames)  # 20 ms μ-law at 8 kHz, resampled from 24 kHz
    assert any(np.abs(ulaw_decode(f).astype(int)).max() > 1000 for f in frames)
    assert len(tw.marks_echoed) >= 1
    await tw.stop()
    await control.expect("session.ended")
    await control.close()


async def test_openai_route_chained_to_another_voxgate(speech_servers, chained_gateway):
    up = await speech_servers("up")
    gw = await chained_gateway([up.base])
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{gw.port}/v1/audio/speech",
            json={"model": "tts-1", "input": TEXT, "response_format": "pcm"},
        ) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["X-Voxgate-Served-By"] == "voxgate-openai-speech"
            body = await resp.read()
        pcm = np.frombuffer(body, "<i2").astype(np.float32) / 32768
        assert len(pcm) / 24000 > 1.0 and np.sqrt(np.mean(pcm**2)) > 0.01
        async with http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp:
            ready = await resp.json()
    assert ready["ready"] and ready["engine"] == "openai-speech"
    assert ready["endpoints"] == [
        {
            "endpoint": up.base,
            "up": True,
            "suspect": False,
            "why_down": None,
            "in_flight": 0,
            "ttfb_p50_ms": ready["endpoints"][0]["ttfb_p50_ms"],
        }
    ]
    assert up.metric('voxgate_sessions_total{leg="openai"}') >= 2  # the downstream's chunks, each one request


def reference_wav(seconds: float = 2.0, rate: int = 16000) -> bytes:
    import io
    import wave

    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 180 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


async def test_an_uploaded_voice_becomes_the_speech_servers_reference_and_speaks(speech_servers, chained_gateway):
    up = await speech_servers("clones")
    gw = await chained_gateway([up.base])
    async with aiohttp.ClientSession() as http:
        form = aiohttp.FormData()
        form.add_field("name", "mine")
        form.add_field("audio", reference_wav(), filename="ref.wav", content_type="audio/wav")
        form.add_field("ref_text", "The words of the reference.")
        async with http.post(f"http://127.0.0.1:{gw.port}/v1/voices", data=form) as resp:
            assert resp.status == 201, await resp.text()
        async with http.get(f"{up.base}/voices") as resp:  # the upstream holds the recording now
            listed = {v["name"]: v for v in (await resp.json())["voices"]}
    assert listed["mine"]["kind"] == "clone_icl"
    c = await Client.connect(gw)
    await c.start(voice="mine")
    await c.send({"type": "text", "turn_id": "t1", "text": "Spoken with the uploaded voice.", "final": True})
    done = await c.until("turn.done")
    assert done["played_text"] == "Spoken with the uploaded voice." and done["played_ms"] > 500
    await c.ws.close()


async def test_a_tiny_qwen3_speech_server_speaks_a_call_and_the_openai_route(tmp_path, chained_gateway):
    from tests.openai_speech.servers import SpeechServer
    from tts.qwen3.tools import ensure_tiny_model

    up = SpeechServer(
        tmp_path,
        "qwen3",
        {"engine": {"kind": "qwen3", "model_dir": ensure_tiny_model(), "dtype": "float32", "device": "cpu"}},
    ).start()
    try:
        await up.wait_ready(180)
        gw = await chained_gateway([up.base])
        c = await Client.connect(gw)
        await c.start(output={"encoding": "pcm16", "sample_rate": 16000})
        await c.send({"type": "text", "turn_id": "t1", "text": "Hello there.", "final": True})
        await c.until("audio.start", timeout=60)
        await asyncio.sleep(0.5)  # random weights speak until the frame cap: cut it short
        await c.send({"type": "interrupt"})
        done = await c.until("turn.done", timeout=10)
        assert done["interrupted"] is True and done["played_ms"] >= 400
        audio = np.frombuffer(b"".join(f for _, f in c.frames), "<i2")
        assert len(audio) >= 0.4 * 16000 and np.abs(audio).max() > 0
        assert await wait_for(lambda: up.in_flight() == 0, timeout=3.0)  # the qwen3 server's request was closed too
        await c.ws.close()
        async with aiohttp.ClientSession() as http:  # the OpenAI route, chained: its first audio, then hang up
            async with http.post(
                f"http://127.0.0.1:{gw.port}/v1/audio/speech",
                json={"model": "tts-1", "input": "Hi.", "response_format": "wav"},
            ) as resp:
                assert resp.status == 200, await resp.text()
                head = await resp.content.readexactly(44 + 3200)
        assert head[:4] == b"RIFF"
        assert await wait_for(lambda: up.in_flight() == 0, timeout=5.0)
    finally:
        up.stop()


async def test_word_timings_through_a_speech_server_are_the_estimate(speech_servers, chained_gateway):
    # A streamed `POST /v1/audio/speech` carries audio only (vLLM-Omni 0.30.0 refuses `word_timestamps` with
    # `stream: true`; docs/speech-servers.md#word-timings), so the engine's chunks carry no words and the session's
    # estimate times every word.
    up = await speech_servers("up")
    gw = await chained_gateway([up.base])
    c = await Client.connect(gw)
    await c.start(word_timings=True)
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    done = await c.until("turn.done")
    events = c.of_type("audio.words")
    assert [w["text"] for e in events for w in e["words"]] == TEXT.split()  # every word once, as written
    assert {e["source"] for e in events} == {"estimate"} and done["timing_source"] == "estimate"
    await c.ws.close()
