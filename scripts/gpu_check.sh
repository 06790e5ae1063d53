#!/usr/bin/env bash
# GPU check for a lent machine (issue 4, item 8): Qwen3Engine on the released 0.6B and 1.7B shapes
# with random weights (no checkpoint, no internet), in a few minutes, then one table.
# Needs only python3 with its CUDA torch, numpy, safetensors, tokenizers (no pip installs).
#   scripts/gpu_check.sh                 # writes JSON + traces under $OUT (default /tmp/voxgate_gpu_check)
# Env: PYTHON, OUT, FRAMES (per utterance, EOS ignored; default 100 = 8 s), LEVELS (default 1,32,128,256,512).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/voxgate_gpu_check}
FRAMES=${FRAMES:-100}
LEVELS=${LEVELS:-1,32,128,256,512}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
$PY - <<'PY' || exit 1
import torch
assert torch.cuda.is_available(), "no CUDA device"
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}")
PY
MAXB=$(echo "$LEVELS" | tr ',' '\n' | sort -n | tail -1)
for size in 0.6b 1.7b; do
  trace=()
  [ "$size" = 0.6b ] && trace=(--trace "$OUT/trace_$size.json")
  echo "== $size: frames $FRAMES, levels $LEVELS"
  timeout 200 $PY -m gateway.cli bench --random-weights "$size" --frames "$FRAMES" --streaming \
      --concurrency "$LEVELS" --max-batch "$MAXB" --json-output "$OUT/bench_$size.json" "${trace[@]}" \
      || echo "bench $size failed or timed out (rc $?)"
done
$PY - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print()
print(f"{'model':<6}{'conc':>6}{'audio x':>9}{'RTF':>8}{'TTFA p50':>10}{'TTFA p95':>10}{'real time':>11}"
      f"{'syncs/frame':>12}{'batch':>7}")
for size in ("0.6b", "1.7b"):
    path = os.path.join(out, f"bench_{size}.json")
    if not os.path.exists(path):
        print(f"{size:<6} (no result)")
        continue
    r = json.load(open(path))
    best = 0
    for lv in r.get("levels", []):
        ok = f"{lv['streams_keeping_up']}/{lv['concurrency']}"
        if lv["keeps_up"]:
            best = max(best, lv["concurrency"])
        print(f"{size:<6}{lv['concurrency']:>6}{lv['audio_x']:>9.1f}{lv['rtf']:>8.3f}{lv['ttfa_p50_ms']:>10.1f}"
              f"{lv['ttfa_p95_ms']:>10.1f}{ok:>11}{(lv['host_syncs_per_frame'] or 0):>12.3f}{(lv['mean_batch'] or 0):>7.1f}")
    st = {s["label"]: s for s in r.get("stages", [])}
    if st:
        s = st.get("short") or next(iter(st.values()))
        print(f"{size:<6} single stream ({s['label']}): first audio {s['ttfa_ms']:.1f} ms, RTF {s['rtf']:.3f}, "
              f"{s['tok_s']:.0f} frames/s; highest level with every stream real-time: {best}; "
              f"GPU {r['engine'].get('gpu')}, graphs {r['engine'].get('cuda_graphs')}")
PY
