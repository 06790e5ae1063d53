"""The talker's decode attention, three layouts side by side (the choice behind `attention.decode_attention`).

    python -m bench.attention_bench [--device cuda] [--dtype bfloat16] [--shapes 16x512,64x512,64x1024]

Per (batch, cache length), with 16 query heads on 8 KV heads, head size 128, and per-row live lengths (a
boolean mask): ms per call of
* `gqa`: `scaled_dot_product_attention(..., enable_gqa=True)` with the mask (flash refuses the mask and the
  memory-efficient kernel refuses GQA on CUDA);
* `folded`: `decode_attention`, the query heads sharing a KV head as that head's query rows;
* `repeated`: K/V repeated to 16 heads (gpt-fast's layout, the cache twice the size);
and the largest difference of `folded` from `gqa`.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from tts.qwen3.attention import decode_attention


def _ms(fn, device, repeats: int) -> float:
    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeats * 1e3


def run(shapes, dtype, device, repeats: int = 20, hq: int = 16, hk: int = 8, d: int = 128) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for b, length in shapes:
        q = torch.randn(b, hq, 1, d, generator=g).to(device, dtype)
        k, v = (torch.randn(b, hk, length, d, generator=g).to(device, dtype) for _ in range(2))
        live = torch.randint(1, length + 1, (b,), generator=g)
        mask = (torch.arange(length).view(1, -1) < live.view(-1, 1)).view(b, 1, 1, length).to(device)
        kr, vr = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
        gqa = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # noqa: E731
        diff = float((decode_attention(q, k, v, mask) - gqa()).abs().max())
        rows.append(
            {
                "batch": b,
                "kv_len": length,
                "gqa_ms": round(_ms(gqa, device, repeats), 3),
                "folded_ms": round(_ms(lambda: decode_attention(q, k, v, mask), device, repeats), 3),
                "repeated_ms": round(
                    _ms(lambda: F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask), device, repeats), 3
                ),
                "max_diff": diff,
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32,bfloat16")
    ap.add_argument("--shapes", default="16x512,64x512,64x1024", help="BATCHxLENGTH, comma separated")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print(f"{'dtype':<10}{'batch':>6}{'kv_len':>8}{'gqa ms':>10}{'folded ms':>11}{'repeated ms':>13}{'max diff':>10}")
    for name in args.dtype.split(","):
        for r in run(shapes, getattr(torch, name), torch.device(args.device), args.repeats):
            print(
                f"{name:<10}{r['batch']:>6}{r['kv_len']:>8}{r['gqa_ms']:>10}{r['folded_ms']:>11}"
                f"{r['repeated_ms']:>13}{r['max_diff']:>10.1e}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
