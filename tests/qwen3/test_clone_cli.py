"""`voxgate synth --ref-audio`, `encode-audio`, `speaker-embedding` against the official
qwen-tts 0.1.1, and bad references refused with `bad_audio` before any model loads."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from gateway.cli import main
from tests.qwen3.clone_audio import speech_like, write_wav

FRAMES = 12
TEXT = "Hello world, a cloned voice."
REF_TEXT = "Hello, this is my voice."


@pytest.fixture(scope="module")
def ref44(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_refs")
    return write_wav(d / "ref44.wav", speech_like(2.1, 44100, seed=4, channels=2), 44100)


def _read(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype("float32") / 32767.0


@pytest.mark.parity
@pytest.mark.parametrize("x_vector_only", [False, True])
def test_synth_ref_audio_reproduces_generate_voice_clone(official, official_dirs, ref44, tmp_path, x_vector_only):
    d = official_dirs("1b7", "base")
    out, codes_out = str(tmp_path / "o.wav"), str(tmp_path / "o.npy")
    mode = ["--x-vector-only"] if x_vector_only else ["--ref-text", REF_TEXT]
    assert (
        main(
            [
                "synth",
                "--model-dir",
                d,
                "--text",
                TEXT,
                "--language",
                "en",
                "--greedy",
                "--max-frames",
                str(FRAMES),
                "--ref-audio",
                ref44,
                *mode,
                "--out",
                out,
                "--codes-out",
                codes_out,
            ]
        )
        == 0
    )
    ref_codes, _, _ = official.official_clone_codes(
        d,
        ref44,
        None if x_vector_only else REF_TEXT,
        TEXT,
        language="english",
        x_vector_only=x_vector_only,
        max_frames=FRAMES,
    )
    codes = np.load(codes_out)
    assert codes.shape == (FRAMES, 16) and np.array_equal(codes, ref_codes.numpy())  # generated frames only
    wavs, sr = official.official_wrapper(d).generate_voice_clone(
        text=TEXT,
        language="English",
        ref_audio=ref44,
        ref_text=None if x_vector_only else REF_TEXT,
        x_vector_only_mode=x_vector_only,
        do_sample=False,
        subtalker_dosample=False,
        repetition_penalty=1.0,
        max_new_tokens=FRAMES + 1,
    )
    ours = _read(out)
    assert sr == 24000 and ours.shape == wavs[0].shape  # the target speech only (ICL: reference cut off)
    assert np.abs(ours - np.clip(wavs[0], -1, 1)).max() <= 1.0 / 32767 + 1e-6


@pytest.mark.parity
def test_encode_audio_and_speaker_embedding_equal_official(official, official_dirs, ref44, tmp_path):
    d = official_dirs("0b6", "base")
    assert main(["encode-audio", "--model-dir", d, ref44, "--codes-out", str(tmp_path / "c.npy")]) == 0
    assert main(["speaker-embedding", "--model-dir", d, ref44, "--out", str(tmp_path / "x.npy")]) == 0
    item = official.official_wrapper(d).create_voice_clone_prompt(ref_audio=ref44, ref_text=REF_TEXT)[0]
    codes, xvec = np.load(tmp_path / "c.npy"), np.load(tmp_path / "x.npy")
    assert codes.dtype == np.int64 and np.array_equal(codes, item.ref_code.numpy())
    assert xvec.dtype == np.float32 and xvec.ndim == 1
    assert np.abs(xvec - item.ref_spk_embedding.numpy()).max() <= 1e-4


def _bad_references(d):
    silent = write_wav(d / "silent.wav", np.zeros(48000, np.float32), 24000)
    short = write_wav(d / "short.wav", speech_like(0.2, 24000), 24000)
    long = write_wav(d / "long.wav", speech_like(300.0, 8000), 8000)
    good = open(write_wav(d / "good.wav", speech_like(2.0, 24000), 24000), "rb").read()
    corrupt = d / "corrupt.wav"
    corrupt.write_bytes(good[:30])  # the header cut inside the fmt chunk
    text = d / "notes.wav"
    text.write_text("these are not the samples you are looking for\n" * 50)
    return {
        "silent": (silent, "silent"),
        "0.2 s": (short, "at least 1 s"),
        "5 min": (long, "at most 30 s"),
        "corrupt": (str(corrupt), "truncated"),
        "non-audio": (str(text), "not a WAV file"),
    }


def test_bad_references_are_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    from tts.qwen3 import checkpoint, tools

    def never(*a, **k):
        raise AssertionError("a bad reference reached the model")

    monkeypatch.setattr(checkpoint.Checkpoint, "load", never)
    monkeypatch.setattr(tools, "load_speaker_encoder", never)
    for name, (path, reason) in _bad_references(tmp_path).items():
        for argv in (
            [
                "synth",
                "--model-dir",
                str(tmp_path),
                "--text",
                "Hi",
                "--ref-audio",
                path,
                "--ref-text",
                "Hi",
                "--out",
                str(tmp_path / "o.wav"),
            ],
            ["speaker-embedding", "--model-dir", str(tmp_path), path, "--out", str(tmp_path / "x.npy")],
            ["encode-audio", "--model-dir", str(tmp_path), path, "--codes-out", str(tmp_path / "c.npy")],
        ):
            assert main(argv) == 2, (name, argv[0])
            err = capsys.readouterr().err
            assert "bad_audio" in err and reason in err, (name, err)
