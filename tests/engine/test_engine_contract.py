"""The `tts.Engine` contract, run against each engine as the gateway holds it: in this process (`local`) and
through `voxgate engine`'s server and wire (`remote`: tts.service's EngineServer on loopback tcp:// with
CURVE, and a RemoteEngine). The same tests, parametrised: what the session relies on must hold over the wire.

SimulatedEngine for the scheduling contract (cheap, deterministic audio); the tiny random Qwen3 checkpoint on
CPU for real audio: greedy requests batched together equal each alone, decoded offline, sample for sample,
also after the hop.
"""

from __future__ import annotations

import asyncio
import io
import time
import wave

import numpy as np
import pytest

pytest.importorskip("zmq")
pytest.importorskip("msgspec")

from tts import EngineError, SamplingSettings, SynthesisRequest, VoiceClone  # noqa: E402
from tts.service.remote import RemoteEngine  # noqa: E402
from tts.service.server import EngineServer  # noqa: E402
from tts.simulated import SimulatedEngine, SimulatedSettings, tone  # noqa: E402

SECRET = b"contract-test-secret-0123456789"
MODES = ["local", "remote"]


class Served:
    """`engine`: what the test calls (the engine itself, or a RemoteEngine); `backend`: the real engine."""

    def __init__(self, backend):
        self.backend = backend
        self.engine = backend
        self.server = None

    async def open(self, mode: str) -> "Served":
        await self.backend.start()
        if mode == "remote":
            self.server = EngineServer(self.backend, "tcp://127.0.0.1:0", secret=SECRET, heartbeat_s=2.0)
            await self.server.start()
            self.engine = RemoteEngine([self.server.endpoint], secret=SECRET, connect_timeout_s=10)
            await self.engine.start()
            assert self.engine.health() is None
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.engine.close()
            await self.server.close()
        await self.backend.close()


@pytest.fixture(params=MODES)
async def serve(request):
    opened: list[Served] = []

    async def _serve(backend) -> Served:
        served = await Served(backend).open(request.param)
        opened.append(served)
        return served

    _serve.mode = request.param
    yield _serve
    for served in opened:
        await served.close()


def sim(**kw) -> SimulatedEngine:
    base = dict(
        first_packet_ms=0, capacity_x=200, ms_per_char=20, stream_rtf=0.05, packet_ms=80, first_packet_audio_ms=40
    )
    return SimulatedEngine(SimulatedSettings(**{**base, **kw}))


async def collect(stream, timeout: float = 30.0):
    async def run():
        return [c async for c in stream]

    return await asyncio.wait_for(run(), timeout)


async def until(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def wav_bytes(seconds: float = 1.5, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 180 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) * 32767).astype(np.int16)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


