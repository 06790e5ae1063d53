"""VAD cost per call: CPU seconds per call-second of caller audio at N concurrent calls.

Every call gets its own stream of 16 kHz audio, pushed 20 ms at a time as a
media leg would; a pass runs whenever a window period of audio has arrived,
exactly as `audio.vad.VadPool` does on its clock, but back to back (no
sleeping), so the process CPU time over the run is the cost of N calls'
VAD for `seconds` of their audio. Reported per backend and call count:

* `cpu_ms_per_call_s`  — CPU ms spent per second of one call's audio
* `cores_at_n`         — cores that N calls take in real time (= N × the above / 1000)
* `pass_ms_p50/p95`    — wall time of one pass (one model call for all N): it must stay below
  the window period (32 ms Silero, 30 ms WebRTC) for one core to keep up

    python -m bench.vad_bench --calls 100,300 --seconds 10 --backend silero,webrtc [--wav caller.wav] [--out result.json]

The audio is a caller track from `--wav` (any rate, mono 16-bit; resampled
to 16 kHz), or by default generated pink noise with bursts of harmonic tones;
Silero's cost does not depend on what it hears, WebRTC's barely.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import wave

import numpy as np

from audio.resample import StreamResampler
from audio.vad import SAMPLE_RATE, VadPool, make_backend
from bench import plots

FRAME = SAMPLE_RATE // 50  # 20 ms pushes


def default_audio(seconds: float, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    pink = np.fft.irfft(
        (rng.standard_normal(n // 2 + 1) + 1j * rng.standard_normal(n // 2 + 1))
        / np.sqrt(np.maximum(np.fft.rfftfreq(n, 1 / SAMPLE_RATE), 20.0)),
        n,
    )
    pink *= 0.03 / (np.sqrt(np.mean(pink**2)) + 1e-9)
    t = np.arange(n) / SAMPLE_RATE
    burst = (np.sin(2 * np.pi * 0.5 * t) > 0).astype(np.float32)  # one second on, one off
    tone = sum(np.sin(2 * np.pi * 220 * k * t) / k for k in (1, 2, 3, 4)) * 0.1
    return np.clip((pink + burst * tone) * 32768, -32768, 32767).astype(np.int16)


def load_wav(path: str) -> np.ndarray:
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"{path}: need mono 16-bit PCM")
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    if rate != SAMPLE_RATE:
        rs = StreamResampler(rate, SAMPLE_RATE)
        pcm = np.concatenate([rs.process(pcm), rs.flush()])
    return np.clip(pcm * 32768, -32768, 32767).astype(np.int16)


def run_one(backend_kind: str, calls: int, seconds: float, audio: np.ndarray) -> dict:
    backend = make_backend(backend_kind)
    pool = VadPool(backend, max_backlog_ms=10_000)
    events = [0]
    streams = [pool.open(on_event=lambda s, e: events.__setitem__(0, events[0] + 1)) for _ in range(calls)]
    total = int(seconds * SAMPLE_RATE)
    reps = -(-total // len(audio)) + 1
    track = np.tile(audio, reps)
    offsets = np.random.default_rng(calls).integers(0, len(audio), calls)  # calls are not in step with each other
    pass_ms = []
    arrived_since_pass = 0
    # warm-up: one pass of every call
    for s, off in zip(streams, offsets):
        s.push(track[off : off + backend.window])
    pool.run_pass()
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    pos = backend.window
    while pos < total:
        for s, off in zip(streams, offsets):
            s.push(track[off + pos : off + pos + FRAME])
        pos += FRAME
        arrived_since_pass += FRAME
        if arrived_since_pass >= backend.window:
            arrived_since_pass -= backend.window
            t = time.perf_counter()
            pool.run_pass()
            pass_ms.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    pool.run_pass()
    pass_ms.append((time.perf_counter() - t) * 1000)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    audio_s = seconds * calls
    per_call_ms = cpu / audio_s * 1000
    p = np.percentile(pass_ms, [50, 95])
    return {
        "backend": backend_kind,
        "calls": calls,
        "seconds": seconds,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "cpu_ms_per_call_s": round(per_call_ms, 3),
        "cores_at_n": round(per_call_ms * calls / 1000, 3),
        "realtime_x": round(seconds / wall, 2) if wall else None,
        "pass_ms_p50": round(float(p[0]), 2),
        "pass_ms_p95": round(float(p[1]), 2),
        "window_ms": backend.window * 1000 / SAMPLE_RATE,
        "model_calls": pool.model_calls,
        "windows": pool.windows,
        "speech_events": events[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", default="100,300")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--backend", default="silero,webrtc")
    ap.add_argument("--wav", help="caller audio to loop (default: generated noise and tones)")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw cost and pass time against calls into FILE (.png or .svg), "
        "the run's data beside it as FILE.json (bench/plots.py)",
    )
    args = ap.parse_args(argv)
    if args.plot:
        try:
            plots.check_target(args.plot, (args.out,))
        except plots.PlotError as e:
            ap.error(str(e))
    audio = load_wav(args.wav) if args.wav else default_audio(8.0)
    rows = []
    for kind in args.backend.split(","):
        for n in (int(c) for c in args.calls.split(",")):
            row = run_one(kind.strip(), n, args.seconds, audio)
            rows.append(row)
            print(
                f"{row['backend']:7s} calls={row['calls']:4d}  {row['cpu_ms_per_call_s']:7.3f} CPU ms per call-second  "
                f"{row['cores_at_n']:.3f} cores for all  pass p50 {row['pass_ms_p50']:.2f} ms p95 {row['pass_ms_p95']:.2f} ms "
                f"(window {row['window_ms']:.0f} ms)  model calls {row['model_calls']} for {row['windows']} windows",
                flush=True,
            )
    result = {
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "results": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    if args.plot:
        plots.write_plot("vad", result, args.plot, plots.command_line("bench.vad_bench", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
