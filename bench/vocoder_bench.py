"""Codec decoder (vocoder) cost per 80 ms frame, streaming, by step size and batch.

    .venv/bin/python -m bench.vocoder_bench --shape tiny,released --steps 1,2,4,8 --batches 1,8

Random weights (no checkpoint needed), or `--speech-tokenizer DIR` for a real
folder. Each (batch, step) row first fills every stream's attention window,
then times `--reps` further steps, so the numbers are the steady state of a
long utterance. `ms/frame` is wall time per stream-frame (step time divided
by batch × step frames); `audio×` is seconds of audio produced per wall
second over the whole batch (> 1 is faster than real time); both from the
median step; `min ms` is the fastest step and `cpu ms/fr` the process CPU
time per stream-frame (both less disturbed by other load on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from tts.qwen3.codec import CodecConfig, codec_config_dict, load_codec_decoder, random_codec_decoder
from tts.qwen3.codec.tiny import TINY_DECODER

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def filled_state(decoder, batch: int, seed: int = 0):
    """A state whose streams are past one attention window (the steady state of an utterance)."""
    cfg = decoder.config
    gen = torch.Generator().manual_seed(seed)
    state = decoder.new_state(batch)
    codes = torch.randint(0, cfg.codebook_size, (batch, cfg.sliding_window, cfg.num_quantizers), generator=gen)
    decoder.decode_step(codes, state)
    return state


def time_steps(decoder, state, step: int, reps: int, seed: int = 0) -> list[float]:
    """(wall, process CPU) seconds of `reps` streaming steps of `step` frames for every stream in `state`."""
    cfg = decoder.config
    device = decoder.device
    gen = torch.Generator().manual_seed(seed)
    chunks = [
        torch.randint(0, cfg.codebook_size, (state.batch_size, step, cfg.num_quantizers), generator=gen).to(device)
        for _ in range(reps + 1)
    ]
    decoder.decode_step(chunks[0], state)  # warm-up at this shape
    times = []
    for codes in chunks[1:]:
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        decoder.decode_step(codes, state)
        _sync(device)
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return times


def build(shape: str, args) -> tuple[str, object]:
    dtype, conv_dtype = DTYPES[args.dtype], DTYPES[args.conv_dtype]
    if shape == "dir":
        return args.speech_tokenizer, load_codec_decoder(args.speech_tokenizer, args.device, dtype, conv_dtype)
    cfg = CodecConfig() if shape == "released" else CodecConfig.from_dict(codec_config_dict(TINY_DECODER))
    return shape, random_codec_decoder(cfg, seed=0, device=args.device, dtype=dtype, conv_dtype=conv_dtype)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="tiny,released", help="comma list of tiny | released")
    ap.add_argument("--speech-tokenizer", default=None, help="time this speech_tokenizer/ folder instead of random shapes")
    ap.add_argument("--steps", default="1,2,4,8", help="frames per streaming step")
    ap.add_argument("--batches", default="1,8", help="streams decoded together")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=DTYPES)
    ap.add_argument("--conv-dtype", default="fp32", choices=DTYPES)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json-output", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = ["dir"] if args.speech_tokenizer else args.shape.split(",")
    steps = [int(s) for s in args.steps.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    print(f"device={args.device} dtype={args.dtype} conv_dtype={args.conv_dtype} threads={torch.get_num_threads()}")
    print(f"{'shape':<10}{'batch':>6}{'step':>6}{'ms/step':>10}{'min ms':>9}{'ms/frame':>10}{'cpu ms/fr':>10}{'audio×':>9}")
    for shape in shapes:
        label, decoder = build(shape, args)
        frame_s = decoder.config.samples_per_frame / decoder.config.sample_rate
        for batch in batches:
            state = filled_state(decoder, batch)
            for step in steps:
                times = time_steps(decoder, state, step, args.reps)
                med = statistics.median(w for w, _ in times)
                cpu = statistics.median(c for _, c in times)
                frames = batch * step
                row = {
                    "shape": label, "batch": batch, "step_frames": step, "ms_per_step": med * 1e3,
                    "min_ms_per_step": min(w for w, _ in times) * 1e3, "ms_per_frame": med * 1e3 / frames,
                    "cpu_ms_per_frame": cpu * 1e3 / frames, "audio_x": frames * frame_s / med,
                }
                rows.append(row)
                print(
                    f"{label:<10}{batch:>6}{step:>6}{row['ms_per_step']:>10.2f}{row['min_ms_per_step']:>9.2f}"
                    f"{row['ms_per_frame']:>10.2f}{row['cpu_ms_per_frame']:>10.2f}{row['audio_x']:>9.2f}"
                )
    if args.json_output:
        with open(args.json_output, "w", encoding="utf-8") as f:
            json.dump({"device": args.device, "dtype": args.dtype, "conv_dtype": args.conv_dtype, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
