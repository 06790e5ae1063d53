#!/usr/bin/env bash
# The real vLLM-Omni for tests/openai_speech/test_vllm_omni.py, in a venv of its own (never the repo's .venv):
# PyPI's vllm 0.30.0 and vllm-omni 0.30.0 with --no-deps on the CPU torch (constraints-cpu.txt), what they import
# pinned (tools/vllm_cpu_platform/requirements-cpu.txt), the CPU platform plugin, and the tiny official-layout
# checkpoint. Both are kept in ~/.cache/voxgate, outside the checkout, so that a CI runner's next clean checkout
# finds them: the venv (~4.2 GB) is named by a hash of this script and the pins, so changing either builds a
# new one (and removes the old); a run that finds them only checks them (seconds).
#
#   scripts/install_vllm_omni.sh              # VLLM_VENV (default ~/.cache/voxgate/vllm-venv-HASH), VLLM_OMNI_MODEL_DIR
#   scripts/install_vllm_omni.sh --venv-path  # prints where the venv is (scripts/vllm_omni_check.sh asks)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PLUGIN=tools/vllm_cpu_platform
CACHE=$HOME/.cache/voxgate
PINS=$(cat scripts/install_vllm_omni.sh "$PLUGIN/requirements-cpu.txt" constraints-cpu.txt | sha256sum | cut -c1-12)
VENV=${VLLM_VENV:-$CACHE/vllm-venv-$PINS}
MODEL_DIR=${VLLM_OMNI_MODEL_DIR:-$CACHE/vllm-omni-tiny-custom_voice}
[[ "${1:-}" == "--venv-path" ]] && { echo "$VENV"; exit 0; }
started=$(date +%s)
if [[ ! -x $VENV/bin/vllm ]]; then
  echo "install_vllm_omni: building $VENV"
  if [[ -z ${VLLM_VENV:-} ]]; then  # only what this script made: venvs of earlier pins (4.2 GB each), a broken build
    find "$CACHE" -maxdepth 1 -name 'vllm-venv-*' -exec rm -rf {} + 2>/dev/null || true
  fi
  mkdir -p "$CACHE"
  python3.11 -m venv "$VENV"
  PIP=(nice -n 19 "$VENV/bin/pip" install -q -c "$ROOT/constraints-cpu.txt")
  # --no-deps: their own requirements name CUDA-only packages (several GB); what they import is pinned below
  "${PIP[@]}" --no-deps torch==2.13.0 vllm==0.30.0 vllm-omni==0.30.0 torchvision==0.28.0 torchaudio==2.11.0
  "${PIP[@]}" --no-deps -r "$PLUGIN/requirements-cpu.txt"
  # PyPI's torchaudio ships C++ extensions linked against CUDA torch (libc10_cuda.so): without them it is
  # pure Python, which is all vLLM-Omni's speech path uses (resample, mel filter banks, spectrograms)
  rm -f "$VENV"/lib/python3.11/site-packages/torchaudio/lib/*.so
fi
nice -n 19 "$VENV/bin/pip" install -q --no-deps -e "$PLUGIN"
if [[ ! -f $MODEL_DIR/model.safetensors ]]; then
  nice -n 19 "$ROOT/.venv/bin/python" -m gateway.cli make-tiny-model "$MODEL_DIR"
fi
echo "install_vllm_omni: ready in $(( $(date +%s) - started )) s ($VENV, $MODEL_DIR)"
