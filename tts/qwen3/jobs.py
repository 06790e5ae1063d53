"""What the Qwen3 engine's parts share: its settings, one request's state (`Job`), request checks."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from tts.engine import CODEC_FRAME_SAMPLES, EngineError, SamplingSettings, SynthesisRequest, SynthesisStream


FRAME_S = CODEC_FRAME_SAMPLES / 24000

# The frame cap of a text, the one rule for every request (whole text or a turn's segment): a sequence
# that never samples end-of-speech ends at FRAMES_BASE + FRAMES_PER_TOKEN * its text tokens frames
# (~0.67 s of speech per token: far above real speech, well below a runaway).
FRAMES_BASE = 24
FRAMES_PER_TOKEN = 8.0


def frame_cap(tokens: int, base: float = FRAMES_BASE, per_token: float = FRAMES_PER_TOKEN) -> int:
    """Frames a text of `tokens` text tokens may take at most (a text counts as one token at least)."""
    return max(1, int(base + per_token * max(tokens, 1)))


def tokens_within(frames: int, base: float = FRAMES_BASE, per_token: float = FRAMES_PER_TOKEN) -> int:
    """Text tokens whose frame cap fits in `frames` (0 when not even one does)."""
    return max(0, int((frames - base) // max(per_token, 1.0)))


@dataclass
class EngineSettings:
    model_dir: str | None = None
    random_weights: str | None = None  # "0.6b" | "1.7b": released shape, random weights (benches)
    device: str = "cuda"
    dtype: str = "bfloat16"
    codec_dtype: str = "float32"
    max_batch: int = 64
    max_queued: int = 1024
    max_seq_len: int = 1024  # KV cache columns per slot: prompt + frames
    max_frames: int = 900  # hard cap per request (72 s)
    frames_base: int = FRAMES_BASE  # cap from text: `frame_cap` (base + per_token * text tokens)
    frames_per_token: float = FRAMES_PER_TOKEN
    ignore_eos: bool = False  # benches: fixed lengths
    packet_ramp: tuple[int, ...] = (1, 2, 4)  # frames per packet; 4 (320 ms) measured best per frame
    vocoder_rows: int = 0  # rows vocoded per step at most (0: no limit)
    preempt_slack_s: float = 3.0  # with every slot taken, a stream this far from running dry yields its
    # slot to a deadline at least this much earlier and resumes later by re-prefilling its frames (0: never)
    use_cuda_graphs: bool | None = None  # None: on CUDA
    vocoder: str = "auto"  # auto | torch | onnxruntime | tensorrt (tts.qwen3.codec.vocoder)
    vocoder_cache: str | None = None  # ONNX exports and TensorRT engines (default ~/.cache/voxgate/vocoder)
    default_speaker: str | None = None
    aligner_dir: str | None = None  # a Qwen3-ForcedAligner checkpoint: word timings per request (tts.aligner)
    voice_cache_dir: str | None = None  # Base: cloned voices' parts (x-vector, reference codes) on disk
    seed: int = 0
    pipeline: bool = True  # vocoder on its own lane (thread; CUDA stream), overlapping the talker steps
    serial_vocoder_rows: int = -1  # with the pipeline: steps holding at most this many streams may wait for
    # their vocoder pass instead of overlapping it, whichever is measured faster (-1: 1 on CPU; 0 on CUDA: never)
    live_lengths: bool = True  # decode attention over the longest live length's bucket, not max_seq_len
    kv_bucket: int = 256  # cache columns are read in multiples of this (graphs: one per bucket)
    prefill_budget_tokens: int = 0  # prompt positions prefilled per step at most (0: 1024 on CUDA, 256 on CPU);
    # the request at the head always gets in, so a long prompt is never starved
    compact: bool = True  # move streams down into free lower slots so the batch bucket follows live streams
    watch_syncs: bool = False  # count host syncs by watching every op (tts.qwen3.syncs; slower)
    pin_sdpa: bool = True  # CUDA: time the SDPA backends per shape at start and pin the fastest
    cpu_threads: int = 0  # CPU: torch intra-op threads (0: the cores shared by the worker and the vocoder
    # lane, i.e. half of them with the pipeline; -1: leave torch's setting alone)


@dataclass(eq=False)  # jobs compare by identity
class Job:
    """One request as the scheduler keeps it: host state only, read and written under the scheduler's lock
    and never handed out (the other parts know a request by its `rid`; their own state for it is theirs)."""

    stream: SynthesisStream
    request: SynthesisRequest
    seq: int  # the request id (`rid`) too: unique per engine, in arrival order
    deadline: float
    cancelled: bool = False
    slot: int | None = None
    cap: int = 0
    generated: int = 0
    vocoded: int = 0  # frames handed to the vocoder lane (the next chunk's first frame index)
    packets: int = 0
    generating: bool = True
    pending: list = field(default_factory=list)  # codes not yet vocoded
    codes: list = field(default_factory=list)  # every frame so far (to resume after preemption)
    admitted_at: float = 0.0
    prompted: bool = False  # the step loop built its prompt (kept there, to resume)
    prompt_len: int = 0  # its positions (the scheduler knows a prompt by these and its text tokens)
    text_tokens: int = 0
    next_code0: int = -1  # the codebook-0 token already sampled for the next frame
    preempted: int = 0
    finished: bool = False  # its last chunk was handed to the vocoder lane
    est_len: int | None = None  # prompt positions, estimated for the prefill budget
    turn: object = None  # tts.qwen3.turn_feed.TurnFeed: turn mode (the text track grows while it runs)
    paused: bool = False  # turn mode: its slot is held, its row does not step (no text for the next frame)

    @property
    def rid(self) -> int:
        return self.seq

    @property
    def priority(self) -> float:
        """When this stream's audio runs out: its deadline plus the audio already handed to the vocoder
        (the worker's own count, so the order does not depend on how far the vocoder lane has got)."""
        return self.deadline + self.vocoded * FRAME_S


def check_deadline(deadline: object) -> None:
    # the worker sorts by it: a non-number there would kill the worker thread for every stream
    if isinstance(deadline, bool) or not isinstance(deadline, numbers.Real) or not math.isfinite(deadline):
        raise EngineError("bad_message", f"deadline must be a finite time.monotonic() instant, got {deadline!r}")


def check_sampling(s: SamplingSettings) -> None:
    """Per-request settings land in device rows shared by the whole batch (and top-k's width is sticky):
    a bad value there would fail every stream at every step, so it is refused up front."""

    def real(v: object) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)

    ok = (
        isinstance(s.greedy, bool)
        and isinstance(s.top_k, numbers.Integral)
        and not isinstance(s.top_k, bool)
        and real(s.temperature)
        and real(s.top_p)
        and real(s.repetition_penalty)
        and s.temperature >= 0
        and 0 < s.top_p <= 1
        and s.repetition_penalty > 0
    )
    if not ok:
        raise EngineError(
            "bad_message",
            "sampling needs temperature >= 0, an integer top_k, 0 < top_p <= 1, "
            f"repetition_penalty > 0 and a bool greedy; got {s}",
        )


class WorkerDeath(BaseException):
    """An injected fault that ends the worker thread, as an error no `except Exception` catches would."""
