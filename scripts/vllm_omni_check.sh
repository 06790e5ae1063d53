#!/usr/bin/env bash
# voxgate's engine.kind: openai-speech against a real vLLM-Omni serving Qwen3-TTS, on a CPU-only machine.
#
#   scripts/vllm_omni_check.sh            # venv (once), tiny checkpoint, server, tests, bench
#   scripts/vllm_omni_check.sh --no-bench # what .ci/run runs as its vLLM-Omni stage
#
# 1. scripts/install_vllm_omni.sh: a venv of its own and the tiny checkpoint, both kept in ~/.cache/voxgate;
# 2. `vllm serve CHECKPOINT --omni` with the plugin's deploy config, on 127.0.0.1:$VLLM_OMNI_PORT;
# 3. tests/openai_speech/test_vllm_omni.py with VOXGATE_VLLM_OMNI_URL, and bench.speech_rate.
# Everything heavy runs under `nice -n 19`. The server is stopped on exit. Each step's seconds are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VLLM_VENV:-$(scripts/install_vllm_omni.sh --venv-path)}
PORT=${VLLM_OMNI_PORT:-8091}
MODEL_DIR=${VLLM_OMNI_MODEL_DIR:-$HOME/.cache/voxgate/vllm-omni-tiny-custom_voice}
LOG=${VLLM_OMNI_LOG:-/tmp/vllm-omni-check.log}
PLUGIN=tools/vllm_cpu_platform
BENCH=1
[[ "${1:-}" == "--no-bench" ]] && BENCH=0
VOXGATE_PY=$ROOT/.venv/bin/python
[[ -x $VOXGATE_PY ]] || { echo "no $VOXGATE_PY: run scripts/setup_env.sh test,service first" >&2; exit 2; }
step=$(date +%s)
lap() { local now; now=$(date +%s); echo "== $1: $((now - step)) s"; step=$now; }

VLLM_VENV=$VENV VLLM_OMNI_MODEL_DIR=$MODEL_DIR scripts/install_vllm_omni.sh
lap install

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
lap "server start"

URL=http://127.0.0.1:$PORT/v1
echo "== slow test against $URL"
VOXGATE_VLLM_OMNI_URL=$URL OMP_WAIT_POLICY=PASSIVE nice -n 19 \
  "$VOXGATE_PY" -m pytest -q -p no:cacheprovider -s tests/openai_speech/test_vllm_omni.py
lap tests
if [[ $BENCH == 1 ]]; then
  echo "== bench"
  nice -n 19 "$VOXGATE_PY" -m bench.speech_rate --url "$URL" --voice vivian -n 4 --concurrency 1
  nice -n 19 "$VOXGATE_PY" -m bench.speech_rate --url "$URL" --voice vivian -n 4 --concurrency 2
fi
