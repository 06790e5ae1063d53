"""The `voxgate` command lines in docs/ parse as written (a renamed flag or subcommand fails here), name
configs that exist, and the engine-service example — `voxgate engine` plus `voxgate serve --engine-endpoint` —
runs for real and speaks a turn."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import websockets

from gateway.cli import build_parser
from tests.cluster.harness import free_port, http_json, wait_until

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md")  # benchmarks: its bench tools' own


def command_lines(path: Path) -> list[str]:
    """Indented command lines starting with .venv/bin/voxgate or scripts/serve.sh, continuations joined."""
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"    (\w+=\S+ )*(\.venv/bin/voxgate|scripts/serve\.sh)\b", line):
            text = line.strip()
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            out.append(re.sub(r"\s+#.*$", "", text).rstrip("& "))
        i += 1
    return out


def serve_sh_args() -> list[str]:
    (line,) = [ln for ln in (ROOT / "scripts/serve.sh").read_text().splitlines() if ln.startswith("exec ")]
    return shlex.split(line)[3:-1]


CASES = [(p, c) for p in PAGES for c in command_lines(p)]


@pytest.mark.parametrize("page,command", CASES, ids=[f"{p.name}:{c[:50]}" for p, c in CASES])
def test_doc_command_parses(page, command):
    command = re.sub(r"\s\[[^\]]*\]", "", command)  # [--optional …] placeholders
    words = [w for w in shlex.split(command) if not re.match(r"\w+=", w)]
    argv = words[1:] if words[0] == ".venv/bin/voxgate" else ["serve", *serve_sh_args(), *words[1:]]
    build_parser().parse_args(argv)  # SystemExit (a failure) on an unknown subcommand or flag
    for config in re.findall(r"--config (\S+)", command):
        assert (ROOT / config).is_file(), f"{page.name}: {command!r} names {config}, which does not exist"


def test_the_engine_pages_examples_are_full_commands():
    lines = command_lines(ROOT / "docs" / "engine.md")
    engines = [c for c in lines if " engine " in c]
    assert engines and all("--config configs/" in c and "--listen" in c for c in engines)
    assert any("--engine-endpoint tcp://" in c for c in lines) and any("--engine-endpoint ipc://" in c for c in lines)
    assert not re.search(r"> *gateway\.yaml|engine\.yaml", (ROOT / "docs" / "engine.md").read_text())


async def test_engine_and_gateway_on_one_machine(tmp_path):
    """docs/engine.md's "One machine, two processes", with the socket in a temporary folder and free ports."""
    sock = f"ipc://{tmp_path}/engine.sock"
    http_port, port = free_port("127.0.0.1"), free_port("127.0.0.1")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "gateway.cli"]
    logs = [open(tmp_path / "engine.log", "wb"), open(tmp_path / "gateway.log", "wb")]
    engine = subprocess.Popen(
        [*cli, "engine", "--config", "configs/default.yaml", "--listen", sock, "--http-port", str(http_port)],
        cwd=ROOT,
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    gateway = subprocess.Popen(
        [*cli, "serve", "--config", "configs/default.yaml", "--engine-endpoint", sock, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    try:

        def ready() -> bool:
            try:
                return http_json(f"http://127.0.0.1:{port}/readyz")[0] == 200
            except OSError:
                return False

        await wait_until(ready, timeout=60)
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/ws") as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await ws.send(
                json.dumps({"type": "text", "turn_id": "t1", "text": "Spoken by the engine next door.", "final": True})
            )
            frames = 0
            async for message in ws:
                if isinstance(message, bytes):
                    frames += 1
                elif (event := json.loads(message))["type"] == "turn.done":
                    break
                elif event["type"] == "error":
                    pytest.fail(f"error event: {event}")
        assert frames > 10 and event["played_text"] == "Spoken by the engine next door."
    finally:
        for proc in (gateway, engine):
            proc.terminate()
        for proc in (gateway, engine):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
