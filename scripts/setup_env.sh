#!/usr/bin/env bash
# Creates .venv (Python 3.11+: the code uses asyncio.timeout; CI tests 3.11) and installs voxgate with the CPU torch pin.
# Usage: scripts/setup_env.sh [extras]   e.g. scripts/setup_env.sh test,webrtc,stress,espeak
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-webrtc,espeak,vad,onnx}"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then py="$cand"; break; fi
  done
fi
if [ -z "$py" ]; then
  echo "setup_env: no Python 3.11+ found (python3.11, python3.12, python3.13, python3); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# constraints-cpu.txt pins torch to the CPU build; a bare `torch` pulls a multi-GB CUDA build.
.venv/bin/python -m pip install -q -c constraints-cpu.txt -e ".[${extras}]"
# The official qwen-tts (parity tests only: scripts/install_reference.sh) is installed with --no-deps on purpose,
# so pip's resolver lists its undeclared dependencies as an ERROR on every later install. Say so next to it.
if [ -f "$(.venv/bin/python -c 'import importlib.util as u; s = u.find_spec("qwen_tts"); print(s.origin if s else "")' 2>/dev/null)" ]; then
  echo "setup_env: a pip 'dependency resolver' ERROR naming qwen-tts is expected and harmless (docs/getting-started.md, 'When something looks wrong')" >&2
fi
