"""The Qwen3 engine's health, timings, trace spans and injected faults (tests): one object, written by the
step loop and the vocoder lane, read by the engine's face (stats, /readyz, benches)."""

from __future__ import annotations

import collections
import time

from tts.qwen3.jobs import WorkerDeath


class Diagnostics:
    def __init__(self):
        self.timings = {"prefill": 0.0, "step": 0.0, "vocoder": 0.0}
        self.step_times: list | None = None  # (batch bucket, kv bucket, seconds, end perf_counter) per step
        self.prefill_times: list = []  # (requests, prompt positions, seconds, end) per admission, with step_times
        self.trace: list | None = None  # (name, start_s, dur_s, args) spans when enabled
        self.recent_step_s: collections.deque = collections.deque(maxlen=4096)  # each step's seconds (/metrics)
        # health (gateway /readyz): the worker's death, or a step that does not return
        self.died: str | None = None
        self.busy_since: float | None = None
        self.stall_after_s = 30.0
        self.fault: tuple[str, float] | None = None  # inject_fault (tests)

    def health(self) -> str | None:
        if self.died:
            return self.died
        busy = self.busy_since
        if busy is not None and time.monotonic() - busy > self.stall_after_s:
            return f"the engine step has not returned for {time.monotonic() - busy:.1f} s (hung)"
        return None

    def inject_fault(self, kind: str, seconds: float = 3600.0) -> None:
        """Tests: the worker's next step `raise`s, `hang`s for `seconds`, or the worker `die`s."""
        if kind not in ("raise", "hang", "die"):
            raise ValueError(f"unknown fault {kind!r}")
        self.fault = (kind, seconds)

    def fault_point(self) -> None:
        fault, self.fault = self.fault, None
        if fault is None:
            return
        if fault[0] == "hang":
            time.sleep(fault[1])
        elif fault[0] == "raise":
            raise RuntimeError("injected fault: the step raised")
        else:
            raise WorkerDeath("injected fault: the worker died")

    def span(self, name: str, t0: float, args: dict) -> None:
        if self.trace is not None:
            self.trace.append((name, t0, time.perf_counter() - t0, args))
