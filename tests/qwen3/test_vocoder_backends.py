"""Vocoder backends behind one interface: each one's streaming output equals the torch offline decode.

torch eager and ONNX Runtime (CPU) run here; torch CUDA graphs, ONNX Runtime
CUDA and TensorRT run where their device is (scripts/gpu_check.sh times them)
and skip here with the reason.
"""

from __future__ import annotations

import threading

import pytest
import torch

from tts.qwen3.codec import CodecError, load_codec_decoder, write_tiny_codec
from tts.qwen3.codec.vocoder import build_vocoder, choose_auto, split_packet, tensorrt_available

TOL = 1e-4
HAVE_CUDA = torch.cuda.is_available()


def _ort_missing() -> str | None:
    from tts.qwen3.codec.vocoder import onnxruntime_available

    return onnxruntime_available(torch.device("cpu"))


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return load_codec_decoder(write_tiny_codec(tmp_path_factory.mktemp("codec") / "speech_tokenizer", seed=0))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("vocoder-cache")


def _cpu_backends():
    out = [pytest.param("torch", id="torch-eager")]
    reason = _ort_missing()
    out.append(
        pytest.param("onnxruntime", id="onnxruntime-cpu", marks=pytest.mark.skipif(bool(reason), reason=reason or ""))
    )
    return out


@pytest.fixture(scope="module", params=_cpu_backends())
def vocoder(request, decoder, cache):
    return build_vocoder(request.param, decoder, max_batch=4, packets=(1, 2, 4), cache_dir=cache)


def random_codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, frames, 16), generator=torch.Generator().manual_seed(seed))


def engine_stream(vocoder, codes: torch.Tensor, chunks: list[int]) -> torch.Tensor:
    """As the engine does: one persistent slot state, decoding a view of its first rows."""
    from tts.qwen3.codec import StreamingCodecState

    b = codes.shape[0]
    slots = vocoder.new_state(vocoder.max_batch)
    view = StreamingCodecState(slots.frames[:b], [x[:b] for x in slots.buffers])
    out, start = [], 0
    for n in chunks:
        out.append(vocoder.decode_step(codes[:, start : start + n], view))
        start += n
    return torch.cat(out, dim=1)


@pytest.mark.parametrize(
    "chunks", [[1] * 9, [1, 2, 4, 3], [3, 7]], ids=["one-frame", "ramp-1-2-4", "straddling-window"]
)
def test_streaming_equals_torch_offline(vocoder, decoder, chunks):
    codes = random_codes(2, sum(chunks), seed=sum(chunks))
    got = engine_stream(vocoder, codes, chunks)
    assert (got - decoder.decode(codes)).abs().max().item() < TOL


def test_rows_at_different_positions_through_a_slot_state(vocoder, decoder):
    codes = random_codes(4, 16, seed=5)
    ref = decoder.decode(codes)
    slots = vocoder.new_state(4)
    pos, out = [0] * 4, [[] for _ in range(4)]

    def step(rows: list[int], t: int) -> None:
        chunk = torch.stack([codes[r, pos[r] : pos[r] + t] for r in rows])
        pcm = vocoder.decode_step(chunk, slots, rows=rows)
        for i, r in enumerate(rows):
            out[r].append(pcm[i])
            pos[r] += t

    step([2], 9)  # row 2 past the 8-frame window alone
    step([0, 3], 2)
    step([3, 2, 0], 4)  # rows in any order, each at its own position
    step([1, 0, 2, 3], 1)  # row 1 joins late
    for r in range(4):
        got = torch.cat(out[r])
        assert (got - ref[r, : got.numel()]).abs().max().item() < TOL
    assert slots.frames.tolist() == pos


def test_more_rows_than_max_batch_decode_in_pieces(vocoder, decoder):
    codes = random_codes(6, 2, seed=9)  # max_batch is 4
    got = vocoder.decode_step(codes, vocoder.new_state(6))
    assert (got - decoder.decode(codes)).abs().max().item() < TOL


