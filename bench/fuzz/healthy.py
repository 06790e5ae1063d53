"""One ordinary call beside the fuzzer: it must keep its pacing and its audio whatever the fuzzer does.

It runs in its own process (the fuzzer's CPU work holds its own GIL, not the
call's): a blocking websockets client plays turn after turn on /v1/ws
(PCM16 8 kHz) and records each frame's arrival. A frame's lateness is how
far it arrived behind the turn's own 20 ms schedule, anchored on the turn's
earliest frame (so a late first frame does not hide later stalls). Gaps are
what the server reported in `turn.done.gaps`.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

TEXT = (
    "Thank you for calling, your order has shipped and should arrive on Tuesday, "
    "and the courier will text you a window in the morning."
)
FRAME_S = 0.02


def _play(url: str, halt, results, pause_s: float) -> None:
    from websockets.sync.client import connect

    out = {"turns": 0, "frames": 0, "audible_gaps": 0, "micro_gaps": 0, "samples": [], "errors": [], "failure": None}
    try:
        with connect(url, max_size=None, open_timeout=10, close_timeout=2) as ws:
            ws.send(json.dumps({"type": "session.start", "output": {"encoding": "pcm16", "sample_rate": 8000}}))
            n = 0
            while not halt.is_set():
                n += 1
                ws.send(json.dumps({"type": "text", "turn_id": f"h{n}", "text": TEXT, "final": True}))
                arrivals: list[float] = []
                while True:
                    raw = ws.recv(timeout=15)
                    if isinstance(raw, bytes):
                        arrivals.append(time.monotonic())
                        continue
                    m = json.loads(raw)
                    if m["type"] == "error":
                        out["errors"].append(m)
                    elif m["type"] == "turn.done" and m["turn_id"] == f"h{n}":
                        out["turns"] += 1
                        out["audible_gaps"] += m["gaps"]["audible"]
                        out["micro_gaps"] += m["gaps"]["micro"]
                        break
                out["frames"] += len(arrivals)
                if len(arrivals) > 1:
                    offsets = [t - arrivals[0] - k * FRAME_S for k, t in enumerate(arrivals)]
                    base = min(offsets)
                    out["samples"].extend([t, o - base] for t, o in zip(arrivals[1:], offsets[1:]))
                if n == 1:
                    print("first turn played", flush=True)  # the parent's cue: the quiet reference is in
                halt.wait(pause_s)
            ws.send(json.dumps({"type": "session.end"}))
    except Exception as exc:  # noqa: BLE001 - any failure of the healthy call is the finding
        out["failure"] = f"{type(exc).__name__}: {exc}"
    results.put(out)


class HealthyCall:
    """The call in a child process (`python -m bench.fuzz.healthy URL`): it plays until its stdin closes,
    then prints its result as one JSON line."""

    def __init__(self, ws_base: str, pause_s: float = 0.3):
        self.url = ws_base + "/v1/ws"
        self.pause_s = pause_s
        self._proc: subprocess.Popen | None = None
        self.result: dict | None = None

    def start(self, wait_first_turn: bool = True) -> "HealthyCall":
        env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fuzz.healthy", self.url, str(self.pause_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        if wait_first_turn:
            self._proc.stdout.readline()  # one turn played before anything else runs: the quiet reference
        self.started_fuzz_at = time.monotonic()  # CLOCK_MONOTONIC is one clock for every process
        return self

    def stop(self, timeout: float = 25.0) -> dict:
        try:
            out, _ = self._proc.communicate("", timeout=timeout)
            self.result = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            self._proc.kill()
            self.result = {"failure": f"no result from the healthy call ({type(exc).__name__})"}
        return self.summary()

    def summary(self) -> dict:
        """Totals, and frame lateness before the fuzzing began (`quiet_*`, the machine's own noise) and during it."""
        r = self.result or {}
        samples = r.get("samples", [])
        t0 = getattr(self, "started_fuzz_at", 0.0)
        quiet = sorted(x for t, x in samples if t < t0)
        late = sorted(x for t, x in samples if t >= t0)

        def q(values: list[float], p: float) -> float:
            return round(1000 * values[min(len(values) - 1, int(p * len(values)))], 2) if values else float("nan")

        return {
            "turns": r.get("turns", 0),
            "frames": r.get("frames", 0),
            "audible_gaps": r.get("audible_gaps", 0),
            "micro_gaps": r.get("micro_gaps", 0),
            "lateness_p50_ms": q(late, 0.5),
            "lateness_p99_ms": q(late, 0.99),
            "lateness_max_ms": round(1000 * late[-1], 2) if late else float("nan"),
            "quiet_lateness_p99_ms": q(quiet, 0.99),
            "quiet_frames": len(quiet),
            "errors": r.get("errors", []),
            "failure": r.get("failure"),
        }


def main() -> None:
    halt = threading.Event()
    results: queue.Queue = queue.Queue()
    player = threading.Thread(
        target=_play, args=(sys.argv[1], halt, results, float(sys.argv[2]) if len(sys.argv) > 2 else 0.3)
    )
    player.start()
    sys.stdin.read()  # until the parent closes our stdin
    halt.set()
    print(json.dumps(results.get()), flush=True)


if __name__ == "__main__":
    main()
