"""Every vocoder backend available on a CUDA machine, timed side by side, within a time budget.

    from bench.gpu_vocoder import run, format_table
    rows = run(budget_s=150, backends=("torch-eager", "torch-graphs", "onnxruntime", "tensorrt"),
               batches=(1, 64, 256, 384), packets=(1, 4))
    print(format_table(rows))

or `python -m bench.gpu_vocoder --budget 150 --json-output OUT.json`.

The released decoder shape with random weights (no checkpoint), fp32.
Backends: `torch-eager`, `torch-graphs` (CUDA graphs per (batch bucket,
packet), captured at build), `onnxruntime` (CUDA provider with IO binding;
needs onnx + onnxruntime-gpu) and `tensorrt` (engine built from the ONNX
export, cached under the cache dir; needs tensorrt + onnx). A backend that
cannot run is one row with `skipped` and the reason; so is a cell left out
when the budget runs short. Each timed row: median step wall time
(`ms_per_step`, CUDA-synchronised), `audio_x` (audio seconds per wall
second, whole batch), build seconds, and `max_err` of a short stream
against torch eager on the same codes (every backend must agree to 1e-3 in
fp32 on random weights).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Sequence

import torch

from bench.vocoder_bench import build_backends, filled_state

BACKENDS = ("torch-eager", "torch-graphs", "onnxruntime", "tensorrt")


def _check_equal(voc, reference, decoder, seed: int = 0) -> float:
    """Max |difference| of a 6-frame stream (packets 1, 1, 4) from the decoder's offline decode."""
    cfg = decoder.config
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, cfg.codebook_size, (2, 6, cfg.num_quantizers), generator=gen).to(decoder.device)
    state = voc.new_state(2)
    got = torch.cat([voc.decode_step(codes[:, a:b], state) for a, b in ((0, 1), (1, 2), (2, 6))], dim=1)
    return float((got - reference(codes)).abs().max())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_cell(voc, state, packet: int, reps: int, cell_deadline: float) -> list[float]:
    cfg = voc.config
    gen = torch.Generator().manual_seed(packet)
    codes = torch.randint(0, cfg.codebook_size, (state.batch_size, packet, cfg.num_quantizers), generator=gen)
    codes = codes.to(voc.device)
    voc.decode_step(codes, state)  # warm-up at this shape
    _sync(voc.device)
    times: list[float] = []
    while len(times) < reps and (not times or time.monotonic() < cell_deadline):
        t0 = time.perf_counter()
        voc.decode_step(codes, state)
        _sync(voc.device)
        times.append(time.perf_counter() - t0)
    return times


def run(
    budget_s: float = 150.0,
    backends: Sequence[str] = BACKENDS,
    batches: Sequence[int] = (1, 64, 256, 384),
    packets: Sequence[int] = (1, 4),
    reps: int = 10,
    cache_dir: str | None = None,
    device: str = "cuda",
    shape: str = "released",
) -> list[dict]:
    """Time each backend at every (batch, packet); returns one dict per cell (or per skipped backend).
    `device="cpu", shape="tiny"` runs the same logic without a GPU (the tests do)."""
    from tts.qwen3.codec import CodecConfig, codec_config_dict, random_codec_decoder
    from tts.qwen3.codec.tiny import TINY_DECODER

    if device.startswith("cuda") and not torch.cuda.is_available():
        return [{"backend": name, "skipped": "no CUDA device"} for name in backends]
    start = time.monotonic()
    deadline = start + budget_s
    cfg = CodecConfig() if shape == "released" else CodecConfig.from_dict(codec_config_dict(TINY_DECODER))
    decoder = random_codec_decoder(cfg, seed=0, device=device)
    frame_s = decoder.config.samples_per_frame / decoder.config.sample_rate
    rows: list[dict] = []
    tmp = tempfile.TemporaryDirectory() if cache_dir is None else None
    cache = cache_dir or tmp.name
    try:
        for i, name in enumerate(backends):
            if time.monotonic() > deadline:
                rows.append({"backend": name, "skipped": "time budget spent"})
                continue
            t0 = time.perf_counter()
            built = build_backends(decoder, [name], max(batches), sorted({1, *packets}), cache)
            if name not in built:
                rows.append({"backend": name, "skipped": "cannot run here (see log line above)"})
                continue
            voc = built[name]
            build_s = time.perf_counter() - t0
            try:
                err = _check_equal(voc, decoder.decode, decoder)
            except Exception as exc:  # noqa: BLE001 - report, keep timing the others
                rows.append({"backend": name, "name": voc.name, "skipped": f"failed: {type(exc).__name__}: {exc}"})
                del voc, built
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            share = (deadline - time.monotonic()) / max(1, len(backends) - i)  # this backend's part of what is left
            cells = [(b, p) for b in batches for p in packets]
            backend_deadline = time.monotonic() + share
            for j, (batch, packet) in enumerate(cells):
                now = time.monotonic()
                if now > backend_deadline:
                    rows.append(
                        {
                            "backend": name,
                            "name": voc.name,
                            "batch": batch,
                            "packet": packet,
                            "skipped": "time budget spent",
                        }
                    )
                    continue
                cell_deadline = now + (backend_deadline - now) / (len(cells) - j)
                state = filled_state(voc, batch)
                times = _time_cell(voc, state, packet, reps, cell_deadline)
                med = statistics.median(times)
                rows.append(
                    {
                        "backend": name,
                        "name": voc.name,
                        "batch": batch,
                        "packet": packet,
                        "ms_per_step": med * 1e3,
                        "min_ms": min(times) * 1e3,
                        "reps": len(times),
                        "audio_x": batch * packet * frame_s / med,
                        "build_s": round(build_s, 1),
                        "max_err": err,
                    }
                )
                del state
            del voc, built
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    finally:
        if tmp is not None:
            tmp.cleanup()
    return rows


def format_table(rows: list[dict]) -> str:
    lines = [f"{'backend':<22}{'batch':>6}{'packet':>7}{'ms/step':>10}{'audio x':>10}{'max err':>10}{'build s':>9}"]
    for r in rows:
        label = r.get("name") or r["backend"]
        if "skipped" in r:
            where = f"{r['batch']:>6}{r['packet']:>7}" if "batch" in r else f"{'':>13}"
            lines.append(f"{label:<22}{where}  skipped: {r['skipped']}")
            continue
        lines.append(
            f"{label:<22}{r['batch']:>6}{r['packet']:>7}{r['ms_per_step']:>10.2f}{r['audio_x']:>10.1f}"
            f"{r['max_err']:>10.1e}{r['build_s']:>9.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=150.0, help="seconds for everything")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--batches", default="1,64,256,384")
    ap.add_argument("--packets", default="1,4")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cache-dir", default=None, help="keep ONNX exports / TensorRT engines here (default: temporary)")
    ap.add_argument("--json-output", default=None)
    args = ap.parse_args(argv)
    rows = run(
        args.budget,
        [b for b in args.backends.split(",") if b],
        [int(b) for b in args.batches.split(",")],
        [int(p) for p in args.packets.split(",")],
        args.reps,
        args.cache_dir,
    )
    print(format_table(rows))
    if args.json_output:
        with open(args.json_output, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "rows": rows,
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
