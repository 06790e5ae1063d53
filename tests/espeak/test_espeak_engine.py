"""The eSpeak NG demo voice speaks real audio, follows the language, and cancels."""

from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest

from tts.engine import SAMPLE_RATE, EngineError, SynthesisRequest
from tts.espeak_engine import EspeakEngine, espeak_available, language_of, resample

needs_espeak = pytest.mark.skipif(
    not espeak_available(), reason="espeakng-loader (the optional 'espeak' extra) is not installed"
)


@pytest.fixture
async def engine():
    eng = EspeakEngine()
    await eng.start()
    yield eng
    await eng.close()


async def speak(engine: EspeakEngine, text: str, **kw) -> np.ndarray:
    chunks = [c async for c in engine.synthesize(SynthesisRequest(text=text, **kw))]
    assert chunks and chunks[-1].is_last
    return np.concatenate([c.pcm for c in chunks])


def frame_energies(pcm: np.ndarray) -> np.ndarray:
    n = len(pcm) // 480
    return np.sqrt(np.mean(pcm[: n * 480].reshape(n, 480) ** 2, axis=1))


@needs_espeak
async def test_english_sentence_is_speech_of_plausible_length(engine):
    pcm = await speak(engine, "Hello there. This is a test of the voice gateway.", language="en")
    assert pcm.dtype == np.float32
    seconds = len(pcm) / SAMPLE_RATE
    assert 1.5 < seconds < 6.0  # ten words at about 175 words per minute
    energies = frame_energies(pcm)
    voiced = np.mean(energies > 0.02)
    assert 0.4 < voiced < 0.99  # mostly sound, with the pause between sentences
    spectrum = np.abs(np.fft.rfft(pcm)) ** 2
    freqs = np.fft.rfftfreq(len(pcm), 1 / SAMPLE_RATE)
    speech_band = spectrum[(freqs > 80) & (freqs < 4000)].sum() / spectrum.sum()
    assert speech_band > 0.7
    assert np.abs(pcm).max() <= 1.0


@needs_espeak
async def test_cyrillic_text_is_spoken_with_the_russian_voice(engine):
    assert language_of("Привет, как дела?") == "ru"
    assert engine.voice_for(SynthesisRequest(text="Привет, как дела?")) == "ru"
    assert engine.voice_for(SynthesisRequest(text="Hello", language="auto")) == "en-us"
    pcm = await speak(engine, "Привет! Это проверка голоса.")
    assert 0.8 < len(pcm) / SAMPLE_RATE < 5.0
    assert np.mean(frame_energies(pcm) > 0.02) > 0.4


@needs_espeak
async def test_unsupported_language_fails_the_request_not_the_engine(engine):
    with pytest.raises(EngineError) as err:
        await speak(engine, "Hej", language="sv")
    assert err.value.code == "unsupported_language"
    assert len(await speak(engine, "Still here.")) > SAMPLE_RATE // 4


@needs_espeak
async def test_cancel_stops_synthesis_midway_and_the_next_request_still_plays(engine):
    long_text = "This sentence is repeated to keep the synthesiser busy for a while. " * 400
    stream = engine.synthesize(SynthesisRequest(text=long_text, language="en"))
    for _ in range(2000):  # wait until the worker is inside eSpeak with this request
        if engine.stats()["active"]:
            break
        await asyncio.sleep(0.001)
    stream.cancel()
    assert [c async for c in stream] == []
    pcm = await speak(engine, "Next turn.", language="en")
    assert len(pcm) > SAMPLE_RATE // 4
    assert engine.stats()["aborted"] == 1


@needs_espeak
async def test_cancel_of_a_queued_request_delivers_nothing(engine):
    streams = [engine.synthesize(SynthesisRequest(text=f"Sentence number {i}.", language="en")) for i in range(5)]
    for s in streams[1:]:
        s.cancel()
    assert len([c async for c in streams[0]]) == 1
    for s in streams[1:]:
        assert [c async for c in s] == []


def test_resample_keeps_a_tone_frequency_and_level():
    src = 22_050
    t = np.arange(src) / src
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    out = resample(tone, src, SAMPLE_RATE)
    assert len(out) == SAMPLE_RATE
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(np.argmax(spectrum) - 1000) <= 1  # 1 Hz bins over one second
    mid = out[1000:-1000]
    assert abs(np.sqrt(np.mean(mid**2)) - 0.5 / np.sqrt(2)) < 0.01


def test_missing_package_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # import now raises ImportError
    with pytest.raises(EngineError) as err:
        EspeakEngine()
    assert err.value.code == "engine_unavailable"
    assert "espeak" in err.value.message and "GPL" in err.value.message


@needs_espeak
async def test_every_offered_language_has_a_voice(engine):
    samples = {"de": "Guten Tag.", "fr": "Bonjour.", "zh": "你好。", "ja": "こんにちは。"}
    for language, text in samples.items():
        assert len(await speak(engine, text, language=language)) > SAMPLE_RATE // 10


@needs_espeak
def test_auto_engine_without_weights_is_the_espeak_voice(monkeypatch):
    from gateway.app import engine_choice
    from gateway.config import load_config
    from tts import build_engine

    monkeypatch.delenv("VOXGATE_MODEL_DIR", raising=False)
    engine = build_engine(engine_choice(load_config(None, {"engine": {"kind": "auto"}})))
    assert isinstance(engine, EspeakEngine)


@needs_espeak
async def test_close_ends_every_open_stream():
    engine = EspeakEngine()
    await engine.start()
    long_text = "A long text keeps the worker busy for a moment. " * 400
    streams = [engine.synthesize(SynthesisRequest(text=long_text, language="en")) for _ in range(3)]
    await engine.close()

    async def drain(stream) -> None:
        try:
            async for _ in stream:
                pass
        except EngineError as exc:
            assert exc.code == "internal"

    for stream in streams:
        await asyncio.wait_for(drain(stream), 5)  # would hang if close left it open
        assert stream.done


@needs_espeak
async def test_the_earliest_deadline_is_spoken_first(engine):
    busy = engine.synthesize(SynthesisRequest(text="Keep the worker busy for a moment. " * 30, language="en"))
    for _ in range(2000):
        if engine.stats()["active"]:
            break
        await asyncio.sleep(0.001)
    late = engine.synthesize(SynthesisRequest(text="Later.", language="en", deadline=1e12))
    soon = engine.synthesize(SynthesisRequest(text="Sooner.", language="en", deadline=1e12))
    soon.set_deadline(0.0)  # the playout is about to run dry
    order = []

    async def finish(name, stream):
        async for _ in stream:
            pass
        order.append(name)

    await asyncio.gather(finish("busy", busy), finish("late", late), finish("soon", soon))
    assert order.index("soon") < order.index("late")


@needs_espeak
async def test_a_sentence_chunk_ends_with_a_pause_and_starts_without_one(engine):
    sentence = await speak(engine, "Hello there.", language="en")
    fragment = await speak(engine, "Hello there", language="en")
    assert 0.2 < (len(sentence) - len(fragment)) / SAMPLE_RATE < 0.35  # the pause between sentences
    assert np.flatnonzero(np.abs(sentence) > 0.002)[0] < 0.01 * SAMPLE_RATE  # no latency in the audio itself
