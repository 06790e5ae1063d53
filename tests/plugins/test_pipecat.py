"""voxgate-pipecat in a real Pipecat pipeline against a real voxgate (tests/plugins/pipecat_scenario.py)."""

from tests.plugins.conftest import capture_words, plugin_venv, run_scenario

pipecat_venv = plugin_venv("voxgate_pipecat")

SHORT = "Hello there, thanks for calling. Your order shipped yesterday. It arrives on Friday."
# Audio is made at half real time, so the engine is still speaking when the pipeline barges in.
ENGINE = {"simulated": {"ms_per_char": 35, "stream_rtf": 0.5}}


async def test_token_stream_becomes_audio_and_word_frames_that_join_to_the_text(start_gateway, pipecat_venv):
    gw = await start_gateway(ENGINE)
    out = await run_scenario(
        "pipecat_scenario.py", f"http://127.0.0.1:{gw.port}", "stream,interrupt,reconnect", "voxgate", SHORT
    )

    stream = out["stream"]
    assert stream["started"] == 1 and stream["stopped"] == 1  # one TTSStartedFrame / TTSStoppedFrame for the reply
    assert stream["audio_ms"] > 2000 and stream["played_ms"] >= stream["audio_ms"] - 40
    assert " ".join(stream["tts_texts"]).split() == SHORT.split()  # TTSTextFrames, word by word, as they played
    assert stream["context"].split() == SHORT.split()

    cut = out["interrupt"]
    assert cut["played_at_interrupt_ms"] >= 1000
    assert cut["audio_frames_after_interrupt"] == 0  # the service stops at once
    assert cut["played_frames_after_interrupt"] == 0  # and nothing of the reply plays afterwards
    assert cut["gateway_turns_interrupted"] >= 1  # voxgate was told (interrupt), not left synthesising
    text = cut["text"]
    assert cut["context"], "the words played before the barge-in belong in the context"
    assert text.startswith(cut["context"]) and len(cut["context"]) < len(text) // 2  # the cut text, not the reply

    again = out["reconnect"]
    assert again["first_reply_audio_frames"] > 0 and again["second_reply_audio_frames"] > 0  # spoke after the drop
    assert again["sessions"][0] != again["sessions"][1]  # on a new voxgate session
    assert " ".join(again["second_reply_texts"]).split() == SHORT.split()


async def test_word_frames_carry_the_engines_word_times_and_an_interruption_keeps_the_heard_words(
    start_gateway, pipecat_venv, monkeypatch
):
    words = capture_words(monkeypatch)
    gw = await start_gateway({"engine": {"kind": "espeak"}})
    out = await run_scenario("pipecat_scenario.py", f"http://127.0.0.1:{gw.port}", "stream", "voxgate", SHORT)
    stream = out["stream"]
    sent = [w for e in words for w in e["words"]]
    assert {e["source"] for e in words} == {"engine"} and [w["text"] for w in sent] == SHORT.split()
    # a word-timestamp service: each TTSTextFrame's presentation time is the gateway's start of that word
    assert [text for text, _ in stream["word_pts"]] == [w["text"] for w in sent]
    base = stream["word_pts"][0][1] - sent[0]["start_ms"] * 1e6
    off_ns = [abs(pts - base - w["start_ms"] * 1e6) for (_, pts), w in zip(stream["word_pts"], sent)]
    assert max(off_ns) < 1000  # the same times, to Pipecat's nanosecond rounding
    assert stream["context"].split() == SHORT.split()

    words.clear()
    cut = (await run_scenario("pipecat_scenario.py", f"http://127.0.0.1:{gw.port}", "interrupt", "voxgate"))[
        "interrupt"
    ]
    spoken = [w for e in words for w in e["words"]]
    started = [w["text"] for w in spoken if w["start_ms"] <= cut["played_at_interrupt_ms"]]
    context = cut["context"].split()
    # Pipecat's context keeps the words presented before the barge-in: those whose start had played
    assert context and cut["text"].split()[: len(context)] == context
    assert abs(len(context) - len(started)) <= 1, (context, started)
