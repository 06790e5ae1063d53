#!/usr/bin/env bash
# Creates .venv (Python 3.10+) and installs voxgate with the CPU torch pin.
# Usage: scripts/setup_env.sh [extras]   e.g. scripts/setup_env.sh test,webrtc,stress,espeak
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-webrtc,espeak,vad,onnx}"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.10 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
  done
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# constraints-cpu.txt pins torch to the CPU build; a bare `torch` pulls a multi-GB CUDA build.
.venv/bin/python -m pip install -q -c constraints-cpu.txt -e ".[${extras}]"
