"""The CUDA-faithful CPU harness (tts.qwen3.cuda_semantics) and the engine under it: SDPA in each fused
kernel's layout and with its refusals, host<->device traffic counted per request and per step, and the real
graph-capture code run with a stand-in graph that records what a CUDA capture forbids."""

from __future__ import annotations

import asyncio

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tts.engine import SamplingSettings, SynthesisRequest
from tts.qwen3.attention import decode_attention
from tts.qwen3.batch import TalkerBatch
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.cuda_semantics import CudaSdpa, batch_addresses, cuda_graphs_on_cpu
from tts.qwen3.engine import EngineSettings, Qwen3Engine
from tts.qwen3.prompt import build_prompt

GREEDY = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True, repetition_penalty=1.0)
PRED = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("cuda_semantics"))
    make_tiny_model(d, seed=4)
    return Checkpoint.load(d)


# ------------------------------------------------------------------ SDPA
def test_fused_kernels_answer_in_their_layout_and_refuse_what_cuda_refuses():
    q, k, v = (torch.randn(2, 4, 3, 8) for _ in "qkv")
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with CudaSdpa(torch.bfloat16) as sdpa:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert out.stride() == (3 * 4 * 8, 8, 4 * 8, 1)  # [B, M, H, K] storage, seen as [B, H, M, K]
        with pytest.raises(RuntimeError, match="view size"):
            out.view(2, 12, 8)  # what a CPU run never shows
        torch.testing.assert_close(out, want)
        mask = torch.ones(2, 1, 3, 3, dtype=torch.bool)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), pytest.raises(RuntimeError, match="explicit mask"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        kv2 = torch.randn(2, 2, 3, 8)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]), pytest.raises(RuntimeError, match="grouped-query"):
            F.scaled_dot_product_attention(q, kv2, kv2, enable_gqa=True)
        F.scaled_dot_product_attention(q, kv2, kv2, attn_mask=mask, enable_gqa=True)  # only MATH takes it
    assert sdpa.math_only() == [
        "test_cuda_semantics.py:test_fused_kernels_answer_in_their_layout_and_refuse_what_cuda_refuses"
    ]
    assert sdpa.sites()[sdpa.math_only()[0]] == {"FLASH_ATTENTION": 1, "MATH": 1}  # refused calls ran nothing
    with CudaSdpa() as fp32, sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # judged at the tensors' own dtype
        with pytest.raises(RuntimeError, match="dtype torch.float32"):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert fp32.refused


def test_decode_attention_takes_a_fused_kernel_in_its_layout():
    """Fails with `out.view(...)` after SDPA (the layout) and with GQA left to `enable_gqa` (MATH only)."""
    q = torch.randn(3, 16, 8, 96)[:, :, :1, :64]  # the talker's head layout, a view as in the step
    k, v = (torch.randn(3, 8, 40, 64) for _ in "kv")
    mask = torch.arange(40).view(1, 1, 1, 40) < torch.tensor([5, 40, 17]).view(3, 1, 1, 1)
    want = decode_attention(q, k, v, mask)
    with CudaSdpa(torch.bfloat16) as sdpa:
        out = decode_attention(q, k, v, mask)
    torch.testing.assert_close(out, want)
    assert sdpa.math_only() == [] and sdpa.sites() == {"attention.py:decode_attention": {"EFFICIENT_ATTENTION": 1}}


def test_an_error_that_is_not_a_refusal_is_not_read_as_one(ckpt, monkeypatch):
    """Timing a backend and the capture's warm-up take only a refusal ("No available kernel") as "this kernel
    cannot run it": any other error (the `.view` on a fused kernel's layout was one) propagates, and the
    pinned backend is not silently dropped. The old code caught every RuntimeError as a refusal."""
    import tts.qwen3.model as model
    from tts.qwen3 import attention

    def broken(q, k, v, mask):
        raise RuntimeError("view size is not compatible with input tensor's size and stride")

    q, k, v, mask = attention.decode_inputs(1, 64, 4, 2, 16, torch.float32, "cpu")
    monkeypatch.setattr(attention, "decode_attention", broken)
    with pytest.raises(RuntimeError, match="view size"):
        attention.time_backend("MATH", q, k, v, mask)
    batch = TalkerBatch(ckpt.model, 2, 128, use_cuda_graphs=False, kv_step=64)
    batch.admit([0], _prompts(ckpt, ("Hello.",)), [GREEDY], [PRED])
    batch.sdpa_backends = {(1, 64): "MATH"}
    monkeypatch.setattr(model, "decode_attention", broken)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="view size"):
        batch._warm_up(1, 64, False)
    assert batch.sdpa_backends[(1, 64)] == "MATH"  # not recorded as unusable