# ---------------------------------------------------------------- SimulatedEngine: the scheduling contract
async def test_a_stream_yields_its_audio_in_order_and_ends_once(serve):
    s = await serve(sim())
    request = SynthesisRequest(text="x" * 30, tag="sess/t1/0")
    chunks = await collect(s.engine.synthesize(request))
    assert chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
    assert len(chunks) >= 3  # streamed in packets, not in one piece
    assert [c.frame_index for c in chunks] == list(np.cumsum([0] + [len(c.pcm) // 1920 for c in chunks[:-1]]))
    pcm = np.concatenate([c.pcm for c in chunks])
    assert pcm.dtype == np.float32 and pcm.flags.writeable  # the playout clips in place
    assert np.array_equal(pcm, tone(0, len(pcm), request.request_id))  # the very samples the engine made
    assert len(pcm) == round(30 * 0.020 * 24000)


async def test_cancel_ends_the_stream_and_frees_its_slot_in_the_engine(serve):
    s = await serve(sim(stream_rtf=1.0))  # real time: still running when cancelled
    stream = s.engine.synthesize(SynthesisRequest(text="x" * 200))
    it = aiter(stream)
    await asyncio.wait_for(anext(it), 10)
    assert await until(lambda: s.backend.stats()["active"] == 1)
    stream.cancel()
    assert [c async for c in it] == []
    assert await until(lambda: s.backend.stats()["active"] == 0 and s.backend.stats()["queued"] == 0)
    after = await collect(s.engine.synthesize(SynthesisRequest(text="next one")))
    assert after[-1].is_last


async def test_the_earliest_deadline_is_served_first_and_updates_move_a_request_forward(serve):
    s = await serve(sim(capacity_x=1.0, stream_rtf=1.0))  # one real-time stream's worth: strictly one at a time
    now = time.monotonic()
    late = s.engine.synthesize(SynthesisRequest(text="x" * 10, deadline=now + 30))
    soon = s.engine.synthesize(SynthesisRequest(text="x" * 10, deadline=now + 10))
    moved = s.engine.synthesize(SynthesisRequest(text="x" * 10, deadline=now + 50))
    moved.set_deadline(now + 1)  # the caller's real deadline: now the most urgent
    await asyncio.gather(collect(late), collect(soon), collect(moved))
    order = sorted(
        ["late", "soon", "moved"], key=lambda n: {"late": late, "soon": soon, "moved": moved}[n].first_audio_at
    )
    assert order == ["moved", "soon", "late"]


async def test_a_full_engine_refuses_with_overloaded(serve):
    s = await serve(sim(max_queued=2, stream_rtf=1.0))
    held = [s.engine.synthesize(SynthesisRequest(text="x" * 100)) for _ in range(2)]
    await asyncio.wait_for(anext(aiter(held[0])), 10)
    with pytest.raises(EngineError) as refused:  # at once (local), or as the stream's outcome (over the wire)
        await collect(s.engine.synthesize(SynthesisRequest(text="one too many")))
    assert refused.value.code == "overloaded"
    for h in held:
        h.cancel()


async def test_health_and_stats(serve):
    s = await serve(sim(stream_rtf=1.0))
    assert s.engine.health() is None
    stream = s.engine.synthesize(SynthesisRequest(text="x" * 100))
    await asyncio.wait_for(anext(aiter(stream)), 10)
    assert await until(lambda: s.engine.stats()["active"] == 1, 5)  # remote: from the engine's load reports
    stream.cancel()
    assert {"queued", "active"} <= set(s.engine.stats())


async def test_cloned_voices_are_added_listed_and_removed(serve):
    s = await serve(sim())
    assert s.engine.can_clone
    info = await s.engine.add_voice(VoiceClone("anna", wav_bytes(), ref_text="Hello, this is Anna."))
    assert info["name"] == "anna" and info["kind"] == "clone_icl"
    assert [v["name"] for v in s.engine.cloned_voices()] == ["anna"]
    assert [v["name"] for v in s.backend.cloned_voices()] == ["anna"]  # the engine itself has it
    with pytest.raises(EngineError) as bad:
        await s.engine.add_voice(VoiceClone("noise", b"not a wav at all", ref_text="x"))
    assert bad.value.code == "bad_audio"
    assert s.engine.remove_voice("anna") is True
    assert s.engine.remove_voice("anna") is False
    assert s.engine.cloned_voices() == []
    assert await until(lambda: s.backend.cloned_voices() == [])


# ---------------------------------------------------------------- Qwen3 (tiny random checkpoint, CPU): real audio


def qwen3(ckpt, **kw):
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    s = EngineSettings(
        device="cpu",
        dtype="float32",
        max_batch=kw.pop("max_batch", 4),
        max_seq_len=160,
        frames_base=kw.pop("frames_base", 6),
        frames_per_token=kw.pop("frames_per_token", 0.5),
        **kw,
    )
    return Qwen3Engine(s, checkpoint=ckpt, keep_codes=True)


def greedy(text: str, **kw) -> SynthesisRequest:
    return SynthesisRequest(
        text=text, voice=kw.pop("voice", "ryan"), language="en", sampling=SamplingSettings(greedy=True), **kw
    )


_OFFLINE: dict = {}


def offline(ckpt, engine, text: str) -> np.ndarray:
    """The request alone, generated and decoded offline (once per text: both modes compare with it)."""
    from tts.qwen3.generate import GenerationSettings, generate_codes
    from tts.qwen3.prompt import build_prompt

    if text in _OFFLINE:
        return _OFFLINE[text]
    p = build_prompt(ckpt.model.talker, ckpt.config, ckpt.tokenizer, text, speaker="ryan", language="en")
    cap = int(engine.settings.frames_base + engine.settings.frames_per_token * p.text_tokens)
    codes = generate_codes(ckpt.model, p, GenerationSettings(greedy=True, subtalker_greedy=True, max_frames=cap)).codes
    _OFFLINE[text] = ckpt.codec.decode(codes.unsqueeze(0))[0].numpy()
    return _OFFLINE[text]


async def test_qwen3_batched_greedy_streams_equal_the_offline_decode_and_a_bad_voice_fails_alone(serve, ckpt):
    s = await serve(qwen3(ckpt))
    texts = ["Hello world.", "A longer one, batched."]
    streams = [s.engine.synthesize(greedy(t)) for t in texts]
    bad = s.engine.synthesize(greedy("Hello.", voice="nobody"))
    results = await asyncio.gather(*[collect(st, 120) for st in streams])
    with pytest.raises(EngineError) as refused:
        await collect(bad)
    assert refused.value.code == "unknown_voice"
    assert s.engine.voices() == s.backend.voices() and "ryan" in s.engine.voices()
    for text, chunks in zip(texts, results):
        assert chunks[-1].is_last and len(chunks[0].pcm) == 1920  # first packet: one frame
        pcm, ref = np.concatenate([c.pcm for c in chunks]), offline(ckpt, s.backend, text)
        assert pcm.shape == ref.shape and np.abs(pcm - ref).max() <= 1e-5, text


async def test_qwen3_cancel_frees_the_slot_for_the_next_request(serve, ckpt):
    s = await serve(qwen3(ckpt, max_batch=1, frames_base=60, frames_per_token=0))
    long = s.engine.synthesize(greedy("A long request that will be cancelled."))
    await asyncio.wait_for(anext(aiter(long)), 60)
    long.cancel()
    after = await collect(s.engine.synthesize(greedy("Next.")), 120)
    assert after[-1].is_last
    assert await until(lambda: s.backend.counters["cancelled"] == 1 and s.backend.counters["completed"] == 1)
    assert s.backend.counters["frames"] < 60 + 6  # the cancelled one stopped early


# ---------------------------------------------------------------- eSpeak NG: word timings
async def test_word_timings_name_the_words_of_the_text_in_order_within_the_audio(serve):
    from tts.espeak_engine import EspeakEngine, espeak_available

    if not espeak_available():
        pytest.skip("espeakng-loader (the optional 'espeak' extra) is not installed")
    s = await serve(EspeakEngine())
    text = "Hello there, my good friend."
    chunks = await collect(s.engine.synthesize(SynthesisRequest(text=text, language="en")))
    timed = [c.words for c in chunks if c.words is not None]
    assert timed and {t.source for t in timed} == {"engine"}
    words = [w for t in timed for w in t.words]
    assert [text[w.char_start : w.char_end] for w in words] == ["Hello", "there", "my", "good", "friend"]
    total = sum(len(c.pcm) for c in chunks)
    assert all(0 <= w.start < w.end <= total for w in words)
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))  # in order, no overlap
    assert words[-1].end < total - 0.2 * 24000  # the pause after the sentence is no word's
