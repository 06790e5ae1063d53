"""PlayoutTrack: one playout tick per recv(), paced on an absolute 20 ms schedule."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from gateway.legs.webrtc import PlayoutTrack


def ramp_source(rate: int):
    n = rate // 50
    frame = np.zeros(n, dtype=np.float32)
    calls = []

    def pull():
        calls.append(time.monotonic())
        frame[:] = 0.5  # the playout hands out its reused buffer
        return frame, "audio"

    return pull, calls


async def test_frames_carry_the_playout_audio_with_continuous_timestamps():
    track = PlayoutTrack(48000)
    track.source, calls = ramp_source(48000)
    frames = [await track.recv() for _ in range(5)]
    assert [f.pts for f in frames] == [0, 960, 1920, 2880, 3840]
    f = frames[-1]
    assert (f.format.name, f.layout.name, f.sample_rate, f.samples) == ("s16", "mono", 48000, 960)
    assert np.all(np.abs(f.to_ndarray().astype(int) - 16384) <= 1)
    assert len(calls) == 5  # one playout tick per frame


async def test_silence_until_a_session_is_attached():
    track = PlayoutTrack(8000)
    f = await track.recv()
    assert f.samples == 160 and not f.to_ndarray().any()


async def test_pacing_follows_real_time_over_a_second():
    track = PlayoutTrack(24000)
    t0 = time.monotonic()
    for _ in range(51):
        await track.recv()
    elapsed = time.monotonic() - t0
    assert 0.9 < elapsed < 1.3  # 50 periods of 20 ms, generous for a shared CI core


async def test_a_short_stall_is_caught_up_without_shifting_the_schedule():
    track = PlayoutTrack(24000)
    await track.recv()
    start = track._start
    await asyncio.sleep(0.1)  # five frames late
    t0 = time.monotonic()
    for _ in range(5):
        await track.recv()
    assert time.monotonic() - t0 < 0.09  # back to back: paced, five frames would take 100 ms
    assert track._start == start and track.restarts == 0


async def test_a_long_stall_restarts_the_schedule():
    track = PlayoutTrack(24000, max_catchup=3)
    await track.recv()
    await asyncio.sleep(0.15)
    await track.recv()
    assert track.restarts == 1
    pts = [(await track.recv()).pts for _ in range(2)]
    assert pts[1] - pts[0] == 480  # media timestamps stay continuous


async def test_a_stopped_track_ends_the_stream():
    track = PlayoutTrack(24000)
    track.stop()
    with pytest.raises(MediaStreamError):
        await track.recv()


async def test_a_schedule_restart_reports_the_skipped_frames_to_the_session():
    track = PlayoutTrack(8000, max_catchup=10)
    track.source, _ = ramp_source(8000)
    stalls = []
    track.on_stall = stalls.append
    await track.recv()
    time.sleep(0.3)  # the loop stalled past the catch-up limit (200 ms): the schedule restarts
    await track.recv()
    assert track.restarts == 1 and len(stalls) == 1 and 13 <= stalls[0] <= 16  # ~300 ms of frames never sent
