"""Codec decoder (vocoder) cost per 80 ms frame, streaming, by backend, step size and batch.

    .venv/bin/python -m bench.vocoder_bench --shape released --backends torch,onnxruntime \
        --batches 1,16,64 --steps 1,2,4

Random weights (no checkpoint needed), or `--speech-tokenizer DIR` for a real
folder. Backends (`tts.qwen3.codec.vocoder`): torch (eager; CUDA graphs on
CUDA), onnxruntime (CPU or CUDA provider), tensorrt. Each (batch, step) cell
runs every backend back to back, so a shared machine's load drifts the same
way for all of them. A cell starts from a steady-state stream state (every
row past one attention window: positions and history set directly, which
costs the same per step as real history), runs one warm-up step, then times
`--reps` steps. `ms/frame` is wall time per stream-frame (median step time
divided by batch × step frames); `audio×` is seconds of audio produced per
wall second over the whole batch (> 1 is faster than real time); `min ms` is
the fastest step and `cpu ms/fr` the process CPU time per stream-frame (less
disturbed by other load on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from bench import plots
from tts.qwen3.codec import CodecConfig, codec_config_dict, load_codec_decoder, random_codec_decoder
from tts.qwen3.codec.tiny import TINY_DECODER

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def filled_state(decoder, batch: int, seed: int = 0):
    """A state whose streams are past one attention window (the steady state of an utterance).

    Positions and history are set directly rather than decoded (decoding a window for 64
    rows of the released shape takes minutes on a CPU); a step's cost does not depend on
    the values it reads. Works for any backend (`new_state` in its layout and device)."""
    gen = torch.Generator().manual_seed(seed)
    state = decoder.new_state(batch)
    state.frames.fill_(2 * decoder.config.sliding_window)
    for buf in state.buffers:
        buf.copy_((0.1 * torch.randn(buf.shape, generator=gen)).to(buf.dtype))
    return state


def time_steps(decoder, state, step: int, reps: int, seed: int = 0, warmup: int = 1) -> list[tuple[float, float]]:
    """(wall, process CPU) seconds of `reps` streaming steps of `step` frames for every stream in `state`."""
    cfg = decoder.config
    device = decoder.device
    gen = torch.Generator().manual_seed(seed)
    chunks = [
        torch.randint(0, cfg.codebook_size, (state.batch_size, step, cfg.num_quantizers), generator=gen).to(device)
        for _ in range(reps + warmup)
    ]
    for codes in chunks[:warmup]:  # this shape's first call (allocator, plans, graph lookup)
        # big cells warm up on one frame: the same allocations, without minutes of CPU decoding
        decoder.decode_step(codes[:, :1] if state.batch_size * step > 16 else codes, state)
    times = []
    for codes in chunks[warmup:]:
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        decoder.decode_step(codes, state)
        _sync(device)
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return times


def summarize(label: str, backend: str, batch: int, step: int, times, frame_s: float) -> dict:
    med = statistics.median(w for w, _ in times)
    cpu = statistics.median(c for _, c in times)
    frames = batch * step
    return {
        "shape": label,
        "backend": backend,
        "batch": batch,
        "step_frames": step,
        "ms_per_step": med * 1e3,
        "min_ms_per_step": min(w for w, _ in times) * 1e3,
        "ms_per_frame": med * 1e3 / frames,
        "cpu_ms_per_frame": cpu * 1e3 / frames,
        "audio_x": frames * frame_s / med,
        "reps": len(times),
    }


def build_decoder(shape: str, args):
    dtype, conv_dtype = DTYPES[args.dtype], DTYPES[args.conv_dtype]
    if shape == "dir":
        return args.speech_tokenizer, load_codec_decoder(args.speech_tokenizer, args.device, dtype, conv_dtype)
    cfg = CodecConfig() if shape == "released" else CodecConfig.from_dict(codec_config_dict(TINY_DECODER))
    return shape, random_codec_decoder(cfg, seed=0, device=args.device, dtype=dtype, conv_dtype=conv_dtype)


def build_backends(decoder, names: list[str], max_batch: int, packets: list[int], cache_dir: str) -> dict:
    """name -> Vocoder. `torch-eager` / `torch-graphs` force the torch mode on CUDA; the rest are
    `engine.vocoder` values. A backend that cannot run here is reported and left out."""
    from tts.qwen3.codec import CodecError
    from tts.qwen3.codec.vocoder import build_vocoder

    out = {}
    for name in names:
        kind, graphs = {"torch-eager": ("torch", False), "torch-graphs": ("torch", True)}.get(name, (name, None))
        try:
            t0 = time.perf_counter()
            voc = build_vocoder(
                kind, decoder, max_batch=max_batch, packets=packets, cache_dir=cache_dir, cuda_graphs=graphs
            )
            print(f"{name}: {voc.name} ready in {time.perf_counter() - t0:.1f} s")
            out[name] = voc
        except (CodecError, ValueError) as e:
            print(f"{name}: skipped ({getattr(e, 'message', e)})")
        except (RuntimeError, OSError, ImportError) as e:  # a GPU backend failing to build (CUDA, cuDNN,
            # a provider library): that backend is left out, the others' timings stay
            first = (str(e).splitlines() or [""])[0][:300]
            print(f"{name}: skipped (failed to build: {type(e).__name__}: {first})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="tiny,released", help="comma list of tiny | released")
    ap.add_argument(
        "--speech-tokenizer", default=None, help="time this speech_tokenizer/ folder instead of random shapes"
    )
    ap.add_argument(
        "--backends",
        default="torch",
        help="comma list: torch, onnxruntime, tensorrt (torch-eager, torch-graphs on CUDA)",
    )
    ap.add_argument("--steps", default="1,2,4,8", help="frames per streaming step")
    ap.add_argument("--batches", default="1,8", help="streams decoded together")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--max-reps-frames",
        type=int,
        default=0,
        help="cap reps so a cell times at most this many stream-frames (at least 1 rep; 0: no cap)",
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=DTYPES)
    ap.add_argument("--conv-dtype", default="fp32", choices=DTYPES)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch and ONNX Runtime)")
    ap.add_argument("--cache-dir", default=None, help="ONNX exports / TensorRT engines (default: a temporary folder)")
    ap.add_argument("--json-output", default=None)
    ap.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw CPU per frame and audio× by backend into FILE (.png or .svg), "
        "the run's data beside it as FILE.json (bench/plots.py)",
    )
    args = ap.parse_args(argv)
    if args.plot:
        try:
            plots.check_target(args.plot, (args.json_output,))
        except plots.PlotError as e:
            ap.error(str(e))
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = ["dir"] if args.speech_tokenizer else args.shape.split(",")
    steps = [int(s) for s in args.steps.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    rows = []
    print(f"device={args.device} dtype={args.dtype} conv_dtype={args.conv_dtype} threads={torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            label, decoder = build_decoder(shape, args)
            backends = build_backends(decoder, names, max(batches), sorted({1, *steps}), args.cache_dir or tmp)
            frame_s = decoder.config.samples_per_frame / decoder.config.sample_rate
            print(
                f"{'shape':<10}{'backend':<20}{'batch':>6}{'step':>6}{'ms/step':>11}{'min ms':>11}{'ms/frame':>10}"
                f"{'cpu ms/fr':>10}{'audio×':>9}"
            )
            for batch in batches:
                states = {name: filled_state(voc, batch) for name, voc in backends.items()}
                for step in steps:
                    reps = args.reps
                    if args.max_reps_frames:
                        reps = max(1, min(reps, args.max_reps_frames // (batch * step)))
                    for name, voc in backends.items():
                        row = summarize(
                            label, voc.name, batch, step, time_steps(voc, states[name], step, reps), frame_s
                        )
                        rows.append(row)
                        print(
                            f"{label:<10}{voc.name:<20}{batch:>6}{step:>6}{row['ms_per_step']:>11.2f}"
                            f"{row['min_ms_per_step']:>11.2f}{row['ms_per_frame']:>10.2f}{row['cpu_ms_per_frame']:>10.2f}"
                            f"{row['audio_x']:>9.3f}",
                            flush=True,
                        )
    result = {
        "device": args.device,
        "dtype": args.dtype,
        "conv_dtype": args.conv_dtype,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }
    if args.json_output:
        with open(args.json_output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    if args.plot:
        plots.write_plot("vocoder", result, args.plot, plots.command_line("bench.vocoder_bench", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
