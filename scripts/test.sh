#!/usr/bin/env bash
# Installs everything the tests need and runs the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh test,webrtc,stress,espeak,vad,onnx,service,cluster,deploy-test
scripts/install_test_deps.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