def test_output_is_not_overwritten_by_the_next_step(vocoder):
    state = vocoder.new_state(2)
    first = vocoder.decode_step(random_codes(2, 1, 1), state)
    kept = first.clone()
    vocoder.decode_step(random_codes(2, 1, 2), state)
    assert torch.equal(first, kept)


def test_bad_codes_shape_is_refused(vocoder):
    with pytest.raises(CodecError) as e:
        vocoder.decode_step(torch.zeros(2, 3, 15, dtype=torch.long), vocoder.new_state(2))
    assert e.value.code == "bad_codes"


def test_names_say_what_runs(vocoder):
    assert vocoder.name in ("torch-eager-cpu", "onnxruntime-cpu")
    assert vocoder.describe()["kind"] == vocoder.kind


def test_unknown_kind_is_refused(decoder):
    with pytest.raises(CodecError) as e:
        build_vocoder("openvino", decoder)
    assert e.value.code == "vocoder_unavailable" and "auto, torch, onnxruntime, tensorrt" in e.value.message


def test_tensorrt_without_tensorrt_is_one_clear_refusal(decoder):
    with pytest.raises(CodecError) as e:
        build_vocoder("tensorrt", decoder)
    assert e.value.code == "vocoder_unavailable"
    assert "\n" not in e.value.message and "tensorrt" in e.value.message.lower()


def test_auto_on_cpu_picks_and_says_why():
    kind, why = choose_auto(torch.device("cpu"))
    from tts.qwen3.codec import vocoder as module

    assert kind == ("onnxruntime" if module.CPU_PREFERS_ONNXRUNTIME and not _ort_missing() else "torch")
    assert why


def test_split_packet_uses_captured_sizes():
    assert split_packet(7, (1, 2, 4)) == [4, 2, 1]
    assert split_packet(4, (1, 2, 4)) == [4]
    with pytest.raises(ValueError):
        split_packet(3, (2, 4))


def test_onnx_export_is_cached_by_weights(decoder, cache):
    from tts.qwen3.codec.vocoder import cached_onnx

    first = cached_onnx(decoder, cache, "fp32", 4)
    mtime = first.stat().st_mtime_ns
    assert cached_onnx(decoder, cache, "fp32", 4) == first and first.stat().st_mtime_ns == mtime
    other = load_codec_decoder(write_tiny_codec(cache / "other" / "speech_tokenizer", seed=1))
    assert cached_onnx(other, cache, "fp32", 4) != first


def test_tensorrt_engine_cache_key_covers_everything_an_engine_depends_on():
    from tts.qwen3.codec.trt_vocoder import engine_cache_key

    base = dict(
        gpu_name="NVIDIA H200",
        trt_version="10.13.3",
        onnx_sha256="ab" * 32,
        max_batch=256,
        packets=(1, 2, 4),
        contexts=2,
    )
    key = engine_cache_key(**base)
    assert key.endswith(".plan") and "nvidia-h200" in key and "trt10.13.3" in key and "b256" in key
    for field, value in [
        ("gpu_name", "NVIDIA A100"),
        ("trt_version", "10.14"),
        ("onnx_sha256", "cd" * 32),
        ("max_batch", 384),
        ("packets", (1, 4)),
        ("contexts", 1),
    ]:
        assert engine_cache_key(**{**base, field: value}) != key, field


# -- device backends: run where the device is, skip here with the reason -----------------------


@pytest.mark.skipif(not HAVE_CUDA, reason="torch CUDA graphs need a CUDA device (scripts/gpu_check.sh runs them)")
def test_torch_cuda_graphs_equal_offline(decoder):
    dec = decoder.to("cuda")
    try:
        voc = build_vocoder("torch", dec, max_batch=4, packets=(1, 2, 4))
        assert voc.name == "torch-cuda-graphs"
        codes = random_codes(3, 17, seed=4).cuda()
        got = engine_stream(voc, codes, [1, 2, 4, 4, 3, 3])
        assert (got - dec.decode(codes)).abs().max().item() < TOL
    finally:
        decoder.to("cpu")


