"""The codec decoder's own behaviour: loading, refusals, streaming == offline, batching, precision."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts.qwen3.codec import (
    CodecConfig,
    CodecError,
    StreamingCodecState,
    codec_config_dict,
    load_codec_decoder,
    write_tiny_codec,
)

STREAM_TOL = 1e-5


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_codec(tmp_path_factory.mktemp("codec") / "speech_tokenizer", seed=0)


@pytest.fixture(scope="module")
def decoder(folder):
    return load_codec_decoder(folder)


def random_codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, frames, 16), generator=torch.Generator().manual_seed(seed))


def stream(decoder, codes: torch.Tensor, chunks: list[int]) -> torch.Tensor:
    assert sum(chunks) == codes.shape[1]
    state, start, out = decoder.new_state(codes.shape[0]), 0, []
    for n in chunks:
        out.append(decoder.decode_step(codes[:, start : start + n], state))
        start += n
    return torch.cat(out, dim=1)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


# -- config ------------------------------------------------------------------


def test_config_reads_every_size_including_the_window(folder):
    cfg = CodecConfig.from_dir(folder)
    raw = json.loads((folder / "config.json").read_text())["decoder_config"]
    assert cfg.sliding_window == raw["sliding_window"] == 8
    assert (cfg.hidden_size, cfg.latent_dim, cfg.codebook_dim) == (
        raw["hidden_size"],
        raw["latent_dim"],
        raw["codebook_dim"],
    )
    assert cfg.samples_per_frame == 1920 and cfg.frame_rate == 12.5


def test_released_layout_gives_the_released_shape():
    cfg = CodecConfig.from_dict(codec_config_dict())
    assert cfg == CodecConfig()
    assert (cfg.sliding_window, cfg.hidden_size, cfg.num_hidden_layers, cfg.decoder_dim) == (72, 512, 8, 1536)


@pytest.mark.parametrize(
    ("edit", "code", "words"),
    [
        ({"model_type": "qwen3_tts_tokenizer_25hz"}, "unsupported_tokenizer", "25 Hz"),
        ({"model_type": "mimi"}, "wrong_model_type", "'mimi'"),
        ({"model_type": "qwen3_tts"}, "wrong_model_type", "speech_tokenizer/"),
        ({"decoder_config": None}, "bad_config", "decoder_config"),
        ({"decode_upsample_rate": 960}, "bad_config", "samples per frame"),
    ],
)
def test_config_refuses_what_it_cannot_decode(tmp_path, edit, code, words):
    (tmp_path / "config.json").write_text(json.dumps({**codec_config_dict(), **edit}))
    with pytest.raises(CodecError) as err:
        CodecConfig.from_dir(tmp_path)
    assert isinstance(err.value, ValueError)
    assert err.value.code == code and words in str(err.value)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(CodecError, match="config.json not found") as err:
        load_codec_decoder(tmp_path / "nowhere")
    assert err.value.code == "missing_file"


# -- weights -----------------------------------------------------------------


def test_weights_mismatch_lists_missing_and_unexpected_decoder_keys(folder, tmp_path):
    bad = tmp_path / "speech_tokenizer"
    bad.mkdir()
    (bad / "config.json").write_text((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    del tensors["decoder.pre_conv.conv.bias"]
    tensors["decoder.surprise.weight"] = torch.zeros(1)
    tensors["encoder.anything.goes"] = torch.zeros(1)  # the encoder half is not ours to check
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(CodecError) as err:
        load_codec_decoder(bad)
    msg = str(err.value)
    assert err.value.code == "weights_mismatch"
    assert "pre_conv.conv.bias" in msg and "surprise.weight" in msg and "encoder" not in msg.split(";", 1)[1]


def test_waveform_depends_on_every_codebook(decoder):
    codes = random_codes(1, 6, seed=1)
    base = decoder.decode(codes)
    for q in (0, 15):
        changed = codes.clone()
        changed[0, 3, q] = (changed[0, 3, q] + 1) % 2048
        assert max_diff(decoder.decode(changed), base) > 1e-3


def test_offline_decode_is_causal(decoder):
    codes = random_codes(1, 10, seed=2)
    short = decoder.decode(codes[:, :6])
    assert max_diff(decoder.decode(codes)[:, : 6 * 1920], short) <= STREAM_TOL


def test_offline_decode_does_not_depend_on_its_internal_chunk_size(decoder):
    codes = random_codes(1, 17, seed=9)
    assert max_diff(decoder.decode(codes, chunk_frames=5), decoder.decode(codes)) <= STREAM_TOL


def test_bad_codes_are_refused(decoder):
    with pytest.raises(CodecError, match="0..2047") as err:
        decoder.decode(torch.full((1, 2, 16), 2048))
    assert err.value.code == "bad_codes"
    with pytest.raises(CodecError, match=r"\[batch, frames, 16\]"):
        decoder.decode(torch.zeros(1, 2, 15, dtype=torch.long))
    with pytest.raises(CodecError, match="3 rows"):
        decoder.decode_step(torch.zeros(3, 1, 16, dtype=torch.long), decoder.new_state(2))


# -- streaming ---------------------------------------------------------------


def test_one_frame_chunks_equal_offline(decoder):
    codes = random_codes(2, 20, seed=3)
    assert max_diff(stream(decoder, codes, [1] * 20), decoder.decode(codes)) <= STREAM_TOL


def test_chunks_straddling_the_attention_window_equal_offline(decoder):
    w = decoder.config.sliding_window
    frames = 3 * w + 4
    codes = random_codes(1, frames, seed=4)
    offline = decoder.decode(codes)
    for chunks in (
        [w - 1, w + 1, w + 2, frames - 3 * w - 2],
        [w + 3, w + 3, frames - 2 * w - 6],
        [2, 2 * w + 1, frames - 2 * w - 3],
    ):
        assert max_diff(stream(decoder, codes, chunks), offline) <= STREAM_TOL, chunks


def test_mixed_chunk_sizes_equal_offline(decoder):
    codes = random_codes(1, 26, seed=5)
    assert max_diff(stream(decoder, codes, [1, 2, 4, 8, 3, 1, 7]), decoder.decode(codes)) <= STREAM_TOL


def test_empty_chunk_changes_nothing(decoder):
    codes = random_codes(1, 4, seed=6)
    assert max_diff(stream(decoder, codes, [2, 0, 2]), decoder.decode(codes)) <= STREAM_TOL


def test_window_comes_from_the_config(tmp_path):
    w8 = load_codec_decoder(write_tiny_codec(tmp_path / "w8", seed=1))
    w5 = load_codec_decoder(write_tiny_codec(tmp_path / "w5", seed=1, decoder_overrides={"sliding_window": 5}))
    codes = random_codes(1, 12, seed=7)
    a, b = w8.decode(codes), w5.decode(codes)
    # Frames before the 5-frame window fills see the same keys under both windows.
    assert max_diff(a[:, : 5 * 1920], b[:, : 5 * 1920]) <= STREAM_TOL
    assert max_diff(a, b) > 1e-3
    assert max_diff(stream(w5, codes, [4, 3, 5]), b) <= STREAM_TOL


# -- batching of independent streams ----------------------------------------


def test_batched_streams_with_different_histories_equal_each_alone(decoder):
    """Streams that joined at different times step together, each with its own state object."""
    schedule = [  # per step: (stream, frames); equal sizes share one batched call
        [(0, 3)],
        [(0, 2), (1, 2), (2, 5)],
        [(0, 6), (1, 6), (2, 1)],
        [(0, 3), (1, 1), (2, 1)],
        [(2, 4)],
    ]
    lengths = [sum(n for step in schedule for i, n in step if i == s) for s in range(3)]
    codes = [random_codes(1, n, seed=10 + i) for i, n in enumerate(lengths)]
    states = [decoder.new_state(1) for _ in codes]
    pos, pieces = [0, 0, 0], [[], [], []]
    for step in schedule:
        for size in sorted({n for _, n in step}):
            members = [i for i, n in step if n == size]
            batch = torch.cat([codes[i][:, pos[i] : pos[i] + size] for i in members])
            wav = decoder.decode_streams(batch, [states[i] for i in members])
            for row, i in enumerate(members):
                pieces[i].append(wav[row : row + 1])
                pos[i] += size
    for i in range(3):
        assert max_diff(torch.cat(pieces[i], dim=1), decoder.decode(codes[i])) <= STREAM_TOL, i
        assert int(states[i].frames) == lengths[i]


def test_persistent_batch_state_with_rows_joining_and_leaving(decoder):
    """One slot state for all streams; each step names the rows it advances."""
    slots = decoder.new_state(3)
    a, b, c = random_codes(1, 10, 20), random_codes(1, 10, 21), random_codes(1, 10, 22)
    out = {"a": [], "b": [], "c": []}
    out["a"].append(decoder.decode_step(a[:, :4], slots, rows=[0]))
    # b joins in slot 2 and steps together with a; slot 1 stays idle.
    wav = decoder.decode_step(torch.cat([a[:, 4:7], b[:, :3]]), slots, rows=[0, 2])
    out["a"].append(wav[:1])
    out["b"].append(wav[1:])
    assert slots.frames.tolist() == [7, 0, 3]
    # a leaves; c takes its slot after a reset; rows in any order.
    slots.reset([0])
    wav = decoder.decode_step(torch.cat([b[:, 3:10], c[:, :7]]), slots, rows=torch.tensor([2, 0]))
    out["b"].append(wav[:1])
    out["c"].append(wav[1:])
    assert max_diff(torch.cat(out["a"], 1), decoder.decode(a[:, :7])) <= STREAM_TOL
    assert max_diff(torch.cat(out["b"], 1), decoder.decode(b)) <= STREAM_TOL
    assert max_diff(torch.cat(out["c"], 1), decoder.decode(c[:, :7])) <= STREAM_TOL
    assert slots.frames.tolist() == [7, 0, 10]
    assert all(buf[1].abs().sum() == 0 for buf in slots.buffers)  # the idle slot was never touched


def test_stack_and_split_round_trip(decoder):
    codes = random_codes(2, 5, seed=23)
    whole = decoder.new_state(2)
    decoder.decode_step(codes[:, :3], whole)
    parts = whole.split()
    again = StreamingCodecState.stack(parts)
    assert again.frames.tolist() == [3, 3]
    assert all(torch.equal(x, y) for x, y in zip(again.buffers, whole.buffers))
    assert max_diff(decoder.decode_step(codes[:, 3:], again), decoder.decode(codes)[:, 3 * 1920 :]) <= STREAM_TOL


def test_a_step_updates_the_state_in_its_own_storage(decoder):
    """Stable storage lets an engine capture the step (CUDA graphs) and keep slot views valid."""
    state = decoder.new_state(2)
    pointers = [b.data_ptr() for b in state.buffers] + [state.frames.data_ptr()]
    decoder.decode_step(random_codes(2, 3, seed=24), state)
    assert [b.data_ptr() for b in state.buffers] + [state.frames.data_ptr()] == pointers
    assert any(b.abs().sum() > 0 for b in state.buffers)


# -- precision ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "conv_dtype"),
    [
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
    ],
)
def test_half_precision_settings_give_sound_not_nan_or_silence(folder, decoder, dtype, conv_dtype):
    half = load_codec_decoder(folder, dtype=dtype, conv_dtype=conv_dtype)
    assert all(p.dtype == torch.float32 for n, p in half.named_parameters() if n.endswith((".alpha", ".beta")))
    codes = random_codes(1, 10, seed=30)
    reference = decoder.decode(codes)
    for wav in (half.decode(codes), stream(half, codes, [1, 3, 6])):
        assert wav.dtype == torch.float32 and torch.isfinite(wav).all()
        assert wav.abs().mean() > 0.3 * reference.abs().mean()
        assert torch.corrcoef(torch.stack([wav[0], reference[0]]))[0, 1] > 0.9


def test_importing_the_codec_pulls_in_no_reference_code():
    probe = "import sys, tts.qwen3.codec; print(sorted(m for m in ('transformers', 'qwen_tts') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
