"""Cloned voices through a real gateway on loopback with a tiny Qwen3-TTS Base checkpoint on CPU:
uploaded with POST /v1/voices, spoken on a native-WS call and a Twilio call, listed, deleted,
and still there after a restart (a new Gateway on the same server.voices_dir)."""

from __future__ import annotations

import base64
import os

import aiohttp
import numpy as np
import pytest

from audio.g711 import ulaw_decode
from gateway.app import Gateway
from gateway.config import ConfigError, load_config
from tests.conftest import Client
from tests.qwen3.clone_audio import speech_like, write_wav
from tests.telephony.clients import Control, TwilioClient
from tts.qwen3.engine import EngineSettings, Qwen3Engine

REF_TEXT = "Hello, this is my voice."
KEY = "k-test"


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("gw_base"))
    make_tiny_model(d, variant="0b6", kind="base", seed=6)
    return d


@pytest.fixture(scope="module")
def ref_bytes(tmp_path_factory):
    d = tmp_path_factory.mktemp("gw_refs")
    with open(write_wav(d / "ref.wav", speech_like(1.5, 16000, seed=2), 16000), "rb") as f:
        return f.read()


def _config(base_dir, voices_dir, **extra):
    return load_config(
        None,
        {
            "server": {
                "host": "127.0.0.1",
                "port": 0,
                "voices_dir": str(voices_dir),
                "api_keys": [KEY],
                "voice_upload_max_bytes": 200_000,
            },
            "engine": {"kind": "qwen3", "model_dir": base_dir, "device": "cpu", "dtype": "float32"},
            "playout": {"prebuffer_ms": 40},
            # the test's Twilio far end does not sign its requests
            "telephony": {"unknown_call_timeout_s": 5, "twilio_allow_unsigned": True, **extra.pop("telephony", {})},
            **extra,
        },
    )


async def _gateway(base_dir, voices_dir, **extra) -> Gateway:
    cfg = _config(base_dir, voices_dir, **extra)
    # short caps: random weights rarely say EOS, and playout runs in real time
    engine = Qwen3Engine(
        EngineSettings(
            model_dir=base_dir,
            device="cpu",
            dtype="float32",
            max_batch=2,
            max_seq_len=256,
            frames_base=4,
            frames_per_token=0.2,
            voice_cache_dir=os.path.join(str(voices_dir), "cache"),
        )
    )
    gw = Gateway(cfg, engine=engine)
    await gw.start(host="127.0.0.1", port=0)
    return gw


def _form(name, audio, ref_text=REF_TEXT, x_vector_only=None):
    form = aiohttp.FormData()
    if name is not None:
        form.add_field("name", name)
    if audio is not None:
        form.add_field("audio", audio, filename="ref.wav", content_type="audio/wav")
    if ref_text is not None:
        form.add_field("ref_text", ref_text)
    if x_vector_only is not None:
        form.add_field("x_vector_only", x_vector_only)
    return form


