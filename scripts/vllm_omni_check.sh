#!/usr/bin/env bash
# voxgate's engine.kind: openai-speech against a real vLLM-Omni serving Qwen3-TTS, on a CPU-only machine.
#
#   scripts/vllm_omni_check.sh            # venv (once), tiny checkpoint, server, slow test, bench
#   VLLM_VENV=/path scripts/vllm_omni_check.sh --no-bench
#
# 1. a venv of its own (default /work/vllm-venv, never the repo's .venv): PyPI's vllm 0.30.0 and vllm-omni
#    0.30.0 with --no-deps on the CPU torch==2.13.0 (constraints-cpu.txt), their CPU-usable dependencies
#    pinned (tools/vllm_cpu_platform/requirements-cpu.txt), and the platform plugin tools/vllm_cpu_platform;
# 2. the tiny official-layout checkpoint (voxgate make-tiny-model);
# 3. `vllm serve CHECKPOINT --omni` with the plugin's deploy config, on 127.0.0.1:$VLLM_OMNI_PORT;
# 4. tests/openai_speech/test_vllm_omni.py (marked slow) with VOXGATE_VLLM_OMNI_URL, and bench.speech_rate.
# Everything heavy runs under `nice -n 19`. The server is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VLLM_VENV:-/work/vllm-venv}
PORT=${VLLM_OMNI_PORT:-8091}
MODEL_DIR=${VLLM_OMNI_MODEL_DIR:-$HOME/.cache/voxgate/vllm-omni-tiny-custom_voice}
LOG=${VLLM_OMNI_LOG:-/tmp/vllm-omni-check.log}
PLUGIN=tools/vllm_cpu_platform
BENCH=1
[[ "${1:-}" == "--no-bench" ]] && BENCH=0
VOXGATE_PY=$ROOT/.venv/bin/python
[[ -x $VOXGATE_PY ]] || { echo "no $VOXGATE_PY: run scripts/setup_env.sh test,service first" >&2; exit 2; }

if [[ ! -x $VENV/bin/vllm ]]; then
  echo "== building $VENV"
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

[[ -f $MODEL_DIR/model.safetensors ]] || nice -n 19 "$VOXGATE_PY" -m gateway.cli make-tiny-model "$MODEL_DIR"

echo "== starting vLLM-Omni on 127.0.0.1:$PORT (log: $LOG)"
VOXGATE_VLLM_CPU=1 OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 \
  nice -n 19 "$VENV/bin/vllm" serve "$MODEL_DIR" --omni \
  --deploy-config "$PLUGIN/vllm_cpu_platform/qwen3_tts_cpu.yaml" \
  --host 127.0.0.1 --port "$PORT" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { tail -40 "$LOG"; echo "vLLM-Omni exited" >&2; exit 1; }
  sleep 2
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { tail -40 "$LOG"; echo "vLLM-Omni not up in 600 s" >&2; exit 1; }

URL=http://127.0.0.1:$PORT/v1
echo "== slow test against $URL"
VOXGATE_VLLM_OMNI_URL=$URL OMP_WAIT_POLICY=PASSIVE nice -n 19 \
  "$VOXGATE_PY" -m pytest -q -p no:cacheprovider -s tests/openai_speech/test_vllm_omni.py
if [[ $BENCH == 1 ]]; then
  echo "== bench"
  nice -n 19 "$VOXGATE_PY" -m bench.speech_rate --url "$URL" --voice vivian -n 4 --concurrency 1
  nice -n 19 "$VOXGATE_PY" -m bench.speech_rate --url "$URL" --voice vivian -n 4 --concurrency 2
fi
