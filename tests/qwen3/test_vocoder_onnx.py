"""The ONNX export of the streaming codec decoder, run by a plain onnxruntime.InferenceSession.

Whatever the chunking, feeding the exported step its own state outputs back
must give the torch offline decode (within 1e-4 in fp32); half precision is
reported as max error and SNR against fp32 and must stay sound.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed (pip install 'voxgate[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'voxgate[onnx]')")

from gateway.cli import main as cli_main  # noqa: E402
from tts.qwen3.codec import CodecError, load_codec_decoder, write_tiny_codec  # noqa: E402
from tts.qwen3.codec.onnx_export import OPSET, export_onnx, read_metadata  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return load_codec_decoder(write_tiny_codec(tmp_path_factory.mktemp("codec") / "speech_tokenizer", seed=0))


@pytest.fixture(scope="module")
def exported(decoder, tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "vocoder.onnx"
    return path, export_onnx(decoder, path, max_batch=8)


@pytest.fixture(scope="module")
def session(exported):
    return ort.InferenceSession(str(exported[0]), providers=["CPUExecutionProvider"])


def random_codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, frames, 16), generator=torch.Generator().manual_seed(seed))


class OrtStream:
    """Plain-ONNX Runtime streaming: the state is whatever the last step returned (NumPy arrays)."""

    def __init__(self, session, decoder, batch: int):
        fresh = decoder.new_state(batch)
        self.session = session
        self.frames = fresh.frames.numpy()
        self.state = [b.numpy() for b in fresh.buffers]

    def step(self, codes: torch.Tensor, rows: list[int] | None = None) -> np.ndarray:
        rows = list(range(len(self.frames))) if rows is None else rows
        feeds = {"codes": codes.numpy(), "frames": self.frames[rows]}
        feeds.update({f"state.{i}": s[rows] for i, s in enumerate(self.state)})
        pcm, frames, *state = self.session.run(None, feeds)
        self.frames[rows] = frames
        for mine, new in zip(self.state, state):
            mine[rows] = new
        return pcm


def stream(session, decoder, codes: torch.Tensor, chunks: list[int]) -> np.ndarray:
    assert sum(chunks) == codes.shape[1]
    s, start, out = OrtStream(session, decoder, codes.shape[0]), 0, []
    for n in chunks:
        out.append(s.step(codes[:, start : start + n]))
        start += n
    return np.concatenate(out, axis=1)


def test_export_passes_the_checker_and_records_opset_size_and_state(exported, decoder):
    path, info = exported
    onnx.checker.check_model(str(path))
    assert info["opset"] == OPSET and info["bytes"] == path.stat().st_size > 0
    meta = read_metadata(path)
    assert meta["precision"] == "fp32" and meta["max_batch"] == 8
    assert meta["config"] == decoder.config
    assert [s for s, _ in meta["state"]] == [tuple(b.shape[1:]) for b in decoder.new_state(1).buffers]
    model = onnx.load(str(path), load_external_data=False)
    assert model.opset_import[0].version == OPSET
    names = [i.name for i in model.graph.input]
    assert names[:2] == ["codes", "frames"] and names[2:] == [f"state.{i}" for i in range(info["state_tensors"])]
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims["codes"][:2] == ["batch", "frames"] and dims["state.0"][0] == "batch"


@pytest.mark.parametrize(
    "chunks",
    [[1] * 12, [1, 2, 4, 4, 4, 4, 3], [3, 7, 9, 5], [11, 1, 12]],
    ids=["one-frame", "ramp-1-2-4", "straddling-window", "long-short"],
)
def test_plain_onnxruntime_streaming_equals_torch_offline(session, decoder, chunks):
    codes = random_codes(2, sum(chunks), seed=len(chunks))
    ref = decoder.decode(codes).numpy()
    got = stream(session, decoder, codes, chunks)
    assert np.abs(got - ref).max() < TOL
    assert np.abs(ref).max() > 0.05  # real audio, not a silent graph


def test_rows_at_different_positions_in_one_batch(session, decoder):
    codes = random_codes(3, 30, seed=7)
    ref = decoder.decode(codes).numpy()
    s = OrtStream(session, decoder, 3)
    out = [[], [], []]
    out[0].append(s.step(codes[0:1, :10], rows=[0])[0])  # row 0 runs 10 frames ahead (past the window)
    out[1].append(s.step(codes[1:2, :3], rows=[1])[0])
    pos = [10, 3, 0]
    for t in (4, 4, 2, 1):  # then all three together, each at its own position
        chunk = torch.stack([codes[r, pos[r] : pos[r] + t] for r in range(3)])
        pcm = s.step(chunk)
        for r in range(3):
            out[r].append(pcm[r])
            pos[r] += t
    for r in range(3):
        got = np.concatenate(out[r])
        assert np.abs(got - ref[r, : len(got)]).max() < TOL


def test_one_file_serves_any_batch_and_packet_length(session, decoder):
    for batch, t in ((1, 1), (5, 2), (8, 4)):
        codes = random_codes(batch, t, seed=batch)
        got = stream(session, decoder, codes, [t])
        assert got.shape == (batch, t * 1920)
        assert np.abs(got - decoder.decode(codes).numpy()).max() < TOL


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_export_keeps_snake_in_fp32_and_stays_sound(decoder, tmp_path, precision):
    path = tmp_path / f"v-{precision}.onnx"
    info = export_onnx(decoder, path, precision=precision)
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    # every Sin (SnakeBeta) reads fp32: an fp16/bf16 Sin is the silent-output failure
    types = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.value_info, *model.graph.input)}
    produced_by_cast = {n.output[0]: n.attribute[0].i for n in model.graph.node if n.op_type == "Cast"}
    sins = [n for n in model.graph.node if n.op_type == "Sin"]
    assert sins
    for n in sins:
        src = n.input[0]
        elem = types.get(src, produced_by_cast.get(src))
        assert elem == onnx.TensorProto.FLOAT, f"{precision}: Sin {n.name} reads type {elem}"
    half = {"fp16": onnx.TensorProto.FLOAT16, "bf16": onnx.TensorProto.BFLOAT16}[precision]
    assert any(i.data_type == half for i in model.graph.initializer), "no half-precision weights in a half export"
    assert info["bytes"] == path.stat().st_size
    if precision == "fp16":  # ONNX Runtime's CPU provider runs fp16, not bf16 (bf16 is for TensorRT)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        codes = random_codes(2, 12, seed=3)
        ref = decoder.decode(codes).numpy()
        got = stream(sess, _HalfStateDecoder(decoder, model), codes, [1, 2, 4, 4, 1])
        err = float(np.abs(got - ref).max())
        snr = 10 * np.log10((ref**2).sum() / ((got - ref) ** 2).sum())
        print(f"fp16 export vs fp32: max error {err:.2e}, SNR {snr:.1f} dB")
        assert np.isfinite(got).all() and np.abs(got).max() > 0.05
        assert snr > 30.0


class _HalfStateDecoder:
    """new_state in the export's own state dtypes (half buffers for a half export)."""

    def __init__(self, decoder, model):
        self.decoder = decoder
        self.dtypes = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}

    def new_state(self, batch):
        state = self.decoder.new_state(batch)
        for i, b in enumerate(state.buffers):
            if self.dtypes[f"state.{i}"] == onnx.TensorProto.FLOAT16:
                state.buffers[i] = b.half()
        return state


