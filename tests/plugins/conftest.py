"""The plugin tests: a real voxgate here (SimulatedEngine, loopback), the real framework in .venv-plugins.

Pipecat and LiveKit Agents pin packages older than the main venv holds, so they live in a venv of
their own (scripts/install_plugin_deps.sh, run by scripts/install_test_deps.sh). Each test starts
a gateway in this process and runs one scenario script (tests/plugins/*_scenario.py) in that venv,
which prints its observations as JSON; the test asserts on them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_PYTHON = ROOT / ".venv-plugins" / "bin" / "python"
HERE = Path(__file__).resolve().parent


def _plugin_venv_problem(module: str) -> str | None:
    # The install script writes its stamp only after a complete install: no import probe needed (imports cost seconds).
    if not PLUGIN_PYTHON.exists() or not (ROOT / ".venv-plugins" / ".voxgate-stamp").exists():
        return (
            f".venv-plugins is missing or incomplete, so {module} cannot run: scripts/install_plugin_deps.sh installs "
            "pipecat-ai and livekit-agents (from PyPI) there; see .venv-plugins/install.log"
        )
    return None


def plugin_venv(module: str):
    """A fixture factory: skips, with the reason, when the plugin venv cannot import `module`."""

    @pytest.fixture(scope="module")
    def _check():
        problem = _plugin_venv_problem(module)
        if problem:
            pytest.skip(problem)

    return _check


async def run_scenario(script: str, *args: str, timeout: float = 120.0) -> dict:
    """Runs tests/plugins/<script> in the plugin venv (while this loop serves the gateway); its JSON result."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the plugin venv imports nothing of this tree
    # ... but its clients: this checkout's, ahead of wherever the venv's editable installs point
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / "clients" / name) for name in ("python", "pipecat", "livekit"))
    proc = await asyncio.create_subprocess_exec(
        str(PLUGIN_PYTHON),
        str(HERE / script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace")[-4000:])
        raise AssertionError(f"{script} failed with {proc.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1])


def capture_words(monkeypatch) -> list[dict]:
    """Every `audio.words` event the gateway in this process emits, as it emits it."""
    from gateway.core.session import Session

    events: list[dict] = []
    emit = Session.emit

    def recording(self, event: dict) -> None:
        if event.get("type") == "audio.words":
            events.append(event)
        emit(self, event)

    monkeypatch.setattr(Session, "emit", recording)
    return events
