import numpy as np
import pytest

from audio.resample import FrameFifo, StreamResampler


@pytest.mark.parametrize("out_rate", [8000, 16000, 48000])
def test_ten_minutes_in_gives_exactly_the_expected_samples_out(out_rate):
    rs = StreamResampler(24000, out_rate)
    fifo = FrameFifo(out_rate // 50)
    rng = np.random.default_rng(0)
    frames = 0
    piece_sizes = rng.integers(1, 8000, size=6000)
    total_in = 0
    for n in piece_sizes:
        if total_in >= 24000 * 600:
            break
        n = int(min(n, 24000 * 600 - total_in))
        fifo.push(rs.process(np.zeros(n, dtype=np.float32)))
        total_in += n
        while fifo.pop() is not None:
            frames += 1
    fifo.push(rs.flush())
    while fifo.pop() is not None:
        frames += 1
    assert total_in == 24000 * 600
    assert rs.samples_out == out_rate * 600
    assert frames == 600 * 50 and len(fifo) == 0


def test_resampled_tone_keeps_its_frequency():
    rate = 24000
    t = np.arange(rate) / rate
    x = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    rs = StreamResampler(rate, 8000)
    y = np.concatenate([rs.process(x[i : i + 480]) for i in range(0, rate, 480)] + [rs.flush()])
    assert len(y) == 8000
    spectrum = np.abs(np.fft.rfft(y))
    assert abs(np.argmax(spectrum) - 440) <= 1


def test_same_rate_passes_samples_through_unchanged():
    rs = StreamResampler(24000, 24000)
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    assert np.array_equal(np.concatenate([rs.process(x), rs.flush()]), x)


def test_fifo_hands_out_exact_frames_and_pads_the_tail():
    fifo = FrameFifo(160)
    fifo.push(np.arange(400, dtype=np.float32))
    a, b = fifo.pop(), fifo.pop()
    assert a.tolist() == list(range(160)) and b[0] == 160
    assert fifo.pop() is None and len(fifo) == 80
    tail = fifo.pop_partial()
    assert len(tail) == 160 and tail[79] == 399 and tail[80] == 0 and len(fifo) == 0