# ------------------------------------------------------------------ the engine, served
def _run(ckpt, texts, **kw):
    eng = Qwen3Engine(
        EngineSettings(device="cpu", dtype="float32", max_batch=4, max_seq_len=200, watch_syncs=True, **kw),
        checkpoint=ckpt,
    )

    async def main():
        eng.load()
        await eng.start()
        try:

            async def one(text):
                req = SynthesisRequest(text=text, voice="ryan", language="en", sampling=SamplingSettings(greedy=True))
                return [c async for c in eng.synthesize(req)]

            return await asyncio.gather(*(one(t) for t in texts))
        finally:
            await eng.close()

    return asyncio.run(main()), eng.stats()


def test_the_engine_serves_under_cuda_semantics(ckpt, cuda_semantics, monkeypatch):
    """Every stream completes with SDPA answering as CUDA does; the talker's prefill takes flash (causal, no
    mask), no call falls to MATH; the request path makes no synchronous copy or device read, and its
    traffic is the staged sends per request and admission and one planned copy per step and vocoder call.
    Fails on the old code at the first step (`.view` on SDPA's output), with the prefill on the masked path
    (EFFICIENT), and with a prompt's token ids copied by `torch.tensor(ids, device=...)` (7 hits a request)."""
    sdpa, moves = cuda_semantics
    admissions = []
    real_admit = TalkerBatch.admit
    monkeypatch.setattr(
        TalkerBatch,
        "admit",
        lambda self, slots, *a, **k: (admissions.append(slots), real_admit(self, slots, *a, **k))[1],
    )
    texts = ("Hello world.", "Another one here.", "A third one.")
    out, stats = _run(ckpt, texts, vocoder="torch")
    assert all(out) and stats["completed"] == 3 and stats["failed"] == 0
    assert sdpa.math_only() == [] and not sdpa.refused
    assert sdpa.sites()["attention.py:prefill_attention"].keys() == {"FLASH_ATTENTION"}
    hits, sent, planned = moves.take()
    assert hits == []
    assert planned == stats["steps"] + stats["vocoder_calls"]  # the step's results, each vocoder call's PCM
    # every send is staged (pinned, non-blocking): 7 token-id lists per request (prompt.py), one per admission
    # (the batch's per-row values), the vocoder rows reset per admission and gathered when streams are out of
    # step (codec/state.py: its row indices)
    n = len(admissions)
    assert sent["qwen3/prompt.py"] == 7 * len(texts) and sent["qwen3/batch.py"] == n, (sent, admissions)
    assert n <= sent["codec/state.py"] <= n + 2 * stats["vocoder_calls"], sent
    assert sent.keys() == {"qwen3/prompt.py", "qwen3/batch.py", "codec/state.py"}, sent


