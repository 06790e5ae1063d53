#!/usr/bin/env bash
# The Pipecat and LiveKit Agents plugins' test venv, .venv-plugins: the real frameworks (tests/plugins/requirements.txt)
# with the voxgate client and both plugins installed editable. A venv of its own because pipecat-ai pins older
# protobuf and soxr than the main venv holds; tests/plugins/ skip (with this script's name) when it is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=.venv-plugins
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then py="$cand"; break; fi
  done
fi
# Re-install only when what it is built from changed (a fresh clone, a new pin, a plugin's dependencies).
stamp="$(cat tests/plugins/requirements.txt clients/python/pyproject.toml clients/pipecat/pyproject.toml clients/livekit/pyproject.toml | sha256sum | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.voxgate-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv" || { echo "install_plugin_deps: could not create $venv"; exit 1; }
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
log="$venv/install.log"
if "$venv/bin/python" -m pip install -q -r tests/plugins/requirements.txt \
     -e clients/python -e clients/pipecat -e clients/livekit >"$log" 2>&1; then
  echo "$stamp" > "$venv/.voxgate-stamp"
else
  tail -20 "$log"
  echo "install_plugin_deps: could not install Pipecat / LiveKit Agents into $venv (log: $log)"
  exit 1
fi
