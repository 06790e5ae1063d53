"""Packaging hygiene a newcomer trips over: metadata warnings on every install, build output left untracked."""

import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECTS = sorted([ROOT / "pyproject.toml", *ROOT.glob("clients/*/pyproject.toml")])


@pytest.mark.parametrize("path", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_license_is_an_spdx_string(path):
    """A `{text = …}` table makes setuptools >= 77 print ~120 lines of deprecation warnings on every install."""
    data = tomllib.loads(path.read_text())
    assert isinstance(data["project"]["license"], str), 'project.license must be an SPDX string, e.g. "Apache-2.0"'
    (req,) = [r for r in data["build-system"]["requires"] if r.startswith("setuptools")]
    floor = req.replace(" ", "").partition(">=")[2]
    assert floor and int(floor.split(".")[0]) >= 77, "SPDX license strings need setuptools>=77 to build"


@pytest.mark.parametrize("path", ["clients/python/build/lib/x.py", "clients/pipecat/build/x", "site/index.html"])
def test_build_output_is_ignored(path):
    """`pip install ./clients/python` builds in place; `mkdocs build` writes site/."""
    done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
    assert done.returncode == 0, f"{path} is not ignored by .gitignore"
