"""Voice-clone inputs against the official qwen-tts 0.1.1: reference loading (librosa's
load + soxr resample), the speaker encoder's mel frontend and x-vector, and the speech
tokenizer's encoder codes, on tiny Base checkpoints the official classes initialised."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from audio.reference import load_reference, to_rate
from tests.qwen3.clone_audio import REFERENCES, speech_like, write_wav

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("refs")
    return {
        name: write_wav(d / f"{name}.wav", speech_like(2.3, rate, seed=i, channels=ch), rate)
        for i, (name, rate, ch) in enumerate(REFERENCES)
    }


def _official_load(path):
    """What generate_voice_clone does with a path: native-rate mono, then 24 kHz."""
    import librosa

    audio, sr = librosa.load(path, sr=None, mono=True)
    return audio.astype(np.float32), int(sr), librosa.resample(y=audio, orig_sr=sr, target_sr=24000)


@pytest.mark.parametrize("name", [r[0] for r in REFERENCES])
def test_reference_loading_equals_librosa(official, wavs, name):
    native, sr, at24 = _official_load(wavs[name])
    ref = load_reference(wavs[name])
    assert ref.sample_rate == sr
    assert np.array_equal(ref.samples, native)
    assert np.array_equal(to_rate(ref.samples, ref.sample_rate), at24)


def test_mel_filterbank_equals_librosa(official):
    from librosa.filters import mel

    from tts.qwen3.mel import mel_filterbank

    assert np.abs(mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000) - mel_filterbank()).max() <= 1e-7


@pytest.mark.parametrize("variant", ["1b7", "0b6"])
@pytest.mark.parametrize("name", [r[0] for r in REFERENCES])
def test_speaker_embedding_equals_official(official, official_dirs, wavs, variant, name):
    from tts.qwen3.weights import load_model

    d = official_dirs(variant, "base")
    om = official.official_model(d)
    _, _, at24 = _official_load(wavs[name])
    theirs = om.extract_speaker_embedding(at24, 24000)
    ref = load_reference(wavs[name])
    ours = load_model(d).speaker_encoder.embed(to_rate(ref.samples, ref.sample_rate))
    assert ours.shape == theirs.shape == (om.config.talker_config.hidden_size,)
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert theirs.abs().max().item() > 1e-3  # a real signal, not zeros


@pytest.mark.parametrize("name", [r[0] for r in REFERENCES])
def test_codec_encoder_codes_equal_official(official, official_dirs, wavs, name):
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

    from tts.qwen3.codec.encoder import load_codec_encoder

    st = official_dirs("1b7", "base") + "/speech_tokenizer"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = Qwen3TTSTokenizer.from_pretrained(st)
    native, sr, _ = _official_load(wavs[name])
    theirs = tok.encode(native, sr=sr).audio_codes[0]  # the wrapper's own resampling path
    ref = load_reference(wavs[name])
    ours = load_codec_encoder(st).encode(to_rate(ref.samples, ref.sample_rate))
    n24 = int(np.ceil(len(native) * 24000 / sr))
    assert ours.shape == theirs.shape == (-(-n24 // 1920), 16)
    assert torch.equal(ours, theirs)
    assert len(torch.unique(ours[:, 0])) > 5 and len(torch.unique(ours[:, 15])) > 5  # codes carry the signal
