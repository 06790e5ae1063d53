"""The codec decoder against the official qwen-tts 0.1.1 implementation, on one tiny folder.

Live comparison: the official package is installed by scripts/install_reference.sh
(CI does the same); without it these tests skip and say why.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tts.qwen3.codec import CodecConfig, CodecDecoder, codec_config_dict, load_codec_decoder, write_tiny_codec
from tts.qwen3.codec.tiny import TINY_DECODER, TINY_ENCODER, mimi_encoder_shapes

pytestmark = pytest.mark.parity


def _official():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import qwen_tts  # noqa: F401  (its __init__ needs librosa, soundfile, sox, onnxruntime, torchaudio)
            from qwen_tts.core.tokenizer_12hz import configuration_qwen3_tts_tokenizer_v2 as conf
            from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as model
    except Exception as e:  # any import failure means: skip, with the reason
        pytest.skip(
            f"official qwen-tts 0.1.1 not importable ({type(e).__name__}: {e}); run scripts/install_reference.sh"
        )
    return conf, model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_codec(tmp_path_factory.mktemp("codec") / "speech_tokenizer", seed=3)


@pytest.fixture(scope="module")
def official_model(folder):
    conf, model = _official()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref, info = model.Qwen3TTSTokenizerV2Model.from_pretrained(
            str(folder), dtype=torch.float32, output_loading_info=True
        )
    return ref.eval(), info


def test_official_loader_reads_the_tiny_folder_with_every_key_used(official_model):
    _, info = official_model
    assert info["missing_keys"] == [] and info["unexpected_keys"] == [] and info["mismatched_keys"] == []


def test_official_tokenizer_wrapper_loads_the_tiny_folder(folder):
    _official()
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = Qwen3TTSTokenizer.from_pretrained(str(folder))
    assert tok.model.get_output_sample_rate() == 24000


def test_decoded_waveform_equals_the_official_decode(folder, official_model):
    ref, _ = official_model
    ours = load_codec_decoder(folder)
    frames = 3 * ours.config.sliding_window + 5  # well past the attention window
    codes = torch.randint(0, ours.config.codebook_size, (2, frames, 16), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected = torch.stack(ref.decode(codes).audio_values)
    got = ours.decode(codes)
    assert got.shape == expected.shape == (2, frames * 1920)
    assert expected.abs().mean() > 0.05  # a real signal, not silence or a clamp
    assert (got - expected).abs().max().item() <= 1e-4


def test_streamed_waveform_equals_the_official_decode(folder, official_model):
    ref, _ = official_model
    ours = load_codec_decoder(folder)
    codes = torch.randint(0, 2048, (1, 13, 16), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        expected = ref.decode(codes).audio_values[0]
    state = ours.new_state(1)
    got = torch.cat([ours.decode_step(codes[:, i : i + 1], state) for i in range(13)], dim=1)[0]
    assert (got - expected).abs().max().item() <= 1e-4


def test_decoder_weight_names_and_shapes_match_the_official_released_shape():
    conf, model = _official()
    dec_cfg = conf.Qwen3TTSTokenizerV2DecoderConfig(**codec_config_dict()["decoder_config"])
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        official = model.Qwen3TTSTokenizerV2Decoder(dec_cfg)
        ours = CodecDecoder(CodecConfig())
    theirs = {k: tuple(v.shape) for k, v in official.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == theirs


def test_encoder_weight_layout_matches_the_official_encoder():
    conf, model = _official()
    raw = codec_config_dict(TINY_DECODER, TINY_ENCODER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        official = model.Qwen3TTSTokenizerV2Model(conf.Qwen3TTSTokenizerV2Config(**raw))
    theirs = {k: tuple(v.shape) for k, v in official.state_dict().items() if k.startswith("encoder.")}
    assert mimi_encoder_shapes(raw["encoder_config"]) == theirs
