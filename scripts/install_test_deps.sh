#!/usr/bin/env bash
# Test-only extras: headless Chromium for the browser test, espeak-ng + sox for caller speech, the official qwen-tts for parity tests.
# What the suite needs is listed once, in tests/required.py; this script ends by checking that list. Outside CI a
# missing piece only makes its tests skip (this exits 0); under CI=true it fails the install, naming what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
      || echo "install_test_deps: could not install chromium; browser tests will be skipped"
  else
    echo "install_test_deps: not root or no apt-get; browser tests will be skipped"
  fi
fi
# espeak-ng and sox speak the caller's test speech (tests/caller_audio.py); without them those tests skip.
if ! command -v espeak-ng >/dev/null 2>&1 || ! command -v sox >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox) >/dev/null 2>&1 \
      || echo "install_test_deps: could not install espeak-ng/sox; caller-speech tests will be skipped"
  fi
fi
# wave 3's real parts: redis-server (the call plane), haproxy (the balancer in front of gateway nodes), coturn (TURN
# relay), openssl (a self-signed certificate for wss:// between nodes)
if ! command -v redis-server >/dev/null 2>&1 || ! command -v haproxy >/dev/null 2>&1 || ! command -v turnserver >/dev/null 2>&1 \
   || ! command -v openssl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server haproxy coturn openssl) >/dev/null 2>&1 \
      || echo "install_test_deps: could not install redis-server/haproxy/coturn/openssl; cluster tests will be skipped"
  fi
fi
# direct SIP's far ends (tests/sip): SIPp (Debian sip-tester, with its G.711 pcaps) and the baresip user agent
if ! command -v sipp >/dev/null 2>&1 || ! command -v baresip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends sip-tester baresip-core) >/dev/null 2>&1 \
      || echo "install_test_deps: could not install sip-tester/baresip; SIP tests will be skipped"
  fi
fi
# checkov scans deploy/kubernetes (tests/deploy); its own venv, because its pins would downgrade the project's
# (networkx, packaging). Without it that one test skips.
if [ ! -x .venv-checkov/bin/checkov ]; then
  (.venv/bin/python -m venv .venv-checkov && .venv-checkov/bin/pip install -q "checkov==3.3.30") >/dev/null 2>&1 \
    || echo "install_test_deps: could not install checkov; the policy scan will be skipped"
fi
# the real Pipecat and LiveKit Agents for tests/plugins, in a venv of their own (.venv-plugins)
scripts/install_plugin_deps.sh || echo "install_test_deps: no plugin venv; Pipecat/LiveKit plugin tests will be skipped"
if [ -x scripts/install_reference.sh ]; then
  scripts/install_reference.sh || echo "install_test_deps: official qwen-tts unavailable; live parity tests will be skipped"
fi
if .venv/bin/python -m tests.required; then
  exit 0
fi
if [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ]; then
  echo "install_test_deps: FAILED: CI=true and the test dependencies above are missing (tests/required.py); their suites would fail" >&2
  exit 1
fi
echo "install_test_deps: the tests of what is missing above will be skipped (under CI=true they fail)"
exit 0
