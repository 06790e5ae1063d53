"""What the engine benches share: the bench texts, a stream's timestamps (`_Run`), engine settings from bench
arguments, percentiles. Its own module so that bench.engine_bench (which dispatches to the remote and clone
benches) and bench.remote_bench both import it, not each other."""

from __future__ import annotations

import resource
import time


TEXTS = {
    "short": "Hello, how can I help you today?",
    "medium": "Thanks for calling. Your order shipped this morning and should arrive on Thursday before noon.",
    "long": (
        "I have checked your account and I can see two payments from last week. The first one went through "
        "on Monday, but the second one was declined by your bank, so I have put a hold on the order until "
        "we can confirm the card details with you."
    ),
}


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _mem_mb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# mixed lengths for arrival benches: short acknowledgements to long explanations
MIXED_TEXTS = [
    "Yes.",
    "Sure, one moment.",
    TEXTS["short"],
    "Could you repeat the last four digits, please?",
    TEXTS["medium"],
    "I can book that for Tuesday at ten, or Wednesday after lunch if that suits you better.",
    TEXTS["long"],
]


def _settings(args, max_batch: int):
    import torch

    from tts.qwen3.engine import EngineSettings

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    s = EngineSettings(
        model_dir=args.model_dir,
        random_weights=args.random_weights,
        device=device,
        dtype=dtype,
        max_batch=max_batch,
        max_queued=100_000,
        pipeline=not getattr(args, "serial", False),
    )
    longest = max(len(t) for t in TEXTS.values())
    s.vocoder = getattr(args, "vocoder", None) or s.vocoder
    if getattr(args, "serial_vocoder_rows", None) is not None:
        s.serial_vocoder_rows = args.serial_vocoder_rows
    if args.frames:
        s.frames_base, s.frames_per_token, s.max_frames, s.ignore_eos = args.frames, 0.0, args.frames, True
        s.max_seq_len = longest + 64 + args.frames + 8  # a token per character at worst (tiny byte BPE)
    else:
        s.max_seq_len = longest + 64 + s.max_frames
        s.max_frames = min(s.max_frames, 400)
    return s


class _Run:
    """Timestamps of one stream, for TTFA, RTF and keeping up with real time."""

    def __init__(self, stream):
        self.stream = stream
        self.t0 = time.monotonic()
        self.arrivals: list[tuple[float, float]] = []  # (arrival time, audio seconds before this chunk)
        self.audio_s = 0.0
        self.t_end = None

    async def consume(self) -> None:
        async for chunk in self.stream:
            self.arrivals.append((time.monotonic(), self.audio_s))
            self.audio_s += chunk.duration_s
        self.t_end = time.monotonic()

    @property
    def ttfa_s(self) -> float:
        return self.arrivals[0][0] - self.t0 if self.arrivals else float("nan")

    def keeps_up(self, slack_s: float = 0.0) -> bool:
        """Every chunk after the first arrives before playout (started at the first chunk) needs it."""
        if not self.arrivals:
            return False
        start = self.arrivals[0][0]
        return all(t - start <= before + slack_s for t, before in self.arrivals[1:])
