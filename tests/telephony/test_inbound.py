"""The caller's audio: an async stream per subscriber that never grows without bound, and a WAV on the call's timeline."""

from __future__ import annotations

import asyncio
import os
import wave

import numpy as np

from gateway.core.inbound import InboundAudio, recording_path


def frame(value: int, n: int = 160) -> np.ndarray:
    return np.full(n, value, dtype=np.int16)


async def test_subscribers_get_the_audio_in_order_and_the_stream_ends_with_the_call():
    inbound = InboundAudio(8000)
    a, b = inbound.subscribe(), inbound.subscribe()
    for v in (1, 2, 3):
        inbound.push(frame(v))
    inbound.close()
    got_a = [int(pcm[0]) async for pcm in a]
    got_b = [int(pcm[0]) async for pcm in b]
    assert got_a == got_b == [1, 2, 3]
    assert inbound.duration_ms == 60.0


async def test_a_reader_waits_for_audio_that_comes_later():
    inbound = InboundAudio(8000)
    stream = inbound.subscribe()
    reader = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.01)
    assert not reader.done()
    inbound.push(frame(7))
    assert int((await asyncio.wait_for(reader, 1))[0]) == 7


async def test_a_slow_subscriber_loses_its_oldest_audio_not_memory():
    inbound = InboundAudio(8000)
    stream = inbound.subscribe(max_buffer_ms=100)  # 5 frames
    for v in range(50):
        inbound.push(frame(v))
    inbound.close()
    kept = [int(pcm[0]) async for pcm in stream]
    assert kept == list(range(45, 50))
    assert stream.dropped_samples == 45 * 160


async def test_a_subscriber_after_the_call_ended_gets_an_empty_stream():
    inbound = InboundAudio(8000)
    inbound.close()
    assert [pcm async for pcm in inbound.subscribe()] == []


def test_recording_fills_lost_packets_with_silence_by_timestamp(tmp_path):
    path = recording_path(str(tmp_path / "rec"), "CA../../etc", "s1")
    assert os.path.dirname(path) == str(tmp_path / "rec")  # a call id from the far end cannot leave the directory
    inbound = InboundAudio(8000, path)
    inbound.push(frame(100), timestamp_ms=0)
    inbound.push(frame(200), timestamp_ms=60)  # 40 ms lost in between
    inbound.push(frame(300), timestamp_ms=10_000_000)  # an absurd jump is not padded
    inbound.close()
    with wave.open(path) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (8000, 2, 1)
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert len(pcm) == 160 + 320 + 160 + 160
    assert (
        (pcm[:160] == 100).all() and not pcm[160:480].any() and (pcm[480:640] == 200).all() and (pcm[640:] == 300).all()
    )


def test_no_directory_means_no_recording():
    assert recording_path(None, "CA1", "s1") is None
    inbound = InboundAudio(8000, None)
    inbound.push(frame(1))
    inbound.close()
    assert inbound.samples_received == 160


def test_timestamps_that_run_ahead_of_the_clock_are_not_padded(tmp_path):
    # Each pad is bounded, but a peer whose timestamps leap ahead on every packet must not get
    # seconds of silence written per 20 ms packet: the timeline may not run ahead of real time.
    path = recording_path(str(tmp_path), "CAleap", "s1")
    inbound = InboundAudio(8000, path)
    for i in range(21):
        inbound.push(frame(7), timestamp_ms=i * 4000)
    inbound.close()
    with wave.open(path) as w:
        assert w.getnframes() <= 21 * 160 + 8000  # the audio, plus at most a second of padding


def test_caller_audio_faster_than_real_time_is_capped_and_counted():
    import numpy as np

    from gateway.core.inbound import InboundAudio

    inbound = InboundAudio(8000, max_ahead_ms=1000)
    inbound.push(np.zeros(8000 * 10, np.int16))  # ten seconds in one go
    assert 8000 <= inbound.samples_received <= 8000 * 1.1  # the cushion, not the hour
    assert inbound.dropped_samples == 8000 * 10 - inbound.samples_received
