"""Graph capture logic on CPU (captures themselves need CUDA: `TalkerBatch._capture` is replaced by a stand-in
that records what it was called under). The text track is sized before `capture_all`, a longer prompt in
traffic captures nothing, and no other engine thread calls into CUDA while a capture runs."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest
import torch

from tts.qwen3.batch import TalkerBatch
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.gate import CaptureGate
from tts.qwen3.prompt import Prompt


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("capture"))
    make_tiny_model(d, variant="0b6", kind="base", seed=6)
    return Checkpoint.load(d)


@pytest.fixture
def captured(monkeypatch):
    """Stand-in for a CUDA capture: records (batch, kv_len, wide, text capacity, gate held) per call."""
    calls = []

    def capture(self, n, kv_len, wide=False):
        calls.append((n, kv_len, wide, self.trailing_capacity, self.capture_gate.capturing))
        self._graphs[(n, kv_len, wide)] = graph = object()
        return graph

    monkeypatch.setattr(TalkerBatch, "_capture", capture)
    return calls


def _streaming_prompt(ckpt, n_text: int) -> Prompt:
    """A prompt whose text track runs `n_text` frames (as a Base clone's streaming-text prompt does)."""
    talker = ckpt.model.talker
    with torch.inference_mode():
        prefill = talker.embed_text(torch.arange(12))
    d = prefill.shape[-1]
    text = torch.arange(1, n_text + 1, dtype=prefill.dtype).view(-1, 1).expand(n_text, d).contiguous()
    return Prompt(prefill=prefill, trailing_text=text, pad=torch.zeros(d), text_tokens=n_text)


SAMPLED = dict(temperature=0.9, top_k=50, top_p=1.0, greedy=False, repetition_penalty=1.05)
PRED = dict(temperature=0.9, top_k=50, top_p=1.0, greedy=False)


def test_a_longer_prompt_after_capture_all_captures_nothing(ckpt, captured):
    batch = TalkerBatch(ckpt.model, 2, 128, use_cuda_graphs=True, buckets=(1, 2), kv_step=64)
    batch.admit([0], [_streaming_prompt(ckpt, 8)], [SAMPLED], [PRED])  # before capture: the track may grow
    batch.release(0)
    graphs = batch.capture_all()
    assert graphs == len(captured) == 2 * 2 * 2 and all(gate for *_, gate in captured)
    batch.admit([1], [_streaming_prompt(ckpt, 20)], [SAMPLED], [PRED])  # longer than anything so far
    assert len(captured) == graphs  # no capture in traffic
    assert batch.trailing_capacity == 8 and int(batch.trailing_len[1]) == 8  # it keeps what fits
    assert torch.equal(batch.trailing[1, :, 0], torch.arange(1.0, 9.0))
    with pytest.raises(RuntimeError, match="before capture_all"):
        batch.reserve_trailing(64)


def test_the_engine_sizes_the_text_track_before_any_capture(ckpt, captured):
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    s = EngineSettings(
        device="cpu", dtype="float32", max_batch=2, max_seq_len=256, max_frames=200, kv_bucket=128, use_cuda_graphs=True
    )
    eng = Qwen3Engine(s, checkpoint=ckpt)
    eng.load()
    assert captured and {cap for _, _, _, cap, _ in captured} == {200}  # min(max_frames, max_seq_len), at once
    assert eng._batch.trailing_capacity == 200


def test_a_capture_waits_for_lane_work_and_holds_new_work_back(ckpt):
    """The engine's lane runs its work inside the batch's gate: while a capture holds it, nothing starts."""
    from tts.qwen3.engine import EngineSettings, Qwen3Engine

    eng = Qwen3Engine(EngineSettings(device="cpu", dtype="float32", max_batch=1, max_seq_len=64), checkpoint=ckpt)
    eng.load()
    eng._lane = concurrent.futures.ThreadPoolExecutor(1)
    try:
        gate = eng._batch.capture_gate
        started = threading.Event()
        with gate.capture():
            fut = eng._on_lane(started.set)
            assert not started.wait(0.3)  # held back while the capture runs
        fut.result(timeout=5)
        release = threading.Event()
        busy = eng._on_lane(release.wait, 5)
        time.sleep(0.05)
        entered = threading.Event()

        def capture():
            with gate.capture():
                entered.set()

        t = threading.Thread(target=capture)
        t.start()
        assert not entered.wait(0.3)  # the capture waits for the lane's work in flight
        release.set()
        busy.result(timeout=5)
        assert entered.wait(5)
        t.join()
    finally:
        eng._lane.shutdown(wait=True)


def test_users_of_the_gate_do_not_wait_for_each_other():
    gate = CaptureGate()
    inside = threading.Barrier(2, timeout=5)

    def user():
        with gate.use():
            inside.wait()  # both users inside at once, or this times out

    threads = [threading.Thread(target=user) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not inside.broken


def test_the_pin_covers_the_talkers_attention_only(ckpt):
    """A backend pinned for the talker (one the CPU refuses stands for one that refuses a shape) leaves
    the code predictor's causal attention to torch's own choice."""
    from tts.qwen3.attention import talker_pinned
    from tts.qwen3.generate import predict_codes, talker_step

    batch = TalkerBatch(ckpt.model, 2, 128, use_cuda_graphs=False)
    batch.admit([0], [_streaming_prompt(ckpt, 4)], [SAMPLED], [PRED])
    talker = ckpt.model.talker
    with torch.inference_mode(), talker_pinned(talker, "EFFICIENT_ATTENTION"):
        codes = predict_codes(talker, batch.hidden[:1], batch.code0[:1], batch.pred_rows.slice(1))
        with pytest.raises(RuntimeError):
            talker_step(talker, codes, batch.pad.expand(1, -1), batch.pos[:1], kv_len=128)
    assert all(layer.self_attn.sdpa_backend is None for layer in talker.model.layers)  # unpinned after


def test_a_backend_that_refuses_the_step_is_dropped_before_capture(ckpt, caplog):
    batch = TalkerBatch(ckpt.model, 2, 128, use_cuda_graphs=False, kv_step=64)
    batch.admit([0], [_streaming_prompt(ckpt, 4)], [SAMPLED], [PRED])
    batch.sdpa_backends = {(1, 64): "EFFICIENT_ATTENTION", (1, 128): "MATH"}
    with torch.inference_mode():
        assert batch._warm_up(1, 64, False) is None
        assert batch._warm_up(1, 128, False) == "MATH"
    assert batch.sdpa_backends == {(1, 64): None, (1, 128): "MATH"}
    assert "EFFICIENT_ATTENTION refuses the step" in caplog.text


def test_backends_are_timed_on_views_of_the_cache_and_within_the_deadline(ckpt, monkeypatch):
    """`choose` times q as a view of the fused heads and K/V as views of the cache, and leaves the shapes
    it has no time for to torch. CPU stands in for CUDA here: the timing itself is a stand-in."""
    from tts.qwen3 import attention

    shape = ckpt.config.talker
    ckpt.model.setup_caches(4, 256)
    kv = ckpt.model.talker.model.layers[0].self_attn.kv_cache
    seen = []

    def timed(name, q, k, v, mask, repeats=20):
        fused = (shape.num_attention_heads + shape.num_key_value_heads) * shape.head_dim
        seen.append(
            (
                q.stride(0) == fused,
                k.untyped_storage().data_ptr() == kv.k_cache.untyped_storage().data_ptr(),
                k.stride() == kv.k_cache.stride(),
            )
        )
        time.sleep(0.01)
        return 0.001 if name == "MATH" else None

    real_inputs = attention.decode_inputs
    monkeypatch.setattr(attention, "time_backend", timed)
    monkeypatch.setattr(attention, "decode_inputs", lambda *a: real_inputs(*a[:6], "cpu", a[7]))
    picked, timings = attention.choose(
        shape,
        (1, 2, 4),
        (128, 256),
        torch.float32,
        "cuda",
        cache=(kv.k_cache, kv.v_cache),
        deadline=time.monotonic() + 0.1,
    )
    assert seen and all(s == (True, True, True) for s in seen)
    done = [key for key, name in picked.items() if name == "MATH"]
    left = [key for key, t in timings.items() if t == {"skipped": "time budget spent"}]
    assert done and left and len(done) + len(left) == 6 and all(picked[key] is None for key in left)