@pytest.mark.skipif(
    not HAVE_CUDA or tensorrt_available(torch.device("cuda")) is not None,
    reason=f"TensorRT cannot run here: {tensorrt_available(torch.device('cuda'))}"
    + ("" if HAVE_CUDA else " (and no CUDA device)"),
)
def test_tensorrt_equals_offline_and_uses_one_context_per_thread(decoder, cache):
    dec = decoder.to("cuda")
    try:
        voc = build_vocoder("tensorrt", dec, max_batch=4, packets=(1, 2, 4), cache_dir=cache, contexts=2)
        codes = random_codes(3, 17, seed=4).cuda()
        got = engine_stream(voc, codes, [1, 2, 4, 4, 3, 3])
        assert (got - dec.decode(codes)).abs().max().item() < TOL
        errors = []
        worker = threading.Thread(target=lambda: errors.append(engine_stream(voc, codes, [4, 4])))
        worker.start()
        worker.join()
        assert voc._made == 2
    finally:
        decoder.to("cpu")


def test_gpu_vocoder_bench_logic_runs_on_cpu_and_skips_with_reasons():
    """bench/gpu_vocoder.run (what scripts/gpu_check.sh calls) on the CPU with the tiny shape."""
    from bench.gpu_vocoder import format_table, run

    rows = run(
        budget_s=120,
        backends=("torch-graphs", "tensorrt", "torch-eager"),
        batches=(1, 3),
        packets=(1, 2),
        reps=1,
        device="cpu",
        shape="tiny",
    )
    timed = [r for r in rows if "skipped" not in r]
    assert {(r["batch"], r["packet"]) for r in timed} == {(1, 1), (1, 2), (3, 1), (3, 2)}
    assert all(r["backend"] == "torch-eager" and r["max_err"] < 1e-4 and r["audio_x"] > 0 for r in timed)
    skipped = {r["backend"]: r["skipped"] for r in rows if "skipped" in r}
    assert set(skipped) == {"torch-graphs", "tensorrt"}
    table = format_table(rows)
    assert "skipped" in table and "torch-eager-cpu" in table


def test_vocoder_flags_and_config_values_are_the_same_four():
    from gateway.cli import VOCODERS, build_parser
    from gateway.config import VOCODERS as CONFIG_VOCODERS
    from tts.qwen3.codec.vocoder import KINDS

    assert tuple(VOCODERS) == tuple(CONFIG_VOCODERS) == KINDS
    parser = build_parser()
    assert parser.parse_args(["serve", "--vocoder", "onnxruntime"]).vocoder == "onnxruntime"
    assert (
        parser.parse_args(
            ["synth", "--model-dir", "d", "--text", "t", "--out", "o.wav", "--vocoder", "tensorrt"]
        ).vocoder
        == "tensorrt"
    )
    assert parser.parse_args(["bench", "--random-weights", "0.6b", "--vocoder", "torch"]).vocoder == "torch"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--vocoder", "openvino"])


def test_config_refuses_an_unknown_vocoder_naming_the_key(tmp_path):
    from gateway.config import ConfigError, load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  vocoder: openvino\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    assert "engine.vocoder" in str(e.value) and "onnxruntime" in str(e.value)


def test_a_backend_failing_to_build_is_skipped_and_the_others_still_timed(monkeypatch):
    """A GPU backend can fail to build with a RuntimeError (CUDA, cuDNN, a provider library): the bench
    reports it and times the rest (gpu_check's phase (c) keeps its step timings). The failure is a
    stand-in: no GPU backend can be built on this machine."""
    import tts.qwen3.codec.vocoder as vocoder
    from bench.gpu_vocoder import run

    real = vocoder.build_vocoder

    def build(kind, *a, **kw):
        if kind == "onnxruntime":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(kind, *a, **kw)

    monkeypatch.setattr(vocoder, "build_vocoder", build)
    rows = run(
        budget_s=60,
        backends=("onnxruntime", "torch-eager"),
        batches=(1,),
        packets=(1,),
        reps=1,
        device="cpu",
        shape="tiny",
    )
    assert [r["backend"] for r in rows if "skipped" in r] == ["onnxruntime"]
    assert [r["backend"] for r in rows if "ms_per_step" in r] == ["torch-eager"]
