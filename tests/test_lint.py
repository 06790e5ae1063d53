"""ruff keeps the tree lint-clean and formatted (rules and line length in pyproject.toml's [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> list[str]:
    exe = Path(sys.executable).parent / "ruff"
    found = str(exe) if exe.exists() else shutil.which("ruff")
    if not found:
        pytest.skip("needs ruff (the test extra)")
    return [found]


def test_ruff_lint_is_clean():
    done = subprocess.run([*ruff(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_is_clean():
    done = subprocess.run([*ruff(), "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, "run `ruff format .`:\n" + done.stdout[-4000:] + done.stderr[-2000:]
