"""A green CI run means the tests ran: with redis-server hidden from PATH, a cluster suite skips outside CI and
fails under CI=true (tests/required.py, tests/conftest.py); the list's own lookups work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import required

ROOT = Path(__file__).resolve().parents[1]


def path_without(tmp_path: Path, hidden: str) -> str:
    """A PATH with every program of this one except `hidden` (one folder of links)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            link = folder / name
            if name != hidden and not link.exists() and os.access(os.path.join(entry, name), os.X_OK):
                link.symlink_to(os.path.join(entry, name))
    return str(folder)


def run_suite(tmp_path: Path, ci: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path_without(tmp_path / ci, "redis-server"), "CI": ci}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cluster/test_redis_login.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to hide it")
def test_hiding_redis_server_skips_outside_ci_and_fails_under_ci(tmp_path):
    (tmp_path / "false").mkdir()
    (tmp_path / "true").mkdir()
    outside = run_suite(tmp_path, "false")
    assert outside.returncode == 0 and "skipped" in outside.stdout and "failed" not in outside.stdout, outside.stdout
    ci = run_suite(tmp_path, "true")
    assert ci.returncode == 1, ci.stdout
    assert "redis-server is a required test dependency" in ci.stdout and "passed" not in ci.stdout, ci.stdout


def test_each_need_is_named_as_skip_reasons_name_it():
    by_name = {n.name: n for n in required.REQUIRED}
    assert by_name["redis-server"].named_in("needs redis-server, haproxy (scripts/install_test_deps.sh installs them)")
    assert by_name["zmq"].named_in("could not import 'zmq': No module named 'zmq'")
    assert by_name["onnx"].named_in("the onnx extra is not installed") and not by_name["onnx"].named_in(
        "onnxruntime is missing"
    )
    assert by_name["sox"].named_in("espeak-ng and sox are needed") and not by_name["sox"].named_in("soxr is missing")
    assert by_name["qwen_tts"].named_in("official qwen-tts 0.1.1 not importable")
    assert not by_name["torch"].named_in("CUDA only: set_sync_debug_mode needs a GPU")
