"""The Qwen3 engine's health, injected faults (tests) and trace spans."""

from __future__ import annotations

import time

from tts.qwen3.jobs import WorkerDeath


class Diagnostics:
    """Mixin of `Qwen3Engine` (tts/qwen3/engine.py): the state it reads is set up there."""

    def health(self) -> str | None:
        if self._died:
            return self._died
        busy = self._busy_since
        if busy is not None and time.monotonic() - busy > self.stall_after_s:
            return f"the engine step has not returned for {time.monotonic() - busy:.1f} s (hung)"
        return None

    def inject_fault(self, kind: str, seconds: float = 3600.0) -> None:
        """Tests: the worker's next step `raise`s, `hang`s for `seconds`, or the worker `die`s."""
        if kind not in ("raise", "hang", "die"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._cond:
            self._fault = (kind, seconds)
            self._cond.notify()

    def _fault_point(self) -> None:
        fault, self._fault = self._fault, None
        if fault is None:
            return
        if fault[0] == "hang":
            time.sleep(fault[1])
        elif fault[0] == "raise":
            raise RuntimeError("injected fault: the step raised")
        else:
            raise WorkerDeath("injected fault: the worker died")

    def enable_trace(self, stages: bool = True) -> None:
        """Record spans; with `stages` (eager only) also code_predictor / talker_step / sampling
        inside each step, synchronising the device between them (slower: for traces, not numbers)."""
        self.trace = []
        if stages and self._batch is not None and not self._batch.use_cuda_graphs:
            import torch

            cuda = self._batch.device.type == "cuda"
            last = [time.perf_counter()]

            def mark(name: str) -> None:
                if cuda:
                    torch.cuda.synchronize()
                now = time.perf_counter()
                self.trace.append((name, last[0], now - last[0], {}))
                last[0] = now

            def reset() -> None:
                last[0] = time.perf_counter()

            self._batch.stage_marks = mark
            self._stage_reset = reset

    def _span(self, name: str, t0: float, args: dict) -> None:
        if self.trace is not None:
            self.trace.append((name, t0, time.perf_counter() - t0, args))
