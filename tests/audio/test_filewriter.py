"""MonoWavWriter: the WAV files the writer thread and the inbound recording write."""

from __future__ import annotations

import gc
import sys
import wave

import numpy as np
import pytest

from audio.filewriter import MonoWavWriter


def test_frames_written_read_back_as_a_mono_pcm16_wav(tmp_path):
    path = tmp_path / "call.wav"
    pcm = (np.arange(800) - 400).astype("<i2")
    w = MonoWavWriter(str(path), 8000)
    w.writeframes(pcm[:300].tobytes())
    w.writeframes(pcm[300:].tobytes())
    w.close()
    with wave.open(str(path), "rb") as r:
        assert (r.getnchannels(), r.getsampwidth(), r.getframerate(), r.getnframes()) == (1, 2, 8000, 800)
        assert np.array_equal(np.frombuffer(r.readframes(800), dtype="<i2"), pcm)


def test_a_path_that_cannot_be_opened_raises_and_leaves_no_half_built_writer(tmp_path, monkeypatch):
    """`wave.open(path)` on such a path leaves a writer whose destructor raises later, inside whatever runs."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(OSError):
        MonoWavWriter(str(tmp_path / "gone" / "call.wav"), 8000)
    gc.collect()
    assert unraisable == []
