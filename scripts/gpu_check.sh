#!/usr/bin/env bash
# GPU check for a lent machine (issue 11): one Python driver, bench/gpu_check.py — released 1.7B then
# 0.6B shapes with random weights (no checkpoint, no internet), phases (a) environment + SDPA backend per
# shape, (b) CUDA graphs vs eager, (c) ms per step / prefill / vocoder, (d) real syncs per step,
# (e) Poisson sweep 64..384 streams; JSON after each phase, one table at the end; 8 minutes at most.
# Needs only python3 with its CUDA torch, numpy, safetensors, tokenizers (no pip installs).
#   scripts/gpu_check.sh                 # JSON under $OUT (default /tmp/voxgate_gpu_check)
#   scripts/gpu_check.sh --smoke         # tiny shapes on CPU: checks the driver's logic only
# Env: PYTHON, OUT, BUDGET (seconds, default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/voxgate_gpu_check}
BUDGET=${BUDGET:-480}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the driver keeps its own budget; the outer timeout only catches a hang (a phase stuck in a kernel)
exec timeout $((BUDGET + 60)) "$PY" -m bench.gpu_check --out "$OUT" --budget "$BUDGET" "$@"
