"""gateway.agent.stt against a local fake OpenAI-compatible transcription server."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.agent.stt import STT_ERROR, SttError, TranscriptionClient, UtteranceBuffer
from tests.voice.fake_stt import FakeTranscriptionServer


@pytest.fixture
async def fake():
    server = await FakeTranscriptionServer(text=" I want to change my booking. ").start()
    yield server
    await server.stop()


async def test_transcribes_an_utterance_as_a_16k_wav(fake, monkeypatch):
    monkeypatch.setenv("VOXGATE_TEST_STT_KEY", "sk-test")
    client = TranscriptionClient(fake.base_url, "whisper-large-v3", api_key_env="VOXGATE_TEST_STT_KEY", language="en")
    try:
        text = await client.transcribe(np.zeros(16000 * 3 // 2, np.int16))
    finally:
        await client.close()
    assert text == "I want to change my booking."
    (req,) = fake.requests
    assert req["model"] == "whisper-large-v3" and req["response_format"] == "json" and req["language"] == "en"
    assert req["rate"] == 16000 and req["channels"] == 1 and req["ms"] == pytest.approx(1500)
    assert req["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("kind", ["status", "not_json", "no_text", "timeout", "refused", "missing_key"])
async def test_every_failure_is_an_stt_error(kind, monkeypatch):
    server = FakeTranscriptionServer(
        status=500 if kind == "status" else 200,
        body={"not_json": "<html>oops</html>", "no_text": '{"segments": []}'}.get(kind),
        delay_s=2.0 if kind == "timeout" else 0.0,
    )
    await server.start()
    base = server.base_url
    if kind == "refused":
        await server.stop()
    monkeypatch.delenv("VOXGATE_TEST_STT_MISSING", raising=False)
    client = TranscriptionClient(
        base, "m", api_key_env="VOXGATE_TEST_STT_MISSING" if kind == "missing_key" else None, timeout_s=0.5
    )
    try:
        with pytest.raises(SttError) as info:
            await client.transcribe(np.zeros(8000, np.int16))
    finally:
        await client.close()
        await server.stop()
    assert info.value.code == STT_ERROR
    expected = {
        "status": "HTTP 500",
        "not_json": "no JSON",
        "no_text": "no string 'text'",
        "timeout": "did not answer",
        "refused": "failed",
        "missing_key": "not set",
    }[kind]
    assert expected in info.value.message
    assert client.failures == 1


def test_utterance_buffer_cuts_by_absolute_sample_index():
    buf = UtteranceBuffer(keep_s=1.0, sample_rate=1000)
    ramp = np.arange(2500, dtype=np.int16)
    for i in range(0, 2500, 300):
        buf.push(ramp[i : i + 300])
    assert buf.samples == 2500
    np.testing.assert_array_equal(buf.cut(2000, 2100), ramp[2000:2100])
    np.testing.assert_array_equal(buf.cut(1000, 2500), ramp[1500:2500])  # older than keep_s is gone
    assert len(buf.cut(2600, 2700)) == 0