def test_cli_export_vocoder_writes_a_checked_file(decoder, tmp_path, capsys):
    folder = write_tiny_codec(tmp_path / "ckpt" / "speech_tokenizer", seed=0)
    out = tmp_path / "v.onnx"
    assert cli_main(["export-vocoder", "--model-dir", str(folder.parent), "--out", str(out), "--max-batch", "4"]) == 0
    err = capsys.readouterr().err
    assert "opset 17" in err and "onnx.checker ok" in err
    assert read_metadata(out)["max_batch"] == 4


@pytest.mark.parametrize(
    "argv, code",
    [
        (["--precision", "fp8"], None),  # argparse refuses the choice
        (["--max-batch", "0"], "bad_max_batch"),
    ],
)
def test_cli_export_vocoder_refuses_bad_arguments(tmp_path, capsys, argv, code):
    folder = write_tiny_codec(tmp_path / "speech_tokenizer", seed=0)
    args = ["export-vocoder", "--model-dir", str(folder), "--out", str(tmp_path / "v.onnx"), *argv]
    if code is None:
        with pytest.raises(SystemExit):
            cli_main(args)
        return
    assert cli_main(args) == 2
    assert code in capsys.readouterr().err


def test_cli_export_vocoder_of_a_missing_folder_is_one_clear_line(tmp_path, capsys):
    assert cli_main(["export-vocoder", "--model-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "v.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing_file" in err


def test_read_metadata_refuses_a_foreign_onnx_file(tmp_path):
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "other.onnx"))
    with pytest.raises(CodecError) as e:
        read_metadata(tmp_path / "other.onnx")
    assert e.value.code == "bad_onnx"


def test_a_session_without_the_provider_asked_for_is_refused(session):
    """onnxruntime falls back to CPU quietly when its CUDA provider cannot load: the vocoder checks the
    session's own providers after building it (here a CPU session stands for that fallback)."""
    from tts.qwen3.codec import CodecError
    from tts.qwen3.codec.ort_vocoder import require_provider

    require_provider(session, "CPUExecutionProvider")
    with pytest.raises(CodecError, match="CUDAExecutionProvider did not load") as e:
        require_provider(session, "CUDAExecutionProvider")
    assert e.value.code == "vocoder_unavailable"
