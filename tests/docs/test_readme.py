"""The README a newcomer reads first: short, its picture current, and every command and example in it works
as written (a renamed flag, script or message field fails here, not in a newcomer's terminal)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_readme_is_short():
    assert len(README.splitlines()) <= 300, "the README stays a ten-minute read: details go to docs/"


def test_the_architecture_picture_is_the_one_next_to_the_code():
    (block,) = re.findall(r"^```mermaid\n(.*?)^```", README, re.M | re.S)
    source = (ROOT / "gateway" / "architecture.mmd").read_text()
    assert block == source, "README's picture differs from gateway/architecture.mmd: copy the file into the README"
    for folder in re.findall(r"(?<![\w/])((?:audio|tts|gateway|bench)/(?:\w+/)*)", source):
        assert (ROOT / folder).is_dir(), f"the picture names {folder}, which does not exist"


def commands() -> list[str]:
    """Every command line in the README's indented blocks (comments cut off)."""
    lines = [line[4:] for line in README.splitlines() if line.startswith("    ") and not line.startswith("     ")]
    return [line.split("  #")[0].strip() for line in lines if re.match(r"(\w+=\S+ )*(scripts/|\.venv/bin/)", line)]


def serve_sh_args() -> list[str]:
    """What scripts/serve.sh hands to `voxgate serve` before the caller's own arguments."""
    (line,) = [ln for ln in (ROOT / "scripts/serve.sh").read_text().splitlines() if ln.startswith("exec ")]
    words = shlex.split(line)
    assert words[:3] == ["exec", ".venv/bin/voxgate", "serve"] and words[-1] == "$@"
    return words[3:-1]


def test_readme_commands_parse():
    found = commands()
    assert any(c.startswith("scripts/serve.sh") for c in found) and any(c.startswith("scripts/test.sh") for c in found)
    # inline `scripts/serve.sh --flag …` examples in the prose count too
    found += re.findall(r"`(scripts/serve\.sh [^`]+)`", README)
    parser = build_parser()
    for command in found:
        words = [w for w in shlex.split(command) if not re.match(r"\w+=", w)]  # VAR=value prefixes
        script = ROOT / words[0]
        assert script.is_file() and os.access(script, os.X_OK), (
            f"{words[0]} (README: {command!r}) is not an executable script"
        )
        if words[0] == "scripts/serve.sh":
            args = parser.parse_args(["serve", *serve_sh_args(), *words[1:]])  # exits (fails) on an unknown flag
            assert (ROOT / args.config).is_file(), f"{command!r}: no such config {args.config}"
        elif words[0] == "scripts/test.sh":
            assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for config in re.findall(r"--config ([\w./-]+\.yaml)", README):
        assert (ROOT / config).is_file(), f"README names {config}, which does not exist"


def test_voxgate_help_lists_what_the_readme_uses():
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0
    for flag in set(re.findall(r"voxgate serve[^`\n]*?(--[a-z-]+)", README)) | {"--port", "--config", "--model"}:
        assert flag in done.stdout, f"voxgate serve has no {flag} (the README uses it)"


EXAMPLES = [
    ("README.md", 0),
    ("docs/python-client.md", 0),
    ("clients/python/README.md", 0),
]


@pytest.mark.parametrize("path,index", EXAMPLES, ids=[f"{p}#{i}" for p, i in EXAMPLES])
async def test_python_examples_run_against_a_real_gateway(start_gateway, path, index, tmp_path):
    """The example as written, only its port moved (8080 is the default a newcomer's server listens on)."""
    code = PYTHON_BLOCK.findall((ROOT / path).read_text())[index]
    assert "127.0.0.1:8080" in code
    gw = await start_gateway()
    script = tmp_path / "example.py"
    script.write_text(code.replace("127.0.0.1:8080", f"127.0.0.1:{gw.port}"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()[-3000:]
    assert b"played" in out or b"heard" in out, out.decode()
