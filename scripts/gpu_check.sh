#!/usr/bin/env bash
# GPU check for a lent machine: one Python driver, bench/gpu_check.py — released 1.7B then 0.6B shapes with
# random weights (no checkpoint, no internet), phases (a) environment + SDPA backend per shape, (b) CUDA
# graphs vs eager and, per serving length bucket, pinned/captured logits vs eager + the SDPA kernel that ran,
# (c) ms per step / prefill / vocoder, (d) real syncs per step, (e) Poisson sweep 64..384 streams.
# A row per phase as it ends, JSON after each phase, one table at the end. 270 s of budget by default, model
# construction included, so a machine start and two full runs fit a 15-minute loan; exits 1 when a phase
# failed (a pinned/captured step that disagrees with eager).
# Needs only python3 with its CUDA torch, numpy, safetensors, tokenizers (no pip installs).
#   scripts/gpu_check.sh                 # JSON under $OUT (default /tmp/voxgate_gpu_check)
#   scripts/gpu_check.sh --smoke         # tiny shapes on CPU: the driver's logic, and each phase's GPU budget
#   scripts/gpu_check.sh --tensorrt      # also build and time the TensorRT vocoder (a budget line of its own)
# Env: PYTHON, OUT, BUDGET (seconds, default 270).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/voxgate_gpu_check}
BUDGET=${BUDGET:-270}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
extra=0
for a in "$@"; do [ "$a" = "--tensorrt" ] && extra=240; done
# the driver keeps its own budget; the outer timeout only catches a hang (a phase stuck in a kernel)
exec timeout $((BUDGET + extra + 30)) "$PY" -m bench.gpu_check --out "$OUT" --budget "$BUDGET" "$@"
