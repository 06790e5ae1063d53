"""audio.vad: Silero batched across calls with per-call state, off the event loop; the detector's decisions."""

from __future__ import annotations

import asyncio
import sys
import threading

import numpy as np
import pytest

from audio import vad as V
from tests import caller_audio as ca

pytest.importorskip("onnxruntime")


def feed(pool: V.VadPool, streams_pcm: list[tuple[V.VadStream, np.ndarray]], step: int = 320) -> None:
    """Push every stream's audio 20 ms at a time, one pass after each push (as the pool's clock would)."""
    longest = max(len(p) for _, p in streams_pcm)
    for i in range(0, longest, step):
        for stream, pcm in streams_pcm:
            stream.push(pcm[i : i + step])
        pool.run_pass()


def collect(pool: V.VadPool, **options):
    events, probs = [], []
    stream = pool.open(on_event=lambda s, e: events.append(e), on_window=lambda s, p, end: probs.append(p), **options)
    return stream, events, probs


@pytest.fixture(scope="module")
def silero():
    return V.SileroBackend()


def test_silero_finds_speech_onset_and_end(silero):
    pcm, onset_ms = ca.caller_track(16000, lead_ms=800)
    pool = V.VadPool(silero)
    stream, events, _ = collect(pool)
    feed(pool, [(stream, pcm)])
    assert [e.state for e in events] == ["started", "stopped"]
    started = events[0].sample * 1000 / 16000
    assert abs(started - onset_ms) < 100, (started, onset_ms)
    speech_len = len(ca.speech(16000)) * 1000 / 16000
    assert events[1].speech_ms > 0.6 * speech_len


def test_speech_at_8k_upsampled_is_found(silero):
    from audio.resample import StreamResampler

    pcm8, onset_ms = ca.caller_track(8000, lead_ms=500)
    rs = StreamResampler(8000, 16000)
    pcm16 = np.concatenate([rs.process(pcm8.astype(np.float32) / 32768.0), rs.flush()])
    pool = V.VadPool(silero)
    stream, events, _ = collect(pool)
    feed(pool, [(stream, pcm16)])
    assert events and events[0].state == "started"
    assert abs(events[0].sample / 16 - onset_ms) < 120


@pytest.mark.parametrize("kind", ["noise", "tones"])
def test_noise_and_tones_start_nothing(silero, kind):
    pcm = ca.noise(6000, 16000, level=0.1) if kind == "noise" else ca.tones(6000, 16000, level=0.2)
    pool = V.VadPool(silero)
    stream, events, probs = collect(pool)
    feed(pool, [(stream, pcm)])
    assert events == []
    assert max(probs) < 0.5


def test_one_model_call_per_window_for_many_calls_with_their_own_state(silero):
    """Batched: N calls' windows in one model call; each call's probabilities equal those it gets alone."""
    sp = ca.speech(16000)
    tracks = [np.roll(sp, 2000 * i) if i % 2 == 0 else ca.noise(len(sp) / 16, 16000, seed=i) for i in range(6)]
    alone = []
    for pcm in tracks:
        pool = V.VadPool(silero)
        _, _, probs = (s := collect(pool))
        feed(pool, [(s[0], pcm)])
        alone.append(np.array(probs))
    pool = V.VadPool(silero)
    opened = [collect(pool) for _ in tracks]
    feed(pool, [(o[0], pcm) for o, pcm in zip(opened, tracks)])
    windows = len(tracks[0]) // silero.window
    assert pool.windows == windows * len(tracks)
    assert pool.model_calls <= windows + 1  # one call per window period for all six, not six
    for (_, _, probs), ref in zip(opened, alone):
        np.testing.assert_allclose(np.array(probs), ref, atol=1e-4)
    # The comparison means something only if the state matters: without it the speech reads differently.
    windows_of_speech = tracks[0][: windows * silero.window].reshape(windows, -1).astype(np.float32) / 32768.0
    stateless = np.concatenate([silero.infer(w[None], [silero.new_state()])[0] for w in windows_of_speech])
    assert np.abs(stateless - alone[0]).max() > 0.2


def test_a_burst_of_windows_keeps_their_order_and_state(silero):
    """A call whose audio arrives in one burst is judged window by window, same as when it trickles in."""
    pcm, _ = ca.caller_track(16000, lead_ms=300)
    pcm = pcm[: 16000 * 2]
    pool = V.VadPool(silero, max_backlog_ms=5000)
    trickle, _, p1 = collect(pool)
    feed(pool, [(trickle, pcm)])
    pool2 = V.VadPool(silero, max_backlog_ms=5000)
    burst, _, p2 = collect(pool2)
    burst.push(pcm)
    pool2.run_pass()
    assert pool2.model_calls == len(pcm) // silero.window
    np.testing.assert_allclose(p2, p1, atol=1e-4)


def test_a_backlog_beyond_the_cap_is_dropped_and_counted(silero):
    pool = V.VadPool(silero, max_backlog_ms=320)
    stream, _, probs = collect(pool)
    stream.push(np.zeros(16000, np.int16))  # one second at once, 31 windows
    pool.run_pass()
    assert len(probs) == 10
    assert stream.dropped_windows == 21
    assert stream.samples_done == 31 * 512


def test_lone_click_starts_nothing():
    det = V.SpeechDetector(512, onset_ms=64)
    assert det.feed(0.99, 512) is None  # one loud window
    assert det.feed(0.1, 1024) is None
    assert det.feed(0.9, 1536) is None
    ev = det.feed(0.9, 2048)
    assert ev is not None and ev.state == "started" and ev.sample == 1024
    for k in range(1, 10):  # 9 quiet windows: still speaking (300 ms of silence needs 10)
        assert det.feed(0.1, 2048 + 512 * k) is None
    stopped = det.feed(0.1, 2048 + 512 * 10)
    assert stopped is not None and stopped.state == "stopped" and stopped.sample == 2048


def test_building_the_backend_leaves_torch_threads_and_skips_the_silero_package():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    V.SileroBackend()
    assert torch.get_num_threads() == before
    assert "silero_vad.model" not in sys.modules  # its import sets torch's thread count to 1


async def test_pool_runs_the_model_off_the_event_loop(silero):
    pool = V.VadPool(silero)
    threads = set()
    real_infer = pool._infer

    def spy(jobs):
        threads.add(threading.current_thread().name)
        return real_infer(jobs)

    pool._infer = spy
    pool.start()
    events = []
    got = asyncio.Event()
    stream = pool.open(on_event=lambda s, e: (events.append(e), got.set()))
    pcm, _ = ca.caller_track(16000, lead_ms=300)
    for i in range(0, 16000, 320):  # a second, 20 ms at a time in real time's order (not its pace)
        stream.push(pcm[i : i + 320])
        await asyncio.sleep(0)
    await asyncio.wait_for(got.wait(), 5)
    await pool.close()
    assert events[0].state == "started"
    assert threads and threading.main_thread().name not in threads
    assert all(t.startswith("vad-") for t in threads)


def test_webrtc_backend_is_the_cheap_mode():
    pytest.importorskip("webrtcvad")
    backend = V.make_backend("webrtc")
    pool = V.VadPool(backend)
    stream, events, _ = collect(pool)
    pcm, onset_ms = ca.caller_track(16000, lead_ms=500)
    feed(pool, [(stream, pcm)])
    assert events and events[0].state == "started"
    assert abs(events[0].sample / 16 - onset_ms) < 100


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown VAD backend"):
        V.make_backend("magic")