def test_turn_text_preemption_and_resume_move_data_only_through_staged_copies(ckpt, cuda_semantics):
    """A turn fed word by word (its text rows written as it runs), two long streams, a cancel and an urgent
    request that preempts one of them (its prompt and frames re-prefilled when it resumes), on 2 slots, the
    event loop's calls counted too: no synchronous copy or device read anywhere; the turn's text and the
    resumed codes are staged sends of the step loop. Fails on the old code with the turn text's and the
    resume's `torch.tensor(..., device=...)` / `.to(device)` and the vocoder rows' index copies."""
    import time

    sdpa, moves = cuda_semantics
    s = EngineSettings(
        device="cpu",
        dtype="float32",
        max_batch=2,
        max_seq_len=256,
        frames_base=40,
        frames_per_token=1.0,
        preempt_slack_s=0.5,
        ignore_eos=True,
        watch_syncs=True,
        vocoder="torch",
    )
    eng = Qwen3Engine(s, checkpoint=ckpt)
    greedy = SamplingSettings(greedy=True)

    async def collect(stream):
        return [c async for c in stream]

    async def main():
        await eng.start()
        try:
            with moves.count():  # the event loop's own calls
                turn = eng.open_turn(SynthesisRequest(text="Hello", voice="vivian", language="en", sampling=greedy))
                first = asyncio.ensure_future(collect(turn))
                for piece in (" there,", " my", " friend."):
                    await asyncio.sleep(0.05)
                    turn.append(piece)
                turn.finish()
                far = [
                    eng.synthesize(
                        SynthesisRequest(
                            text="A longer answer that runs a while.", sampling=greedy, deadline=time.monotonic() + 30
                        )
                    )
                    for _ in range(2)
                ]
                await far[0].__aiter__().__anext__()
                gone = eng.synthesize(SynthesisRequest(text="Cancelled soon.", sampling=greedy))
                gone.cancel()
                urgent = eng.synthesize(SynthesisRequest(text="Now.", sampling=greedy, deadline=time.monotonic()))
                await asyncio.wait_for(asyncio.gather(first, collect(urgent)), 120)
                for stream in far:
                    stream.cancel()
        finally:
            await eng.close()

    asyncio.run(main())
    assert eng.counters["preempted"] >= 1 and eng.counters["cancelled"] >= 1  # the scenario ran its course
    hits, sent, planned = moves.take()
    assert hits == []
    assert sent["qwen3/step_loop.py"] >= 2, sent  # the turn's text rows and the resumed codes, staged
    assert set(sent) <= {"qwen3/prompt.py", "qwen3/batch.py", "codec/state.py", "qwen3/step_loop.py"}, sent
    assert sdpa.math_only() == [] and not sdpa.refused


# ------------------------------------------------------------------ CUDA graphs
def _prompts(ckpt, texts):
    return [
        build_prompt(ckpt.model.talker, ckpt.config, ckpt.tokenizer, t, speaker="ryan", language="en") for t in texts
    ]


def _codes(batch, prompts, steps):
    batch.admit(list(range(len(prompts))), prompts, [GREEDY] * len(prompts), [PRED] * len(prompts))
    return [batch.read(batch.launch(len(prompts))).copy() for _ in range(steps)]


def test_the_real_capture_code_runs_and_replays_what_eager_computes(ckpt):
    """`TalkerBatch._capture` itself (warm-up, pinned attention, capture, restore) with a stand-in graph
    that replays the captured ops on the same tensors: codes equal the eager batch's, nothing forbidden.
    Fails on the old code: the capture's warm-up hits the `.view` (CUDA layout)."""
    prompts = _prompts(ckpt, ("Hello world.", "Short"))
    eager = TalkerBatch(ckpt.model, 2, 128, use_cuda_graphs=False, buckets=(1, 2), kv_step=64)
    with CudaSdpa(torch.bfloat16):
        want = _codes(eager, prompts, 6)
    batch = TalkerBatch(ckpt.model, 2, 128, use_cuda_graphs=True, buckets=(1, 2), kv_step=64)
    with CudaSdpa(torch.bfloat16) as sdpa, cuda_graphs_on_cpu(batch_addresses(batch)) as report:
        assert batch.capture_all() == 2 * 2 * 2
        got = _codes(batch, prompts, 6)
    assert report.forbidden == []
    assert sum(g.replays for g in report.graphs) == 6 and sdpa.math_only() == []
    for a, b in zip(want, got):
        assert (a == b).all()


def test_the_stand_in_graph_records_what_a_capture_forbids(ckpt, monkeypatch):
    """A host read inside the step, and a buffer the graph reads replaced after capture, are both reported."""
    real = TalkerBatch._step_rows

    def with_a_read(self, n, kv_len=None, wide=False):
        real(self, n, kv_len, wide)
        self.pos[0].item()

    batch = TalkerBatch(ckpt.model, 1, 64, use_cuda_graphs=True, buckets=(1,), kv_step=64)
    with cuda_graphs_on_cpu(batch_addresses(batch)) as report:
        monkeypatch.setattr(TalkerBatch, "_step_rows", with_a_read)
        batch.capture_all()
        monkeypatch.setattr(TalkerBatch, "_step_rows", real)
        batch.pad = batch.pad.clone()  # the graph still reads the old tensor's address
        _codes(batch, _prompts(ckpt, ("Hi.",)), 1)
    assert any("capture:" in f and "item()" in f for f in report.forbidden), report.forbidden
    assert any("TalkerBatch[0].pad moved" in f for f in report.forbidden), report.forbidden
