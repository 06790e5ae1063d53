"""livekit-plugins-voxgate through LiveKit Agents' TTS API against a real voxgate (tests/plugins/livekit_scenario.py)."""

from tests.plugins.conftest import capture_words, plugin_venv, run_scenario

livekit_venv = plugin_venv("livekit.plugins.voxgate")

SHORT = "Hello there, thanks for calling. Your order shipped yesterday. It arrives on Friday."
ENGINE = {"simulated": {"ms_per_char": 35, "stream_rtf": 0.5}}


async def test_stream_synthesize_and_cancel(start_gateway, livekit_venv):
    gw = await start_gateway(ENGINE)
    url = f"http://127.0.0.1:{gw.port}"
    out = await run_scenario("livekit_scenario.py", url, "stream,synthesize,cancel,reconnect,agent", "voxgate", SHORT)

    for mode in ("stream", "synthesize"):
        r = out[mode]
        assert r["capabilities"] == {"streaming": True, "aligned_transcript": True}
        assert r["audio_ms"] > 2000, mode
        assert "".join(r["words"]).split() == SHORT.split(), mode  # the aligned transcript covers the text

    cancel = out["cancel"]
    assert 0 < cancel["audio_ms"] < 2000  # the reply was cut short
    assert cancel["sessions_active_after_cancel"] == 0  # closing the stream ended its voxgate session
    first, second = out["reconnect"]["audio_ms"]
    assert first > 2000 and abs(second - first) < 100  # a dropped pooled session is replaced, not used
    agent = out["agent"]  # AgentSession(tts=voxgate.TTS(...)).say(...), in place of the OpenAI plugin
    assert agent["played_ms"] > 2000 and agent["history"] == [SHORT]
    assert len(gw.core.sessions) == 0


async def test_the_aligned_transcript_carries_the_engines_word_times(start_gateway, livekit_venv, monkeypatch):
    words = capture_words(monkeypatch)
    gw = await start_gateway({"engine": {"kind": "espeak"}})
    out = await run_scenario("livekit_scenario.py", f"http://127.0.0.1:{gw.port}", "stream", "voxgate", SHORT)
    sent = [w for e in words for w in e["words"]]
    assert {e["source"] for e in words} == {"engine"} and [w["text"] for w in sent] == SHORT.split()
    assert out["stream"]["timed"] == [[w["text"] + " ", w["start_ms"] / 1000, w["end_ms"] / 1000] for w in sent]
