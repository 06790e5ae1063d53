#!/usr/bin/env bash
# Runs the gateway with configs/default.yaml (installs on first use). Extra args go to `voxgate serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh webrtc,espeak,vad,onnx,service
# OpenMP threads that spin while idle make CPU models (stress, demo voices) stall the event loop.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec .venv/bin/voxgate serve --config configs/default.yaml "$@"
