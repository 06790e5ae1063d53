"""The batch's device work (admission prefill, one frame for all rows) has no op that makes the host wait
for a device value. On CPU nothing syncs, so this watches the ops themselves: every `.item()` / `int(t)` /
`bool(t)` (aten._local_scalar_dense) and every op whose output shape depends on the data. On CUDA each of
those is a device->host sync that a CUDA graph cannot capture; the step's one copy (`out[:n].cpu()`)
happens after `_step_rows`, outside what is watched here."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tts.qwen3.batch import TalkerBatch
from tts.qwen3.checkpoint import Checkpoint
from tts.qwen3.prompt import build_prompt

SYNCING = {
    "_local_scalar_dense",
    "nonzero",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "repeat_interleave",
}


class SyncWatch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.hits: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in SYNCING:
            self.hits.append(str(func))
        if name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())
        ):
            self.hits.append(f"{func} with a bool mask")
        return func(*args, **(kwargs or {}))


# a sampled row, a greedy row, and the code predictor's settings: both kinds of talker row are watched
SAMPLED = dict(temperature=0.9, top_k=50, top_p=0.8, greedy=False, repetition_penalty=1.05)
GREEDY = dict(temperature=1.0, top_k=50, top_p=1.0, greedy=True, repetition_penalty=1.0)
PREDICTOR = dict(temperature=0.9, top_k=50, top_p=1.0, greedy=False)


def tiny_batch(tmp_path) -> tuple[TalkerBatch, list]:
    """A 4-row TalkerBatch (no CUDA graphs) on the tiny checkpoint, and three prompts for it."""
    from tts.qwen3.tiny import make_tiny_model

    make_tiny_model(str(tmp_path), seed=4)
    ck = Checkpoint.load(str(tmp_path))
    batch = TalkerBatch(ck.model, 4, 160, use_cuda_graphs=False)
    prompts = [
        build_prompt(ck.model.talker, ck.config, ck.tokenizer, t, speaker="ryan", language="en")
        for t in ("Hello world.", "Short", "Another one.")
    ]
    return batch, prompts


def test_admission_and_a_batched_frame_never_wait_for_a_device_value(tmp_path):
    batch, prompts = tiny_batch(tmp_path)
    with SyncWatch() as watch:
        batch.admit([0, 1], prompts[:2], [SAMPLED, GREEDY], [PREDICTOR, PREDICTOR])
        with torch.inference_mode():
            for _ in range(3):
                batch._step_rows(batch.bucket_for(2))
        codes = batch.out[:1, : batch.groups].clone()
    codes = codes.numpy()  # the host copy the engine makes once per step (outside the watch)
    with SyncWatch() as watch_resume:
        # a stream resuming after preemption: its sampler state is rebuilt from its codes on the host
        batch.admit([2], prompts[2:], [SAMPLED], [PREDICTOR], resumes=[(int(codes[0, 0]), codes)])
        with torch.inference_mode():
            batch._step_rows(batch.bucket_for(3))
    assert watch.hits == [] and watch_resume.hits == []


def test_the_watch_sees_a_sync():
    with SyncWatch() as watch:
        t = torch.arange(4)
        int(t[1]), t[t > 1]
    assert len(watch.hits) == 2


def test_admission_a_step_and_release_move_no_data_between_host_and_device(tmp_path):
    """The calls that would copy between host and device on a GPU (tts.qwen3.transfers): none in
    admission (fresh and resumed rows), the step, compaction and release, except the step's one
    planned copy into its pinned output buffer."""
    from tts.qwen3.transfers import HostDeviceCalls

    batch, prompts = tiny_batch(tmp_path)
    with HostDeviceCalls(host_buffers=[batch.host_out]) as calls:
        batch.admit([0, 1], prompts[:2], [SAMPLED, GREEDY], [PREDICTOR, PREDICTOR])
        for _ in range(3):
            batch.launch(2)
            codes = batch.read(2)[:1, : batch.groups].copy()
        batch.admit([2], prompts[2:], [SAMPLED], [PREDICTOR], resumes=[(int(codes[0, 0]), codes)])
        batch.launch(3)
        batch.read(3)
        batch.release(1)
        batch.move(2, 1)
        batch.launch(2)
        batch.read(2)
    assert calls.hits == []
    assert calls.planned == 5  # one copy per launched step


def test_the_transfer_watch_sees_each_kind_of_call():
    from tts.qwen3.transfers import HostDeviceCalls

    t = torch.zeros(4, 3)
    with HostDeviceCalls() as calls:
        t[1, 2] = 3.0  # a scalar into one element: a synchronising copy on CUDA
        t[1] = 0.0  # a row: a device fill (not counted)
        t[:, 0] = 1.0
        t[torch.tensor([0, 1])] = 2.0  # a scalar through a tensor index: index_put_ copies it from the host
        t[[2, 3], 0] = 2.0  # a list index is a tensor index
        t.index_fill_(0, torch.tensor([0, 1]), 2.0)  # the scalar as a kernel argument (not counted)
        torch.tensor([1, 2], device="cpu")
        torch.as_tensor([1.0], device=t.device)
        torch.tensor([1, 2])  # host data staying on the host (not counted)
        t[0, 0].item(), t.tolist(), t.numpy(), t.cpu(), bool(t[0, 0]), int(t[0, 0]), float(t[0, 0])
        t.to("cpu"), t.to(t.device), t.to(torch.float64)  # the last is a cast (not counted)
        t.to(t.device, non_blocking=True)  # (not counted: on CUDA the source must also be pinned)
    assert len(calls.hits) == 14, calls.hits
    assert calls.hits[0].startswith("t[(1, 2)] = 3.0") and "test_host_syncs.py" in calls.hits[0]
    assert all("tensor index" in h for h in calls.hits[1:3]), calls.hits[1:3]


def test_the_sync_watch_counts_host_to_device_copies(monkeypatch):
    """On CPU nothing is a device; with `meta` counted as one, the copies from host memory show."""
    from tts.qwen3 import syncs

    monkeypatch.setattr(syncs, "NOT_DEVICES", ("cpu",))
    dev = torch.zeros(3, device="meta")
    host = torch.ones(3)
    with syncs.watching(syncs.SyncTally()) as watch:
        dev.copy_(host)  # blocking
        dev.copy_(host, non_blocking=True)  # pageable: the driver copies it synchronously
        host.to("meta")
        dev.copy_(dev)  # device to device (not counted)
        # what `dev[idx] = 1.0` dispatches to on CUDA: the scalar as a CPU 0-dim tensor
        dev.index_put_((torch.tensor([0, 1], device="meta"),), torch.tensor(1.0))
        dev.index_put_((torch.tensor([0, 1], device="meta"),), torch.ones(2, device="meta"))  # (not counted)
    assert watch.count == 4, watch.hits
    assert [h.split(" ", 1)[1] for h in watch.hits] == [
        "host->device",
        "host->device from pageable memory",
        "host->device",
        "host->device (a scalar)",
    ]
