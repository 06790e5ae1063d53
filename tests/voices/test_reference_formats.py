"""Reference recordings in MP3, M4A/AAC, Ogg/Opus, WebM/Opus and FLAC: each file is encoded with PyAV from a
known WAV, decoded by `audio.reference.load_reference` (the one checked path every door uses), and compared
with the WAV: within the codec's expected error (lossy: >= 15 dB SNR mono after alignment, measured 21-24 dB;
FLAC: bit-exact), and the same speaker embedding from a tiny Base checkpoint's speaker encoder."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from audio.reference import ReferenceAudioError, load_reference, to_rate
from tests.qwen3.clone_audio import speech_like, write_wav
from tests.voices.encoded_audio import FORMATS, encode

pytest.importorskip("av", reason="PyAV (the speech extra) encodes the test files")

LOSSY_MIN_SNR_DB = {1: 15.0, 2: 10.0}  # 128 kbit/s MP3/AAC, 64 kbit/s Opus: mono 21-24 dB; stereo, whose second
# channel carries broadband noise a perceptual codec spends few bits on, 11.8-14.7 dB (the downmix is compared)
MAX_LENGTH_DIFF_S = 0.05  # ADTS AAC keeps its 1024-sample priming (no container to say so): 23 ms at 44.1 kHz
MIN_CENTERED_COSINE = 0.95  # the same recording through a codec, measured 0.982-0.998; other voices <= 0.72


def _wav(tmp_path, name, samples, rate) -> bytes:
    with open(write_wav(tmp_path / f"{name}.wav", samples, rate), "rb") as f:
        return f.read()


def _aligned_snr_db(ref: np.ndarray, got: np.ndarray, max_lag: int = 2048) -> tuple[float, int]:
    """SNR of `got` against `ref` at the lag (codec delay) that lines them up best."""
    window = min(len(ref), len(got), 24000)
    corr = np.correlate(got[: window + max_lag], ref[:window], mode="valid")
    lag = int(np.argmax(corr))
    b = got[lag:]
    n = min(len(ref), len(b))
    a, b = ref[:n], b[:n]
    return float(10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2))), lag


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("channels", [1, 2])
def test_a_coded_copy_decodes_within_the_codecs_error_of_its_wav(tmp_path, fmt, channels):
    rate = FORMATS[fmt][2]
    x = speech_like(2.5, rate, seed=2, channels=channels)
    wav = load_reference(_wav(tmp_path, "ref", x, rate))
    data = encode(x, fmt)
    got = load_reference(data)
    assert got.sample_rate == rate and got.samples.dtype == np.float32 and got.samples.ndim == 1  # native rate, mono
    assert abs(got.duration_s - wav.duration_s) <= MAX_LENGTH_DIFF_S, (got.duration_s, wav.duration_s)
    if fmt == "flac":
        assert np.array_equal(got.samples, wav.samples)  # lossless: the WAV's own samples
        return
    snr, lag = _aligned_snr_db(wav.samples, got.samples)
    assert snr >= LOSSY_MIN_SNR_DB[channels], (snr, lag)
    assert snr < 60  # a lossy codec: this is not the WAV passed through by mistake


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("formats_base"))
    make_tiny_model(d, variant="0b6", kind="base", seed=6)
    return d


def test_the_same_speaker_embedding_from_every_format(tmp_path, base_dir):
    from tts.qwen3.tools import load_speaker_encoder

    enc = load_speaker_encoder(base_dir)

    def embed(ref):
        return enc.embed(to_rate(ref.samples, ref.sample_rate, enc.sample_rate)).float().numpy()

    def cos(a, b):
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    # random weights put every voice near one direction: compare what is left after the mean of other voices
    rate = 48000
    others = [
        embed(
            load_reference(
                _wav(tmp_path, f"v{k}", speech_like(2.5 / min(s, 1.0), int(rate * s), seed=10 + k)[: 2 * rate], rate)
            )
        )
        for k, s in enumerate([0.8, 0.9, 1.25, 1.5, 1.8, 2.2])
    ]  # the same kind of signal, pitched by 1/s
    mean = np.mean(others, axis=0)
    x = speech_like(2.0, rate, seed=2)
    base = embed(load_reference(_wav(tmp_path, "ref", x, rate))) - mean
    assert max(cos(base, o - mean) for o in others) < 0.8  # the measure tells voices apart
    for fmt in FORMATS:
        own = FORMATS[fmt][2]
        src = x if own == rate else to_rate(x, rate, own)
        got = embed(load_reference(encode(src, fmt))) - mean
        assert cos(base, got) >= (0.9999 if fmt == "flac" else MIN_CENTERED_COSINE), fmt


def test_without_pyav_a_non_wav_file_is_bad_audio_naming_the_extra(tmp_path, monkeypatch):
    x = speech_like(2.0, 44100, seed=3)
    mp3, wav = encode(x, "mp3"), _wav(tmp_path, "ref", x, 44100)
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError, as on an install without it
    with pytest.raises(ReferenceAudioError) as exc:
        load_reference(mp3)
    assert exc.value.code == "bad_audio" and "MP3" in exc.value.message and "voxgate[speech]" in exc.value.message
    assert load_reference(wav).duration_s == pytest.approx(2.0)  # WAV needs no PyAV


@pytest.mark.parametrize(
    "case,words",
    [
        ("silent_opus", "silent"),
        ("short_mp3", "at least 1 s"),
        ("long_mp3", "more than 30 s"),
        ("broken_ogg", "cannot be decoded"),
        ("truncated_m4a", "cannot be decoded"),
        ("gif", "not a WAV file"),
        ("playlist", "not a WAV file"),  # never handed to FFmpeg's probing, which opens playlists' URLs
    ],
)
def test_bad_coded_references_are_refused_with_the_reason(case, words):
    if case == "silent_opus":
        data = encode(np.zeros(96000, np.float32), "ogg_opus")
    elif case == "short_mp3":
        data = encode(speech_like(0.4, 44100), "mp3")
    elif case == "long_mp3":  # 40 s: decoding stops a second past the limit
        data = encode(speech_like(40.0, 16000), "mp3", rate=16000)
    elif case == "broken_ogg":
        data = b"OggS" + bytes(range(256)) * 8
    elif case == "truncated_m4a":
        data = encode(speech_like(2.0, 44100), "m4a")[:400]
    elif case == "playlist":
        data = b"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nhttp://127.0.0.1:9/a.ts\n#EXT-X-ENDLIST\n"
    else:
        data = b"GIF89a" + b"\0" * 2000
    with pytest.raises(ReferenceAudioError) as exc:
        load_reference(data)
    assert exc.value.code == "bad_audio" and words in exc.value.message, exc.value.message


def test_synth_ref_audio_takes_ogg_opus(tmp_path, base_dir, capsys):
    """`voxgate synth --ref-audio` on a recording that is not WAV (FLAC's samples equal its WAV's, tested above)."""
    from gateway.cli import main

    path = tmp_path / "ref.ogg"
    path.write_bytes(encode(speech_like(1.5, 48000, seed=5), "ogg_opus"))
    out = str(tmp_path / "out")
    assert (
        main(
            [
                "synth",
                "--model-dir",
                base_dir,
                "--text",
                "Hello.",
                "--ref-audio",
                str(path),
                "--ref-text",
                "Hi there.",
                "--greedy",
                "--max-frames",
                "4",
                "--out",
                out + ".wav",
                "--codes-out",
                out + ".npy",
            ]
        )
        == 0
    )
    assert np.load(out + ".npy").shape == (4, 16)
    broken = tmp_path / "broken.webm"
    broken.write_bytes(b"\x1a\x45\xdf\xa3" + b"\0" * 300)
    assert (
        main(
            [
                "synth",
                "--model-dir",
                base_dir,
                "--text",
                "Hello.",
                "--ref-audio",
                str(broken),
                "--ref-text",
                "Hi.",
                "--out",
                out + "2.wav",
            ]
        )
        == 2
    )
    assert "bad_audio" in capsys.readouterr().err


def test_config_voice_takes_an_m4a_reference_and_names_a_broken_one(tmp_path):
    from gateway.config import ConfigError, load_config

    good, bad = tmp_path / "olga.m4a", tmp_path / "broken.ogg"
    good.write_bytes(encode(speech_like(1.5, 44100, seed=6), "m4a"))
    bad.write_bytes(b"OggS" + bytes(range(256)) * 4)
    cfg = load_config(None, {"voices": {"olga": {"ref_audio": str(good), "ref_text": "Hi."}}})
    assert cfg.voices["olga"].ref_audio == str(good)
    with pytest.raises(ConfigError) as exc:
        load_config(None, {"voices": {"anna": {"ref_audio": str(bad), "ref_text": "Hi."}}})
    assert "voices.anna.ref_audio" in str(exc.value) and "cannot be decoded" in str(exc.value)