async def _post(gw, form, key=KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{gw.port}/v1/voices", data=form, headers=headers) as r:
            return r.status, await r.json()


async def _get(gw):
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{gw.port}/v1/voices") as r:
            return {v["name"]: v for v in (await r.json())["voices"]}


async def _native_call(gw, voice):
    c = await Client.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    await c.start(voice=voice)
    await c.send({"type": "text", "turn_id": "t1", "text": "Hello there.", "final": True})
    done = await c.until("turn.done", timeout=60)
    await c.close()
    pcm = np.frombuffer(b"".join(f for _, f in c.frames), dtype="<i2")
    return done, pcm


async def test_uploaded_voice_speaks_on_native_ws_and_twilio_and_survives_a_restart(base_dir, ref_bytes, tmp_path):
    voices_dir = tmp_path / "voices"
    gw = await _gateway(base_dir, voices_dir)
    try:
        status, info = await _post(gw, _form("anna", ref_bytes))
        assert status == 201, info
        assert info["name"] == "anna" and info["kind"] == "clone_icl" and info["source"] == "uploaded"
        assert info["ref_frames"] == -(-int(1.5 * 24000) // 1920)
        listed = await _get(gw)
        assert listed["anna"]["kind"] == "clone_icl" and listed["default"]["kind"] == "default"
        assert os.path.isfile(voices_dir / "anna" / "ref.wav") and os.path.isfile(voices_dir / "anna" / "voice.json")

        done, pcm = await _native_call(gw, "anna")
        assert done["interrupted"] is False and done["played_ms"] >= 200
        assert np.abs(pcm).max() > 100  # it spoke

        # Twilio: the agent attaches by call id with the voice, Twilio's media stream joins
        control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
        await control.attach("call-7", voice="anna")
        tw = await TwilioClient.connect(gw, call_sid="CA7")
        await tw.start(params={"call_id": "call-7"})
        assert (await control.expect("call.media", timeout=10))["state"] == "connected"
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello caller.", "final": True})
        payloads = []
        while True:
            msg, _ = await tw.recv(timeout=60)
            if msg["event"] == "media":
                payloads.append(base64.b64decode(msg["media"]["payload"]))
            elif msg["event"] == "mark":
                break
        assert payloads and np.abs(ulaw_decode(b"".join(payloads)).astype(int)).max() > 100
        await tw.stop()
        await control.close()
    finally:
        await gw.stop()

    again = await _gateway(base_dir, voices_dir)  # a restart on the same voices_dir
    try:
        listed = await _get(again)
        assert listed["anna"]["source"] == "uploaded" and listed["anna"]["ref_text"] == REF_TEXT
        assert again.engine.cloned_voices()[0]["source"] == "disk"  # its parts came from the disk cache
        done, pcm = await _native_call(again, "anna")
        assert done["played_ms"] >= 200 and np.abs(pcm).max() > 100
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{again.port}/v1/voices/anna"
            async with http.delete(url) as r:
                assert r.status == 401
            async with http.delete(url, headers={"Authorization": f"Bearer {KEY}"}) as r:
                assert r.status == 200
            async with http.delete(url, headers={"Authorization": f"Bearer {KEY}"}) as r:
                assert r.status == 404 and (await r.json())["code"] == "unknown_voice"
        assert "anna" not in await _get(again) and not os.path.exists(voices_dir / "anna")
    finally:
        await again.stop()


async def test_voices_cloned_from_mp3_and_webm_opus_speak_and_survive_a_restart(base_dir, tmp_path):
    """A phone's MP3 and a browser's WebM/Opus recording (MediaRecorder's default), encoded from a known signal."""
    pytest.importorskip("av", reason="PyAV (the speech extra) decodes and encodes MP3 and WebM/Opus")
    from audio.reference import load_reference
    from tests.voices.encoded_audio import encode

    uploads = {
        "mp3": encode(speech_like(1.5, 44100, seed=3), "mp3"),
        "webm": encode(speech_like(1.5, 48000, seed=4), "webm_opus"),
    }
    assert uploads["mp3"][:3] == b"ID3" or uploads["mp3"][0] == 0xFF
    assert uploads["webm"][:4] == b"\x1a\x45\xdf\xa3"
    voices_dir = tmp_path / "voices"
    gw = await _gateway(base_dir, voices_dir)
    try:
        for ext, data in uploads.items():
            form = aiohttp.FormData()
            form.add_field("name", f"from_{ext}")
            form.add_field("audio", data, filename=f"ref.{ext}", content_type="audio/" + ext)
            form.add_field("ref_text", REF_TEXT)
            status, info = await _post(gw, form)
            assert status == 201 and info["kind"] == "clone_icl", info
            assert info["ref_frames"] == -(-round(load_reference(data).duration_s * 24000) // 1920)
            assert (voices_dir / f"from_{ext}" / f"ref.{ext}").read_bytes() == data  # kept as uploaded
            done, pcm = await _native_call(gw, f"from_{ext}")
            assert done["interrupted"] is False and done["played_ms"] >= 200 and np.abs(pcm).max() > 100
    finally:
        await gw.stop()
    again = await _gateway(base_dir, voices_dir)
    try:
        listed = await _get(again)
        assert listed["from_mp3"]["source"] == listed["from_webm"]["source"] == "uploaded"
        done, pcm = await _native_call(again, "from_webm")
        assert done["played_ms"] >= 200 and np.abs(pcm).max() > 100
    finally:
        await again.stop()


async def test_bad_uploads_get_clear_errors_and_never_reach_the_engine(base_dir, ref_bytes, tmp_path, monkeypatch):
    gw = await _gateway(base_dir, tmp_path / "voices")
    calls = []
    real_add = gw.engine.add_voice

    async def counting_add(voice):
        calls.append(voice.name)
        return await real_add(voice)

    monkeypatch.setattr(gw.engine, "add_voice", counting_add)
    silent = write_wav(tmp_path / "silent.wav", np.zeros(32000, np.float32), 16000)
    short = write_wav(tmp_path / "short.wav", speech_like(0.2, 16000), 16000)
    try:
        cases = [
            (_form("x", open(silent, "rb").read()), 400, "bad_audio", "silent"),
            (_form("x", open(short, "rb").read()), 400, "bad_audio", "at least 1 s"),
            (_form("x", b"GIF89a not a recording"), 400, "bad_audio", "not a WAV"),
            (_form("x", b"OggS" + bytes(range(256)) * 4), 400, "bad_audio", "Ogg file cannot be decoded"),
            (_form("x", ref_bytes[:40]), 400, "bad_audio", "no data chunk"),
            (_form("x", ref_bytes + b"\0" * 200_000), 413, "too_large", "voice_upload_max_bytes"),
            (_form("x", ref_bytes, ref_text=None), 400, "bad_voice", "ref_text"),
            (_form(None, ref_bytes), 400, "bad_message", "name"),
            (_form("bad name!", ref_bytes), 400, "bad_message", "name"),
            (_form("x", None), 400, "bad_message", "audio"),
            (_form("x", ref_bytes, x_vector_only="maybe"), 400, "bad_message", "x_vector_only"),
            (_form("default", ref_bytes), 409, "voice_exists", "configured"),
        ]
        for form, status, code, words in cases:
            got, body = await _post(gw, form)
            assert (got, body["code"]) == (status, code) and words in body["message"], body
        assert calls == []  # none of them reached the engine
        got, body = await _post(gw, _form("x", ref_bytes), key="wrong")
        assert got == 401 and body["code"] == "unauthorized"
        got, body = await _post(gw, _form("xv", ref_bytes, ref_text=None, x_vector_only="true"))
        assert got == 201 and body["kind"] == "clone_xvector" and calls == ["xv"]
        got, body = await _post(gw, _form("xv", ref_bytes))
        assert got == 409 and body["code"] == "voice_exists"
    finally:
        await gw.stop()


def test_config_voice_with_a_bad_reference_refuses_to_load(base_dir, ref_bytes, tmp_path):
    good = tmp_path / "ref.wav"
    good.write_bytes(ref_bytes)
    silent = write_wav(tmp_path / "silent.wav", np.zeros(32000, np.float32), 16000)
    for voice, words in (
        ({"ref_audio": str(tmp_path / "missing.wav"), "ref_text": "Hi"}, "file not found"),
        ({"ref_audio": silent, "ref_text": "Hi"}, "silent"),
        ({"ref_audio": str(good)}, "ref_text"),
    ):
        with pytest.raises(ConfigError) as e:
            _config(base_dir, tmp_path / "v", voices={"anna": voice})
        assert "voices.anna." in str(e.value) and words in str(e.value)
    cfg_file = tmp_path / "gw.yaml"
    cfg_file.write_text("voices:\n  anna:\n    ref_audio: ref.wav\n    x_vector_only: true\n")
    assert load_config(str(cfg_file)).voices["anna"].ref_audio == str(good)  # found from the config's folder


async def test_config_voice_is_served_by_name_on_native_ws_and_audiosocket(base_dir, ref_bytes, tmp_path):
    import uuid

    from gateway.wire import audiosocket as wire
    from tests.telephony.clients import AudioSocketClient

    good = tmp_path / "ref.wav"
    good.write_bytes(ref_bytes)
    gw = await _gateway(
        base_dir,
        tmp_path / "voices",
        voices={"olga": {"ref_audio": str(good), "ref_text": REF_TEXT, "language": "ru"}},
        telephony={"audiosocket_port": 0, "unknown_call_timeout_s": 5},
    )
    try:
        assert (await _get(gw))["olga"] == {**(await _get(gw))["olga"], "kind": "clone_icl", "source": "config"}
        done, pcm = await _native_call(gw, "olga")
        assert done["played_ms"] >= 200 and np.abs(pcm).max() > 100
        call = uuid.uuid4()
        control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
        await control.attach(str(call), voice="olga")
        client = await AudioSocketClient.connect(gw, call)
        assert (await control.expect("call.media", timeout=10))["leg"] == "audiosocket"
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello caller.", "final": True})
        loudest = 0
        for _ in range(1500):  # the gateway owns the clock: silence until the cloned voice speaks
            kind, payload, _ = await client.read(timeout=30)
            if kind == wire.KIND_SLIN:
                loudest = max(loudest, int(np.abs(np.frombuffer(payload, "<i2")).max()))
                if loudest > 100:
                    break
        assert loudest > 100
        assert (await control.expect("turn.done", turn_id="t1", timeout=60))["played_ms"] >= 200
        client.close()
        await control.close()
        async with aiohttp.ClientSession() as http:
            async with http.delete(
                f"http://127.0.0.1:{gw.port}/v1/voices/olga", headers={"Authorization": f"Bearer {KEY}"}
            ) as r:
                assert r.status == 409 and (await r.json())["code"] == "voice_readonly"
    finally:
        await gw.stop()
