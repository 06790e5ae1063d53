"""Reading checkpoints: config refusals, weights by key name, dtypes, the tokenizer."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts.qwen3.config import ConfigError, GenerationDefaults, load_config, load_generation_defaults, released_config
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.weights import load_model


def _copy(src: str, dst) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def _edit_config(model_dir: str, **changes) -> None:
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        raw = json.load(f)
    raw.update(changes)
    with open(path, "w") as f:
        json.dump(raw, f)


def test_released_layout_round_trips(tiny_dir):
    cfg = load_config(tiny_dir)
    assert cfg.tts_model_type == "custom_voice" and cfg.tts_model_size == "1b7"
    assert cfg.talker.spk_id["ryan"] == 3061 and cfg.talker.spk_is_dialect == {
        "eric": "sichuan_dialect",
        "dylan": "beijing_dialect",
    }
    assert cfg.talker.codec_language_id["russian"] == 2069
    assert cfg.suppressed_codec_ids[0] == 2048 and 2150 not in cfg.suppressed_codec_ids
    for size in ("0b6", "1b7"):
        real = released_config(size, "base")
        from tts.qwen3.config import ModelConfig

        assert ModelConfig.from_dict(real.to_json()) == real


def test_speaker_ids_given_as_lists_are_read(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path / "m")
    raw = json.load(open(os.path.join(d, "config.json")))
    raw["talker_config"]["spk_id"] = {"Ryan": [3061]}
    raw["talker_config"]["spk_is_dialect"] = {"Ryan": False}
    json.dump(raw, open(os.path.join(d, "config.json"), "w"))
    assert load_config(d).talker.spk_id == {"ryan": 3061}


@pytest.mark.parametrize(
    "change,code,words",
    [
        ({"model_type": "qwen2"}, "not_qwen3_tts", "model_type"),
        ({"tokenizer_type": "qwen3_tts_tokenizer_25hz"}, "unsupported_tokenizer", "25 Hz"),
        ({"tts_model_type": "dialogue"}, "bad_config", "tts_model_type"),
        ({"talker_config": None}, "bad_config", "talker_config"),
    ],
)
def test_wrong_configs_are_refused_with_a_reason(tiny_dir, tmp_path, change, code, words):
    d = _copy(tiny_dir, tmp_path / "m")
    _edit_config(d, **change)
    with pytest.raises(ConfigError) as e:
        load_config(d)
    assert e.value.code == code and words in e.value.message


def test_not_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="config.json is missing"):
        load_config(str(tmp_path))
    with pytest.raises(ConfigError, match="not a directory"):
        load_config(str(tmp_path / "nope"))


def test_missing_weights_file_is_named(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path / "m")
    os.remove(os.path.join(d, "model.safetensors"))
    with pytest.raises(ConfigError, match="model.safetensors"):
        load_model(d)


def test_missing_and_unexpected_keys_are_listed(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path / "m")
    path = os.path.join(d, "model.safetensors")
    state = load_file(path)
    del state["talker.codec_head.weight"]
    state["talker.extra.weight"] = torch.zeros(2)
    save_file(state, path)
    with pytest.raises(ConfigError) as e:
        load_model(d)
    assert "missing keys: talker.codec_head.weight" in e.value.message
    assert "unexpected keys: talker.extra.weight" in e.value.message


def test_wrong_tensor_shape_is_named(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path / "m")
    path = os.path.join(d, "model.safetensors")
    state = load_file(path)
    state["talker.codec_head.weight"] = torch.zeros(5, 5)
    save_file(state, path)
    with pytest.raises(ConfigError, match=r"talker.codec_head.weight \(5, 5\)"):
        load_model(d)


@pytest.mark.parametrize(
    "dtype,want", [("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)]
)
def test_weights_load_in_the_requested_dtype(tiny_dir, dtype, want):
    model = load_model(tiny_dir, dtype=dtype)
    assert {p.dtype for p in model.parameters()} == {want}
    ref = load_file(os.path.join(tiny_dir, "model.safetensors"))["talker.codec_head.weight"]
    assert torch.equal(model.talker.codec_head.weight.float(), ref.to(want).float())


def test_unknown_dtype_is_refused(tiny_dir):
    with pytest.raises(ConfigError, match="dtype"):
        load_model(tiny_dir, dtype="int8")


def test_generation_defaults_from_file_and_bad_values(tiny_dir, tmp_path):
    assert load_generation_defaults(tiny_dir) == GenerationDefaults()
    d = _copy(tiny_dir, tmp_path / "m")
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"temperature": 0.5, "top_k": 20, "do_sample": False}, f)
    g = load_generation_defaults(d)
    assert (g.temperature, g.top_k, g.do_sample, g.repetition_penalty) == (0.5, 20, False, 1.05)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"top_k": "fifty"}, f)
    with pytest.raises(ConfigError, match="top_k"):
        load_generation_defaults(d)


def test_tokenizer_reads_special_tokens_at_config_ids(tiny_dir):
    cfg, tok = load_config(tiny_dir), TextTokenizer.from_dir(tiny_dir)
    ids = tok.encode("<|im_start|>assistant\nHello world<|im_end|>\n<|im_start|>assistant\n")
    assert ids[:3] == [cfg.im_start_token_id, cfg.assistant_token_id, tok.token_to_id("Ċ")]
    assert ids[-5:] == [cfg.im_end_token_id, ids[2], cfg.im_start_token_id, cfg.assistant_token_id, ids[2]]
    assert tok.decode(ids) == "<|im_start|>assistant\nHello world<|im_end|>\n<|im_start|>assistant\n"
    assert tok.token_to_id("<tts_pad>") == cfg.tts_pad_token_id


def test_tokenizer_refuses_added_tokens_at_wrong_ids(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path / "m")
    path = os.path.join(d, "tokenizer_config.json")
    raw = json.load(open(path))
    first = min(raw["added_tokens_decoder"], key=int)
    raw["added_tokens_decoder"][str(int(first) + 100)] = raw["added_tokens_decoder"].pop(first)
    json.dump(raw, open(path, "w"))
    with pytest.raises(ConfigError, match="lands at id"):
        TextTokenizer.from_dir(d)
