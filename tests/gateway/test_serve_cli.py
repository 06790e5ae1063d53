"""`voxgate serve` as a user runs it: a real process, a real client, SIGTERM drains."""

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import websockets

ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    port = free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text((ROOT / "configs" / "simulated.yaml").read_text())
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    yield proc, port
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_bad_config_is_refused_at_start_with_the_key_named(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("server:\n  max_sesions: 3\n")
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "server.max_sesions: unknown key" in out.stdout and str(cfg) in out.stdout


async def test_sigterm_lets_the_turn_finish_then_closes_with_1001(served):
    proc, port = served
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/ws") as ws:
        await ws.send(json.dumps({"type": "session.start"}))
        await ws.send(json.dumps({"type": "text", "turn_id": "t", "text": "Short and sweet.", "final": True}))
        types = []
        while "audio.start" not in types:
            m = await ws.recv()
            if isinstance(m, str):
                types.append(json.loads(m)["type"])
        proc.send_signal(signal.SIGTERM)
        done = None
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                m = await asyncio.wait_for(ws.recv(), 20)
                if isinstance(m, str) and json.loads(m)["type"] == "turn.done":
                    done = json.loads(m)
        assert done is not None and done["interrupted"] is False
        assert closed.value.rcvd.code == 1001
    assert proc.wait(timeout=30) == 0
    out = proc.stdout.read()
    assert f"127.0.0.1:{port}" in out  # the URL is printed for the user


def _serve_refused(tmp_path, config: str, *args: str) -> str:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config)
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    return out.stdout


def test_a_sip_port_open_to_anyone_does_not_start_and_says_which_settings_close_it(tmp_path):
    line = _serve_refused(tmp_path, "sip:\n  port: 5060\n").strip().splitlines()[-1]
    assert "sip.allow" in line and "sip.auth" in line and "0.0.0.0/0" in line


def test_sip_public_ip_comes_from_the_command_line(tmp_path):
    """Kubernetes passes the node's address (--sip-public-ip=$(HOST_IP)); it is checked like the file's."""
    out = _serve_refused(tmp_path, "sip:\n  port: 5060\n  allow: [10.0.0.1]\n", "--sip-public-ip", "node.example")
    assert "sip.public_ip: must be an IP address" in out and "node.example" in out
