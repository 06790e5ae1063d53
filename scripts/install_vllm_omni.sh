#!/usr/bin/env bash
# The real vLLM-Omni for tests/openai_speech/test_vllm_omni.py, in a venv of its own (never the repo's .venv):
# PyPI's vllm 0.30.0 and vllm-omni 0.30.0 with --no-deps on the CPU torch (constraints-cpu.txt), what they import
# pinned (tools/vllm_cpu_platform/requirements-cpu.txt), the CPU platform plugin, and the tiny official-layout
# checkpoint. Kept between runs (the venv, ~4.2 GB, and ~/.cache/voxgate): a second run only checks them.
#
#   scripts/install_vllm_omni.sh        # VLLM_VENV (default .venv-vllm), VLLM_OMNI_MODEL_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VLLM_VENV:-$ROOT/.venv-vllm}
MODEL_DIR=${VLLM_OMNI_MODEL_DIR:-$HOME/.cache/voxgate/vllm-omni-tiny-custom_voice}
PLUGIN=tools/vllm_cpu_platform
started=$(date +%s)
if [[ ! -x $VENV/bin/vllm ]]; then
  echo "install_vllm_omni: building $VENV"
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
