#!/usr/bin/env bash
# GPU check for a lent machine: one Python driver, bench/gpu_check.py — released 1.7B then 0.6B shapes with
# random weights (no checkpoint, no internet), phases (a) environment + SDPA backend per shape, (b) CUDA
# graphs vs eager and, per serving length bucket, pinned/captured logits vs eager + the SDPA kernel that ran,
# (c) ms per step / prefill / vocoder, (d) real syncs per step, (e) Poisson sweep 64..384 streams.
# A row per phase as it ends, JSON after each phase, one table at the end. 240 s of budget by default, from the
# driver's start (imports and model construction included), and a hard kill 45 s after it, so a machine start
# and two full runs fit a 15-minute loan; exits 1 when a phase failed (a pinned/captured step that disagrees
# with eager). docs/gpu-check.md gives each phase's expected time and what a cut run leaves.
# Needs only python3 with its CUDA torch, numpy, safetensors, tokenizers (no pip installs).
#   scripts/gpu_check.sh                 # JSON under $OUT (default /tmp/voxgate_gpu_check)
#   scripts/gpu_check.sh --smoke         # tiny shapes on CPU: the driver's logic, and each phase's GPU budget
#   scripts/gpu_check.sh --smoke --cuda-semantics  # the same, SDPA answering as CUDA does (layouts, refusals)
#   scripts/gpu_check.sh --tensorrt      # also build and time the TensorRT vocoder (a budget line of its own)
#   scripts/gpu_check.sh --onnx          # also export and time the ONNX Runtime vocoder (a budget line of its own)
# Env: PYTHON, OUT, BUDGET (seconds, default 240).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/voxgate_gpu_check}
BUDGET=${BUDGET:-240}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
extra=0
for a in "$@"; do
    [ "$a" = "--tensorrt" ] && extra=$((extra + 240))
    [ "$a" = "--onnx" ] && extra=$((extra + 150))
done
# the driver keeps its own budget; the outer timeout only catches a hang (a phase stuck in a kernel)
exec timeout $((BUDGET + extra + 45)) "$PY" -m bench.gpu_check --out "$OUT" --budget "$BUDGET" "$@"
