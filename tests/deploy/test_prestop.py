"""The gateway pod's preStop hook (`voxgate drain`) against a real `voxgate serve` process: the drain
starts at once (/readyz 503: the Service stops sending calls), the hook waits while a call is still
speaking, the call's turn plays to its end, and the hook returns once no call is left."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[2]
LONG = " ".join(f"Sentence number {i} keeps this turn going while the pod drains." for i in range(4))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def serve(tmp_path: Path, port: int) -> subprocess.Popen:
    """A real `voxgate serve` with the SimulatedEngine, slow enough that LONG plays for seconds."""
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        "server:\n  host: 127.0.0.1\n  limits:\n    drain_timeout_s: 30\nengine:\n  kind: simulated\n"
        "simulated:\n  first_packet_ms: 20\n  ms_per_char: 12\n"
    )
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def until_ready(port: int) -> None:
    for _ in range(400):
        try:
            if readyz(port)[0] == 200:
                return
        except OSError:
            pass
        await asyncio.sleep(0.05)


async def speak_long_turn(ws) -> None:
    """Start a session and send LONG as one final turn; returns once its audio has started."""
    await ws.send(json.dumps({"type": "session.start"}))
    await ws.send(json.dumps({"type": "text", "turn_id": "t", "text": LONG, "final": True}))
    while True:
        m = await ws.recv()
        if isinstance(m, str) and json.loads(m)["type"] == "audio.start":
            return


def drain_hook(pid: int, port: int) -> subprocess.Popen:
    """The preStop hook as the pod runs it: `voxgate drain` for the gateway's pid, reading /readyz on `port`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "drain",
            "--pid",
            str(pid),
            "--port",
            str(port),
            "--timeout",
            "60",
            "--poll",
            "0.1",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_the_prestop_hook_starts_the_drain_and_waits_while_a_call_speaks(tmp_path):
    port = free_port()
    server = serve(tmp_path, port)
    hook = None
    try:
        await until_ready(port)
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/ws") as ws:
            await speak_long_turn(ws)
            hook = drain_hook(server.pid, port)
            status, body = await asyncio.to_thread(readyz, port)
            for _ in range(50):  # the hook's SIGTERM lands within its start-up
                if status == 503:
                    break
                await asyncio.sleep(0.1)
                status, body = await asyncio.to_thread(readyz, port)
            assert status == 503 and body["ready"] is False and body["sessions"] == 1
            await asyncio.sleep(1.0)
            assert hook.poll() is None, "the hook returned while a call was still speaking"
            done = None
            while done is None:
                m = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(m, str) and json.loads(m)["type"] == "turn.done":
                    done = json.loads(m)
            assert done["interrupted"] is False and done["played_text"] == LONG
        out, _ = await asyncio.to_thread(hook.communicate, timeout=30)
        assert hook.returncode == 0
        assert "1 call(s) still open" in out and ("no calls left" in out or "has exited" in out), out
        await asyncio.to_thread(server.wait, 30)
        assert server.returncode == 0
    finally:
        for proc in (hook, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_a_hook_that_cannot_read_readyz_waits_while_the_gateway_lives(tmp_path):
    """--port pointing nowhere (or a gateway bound elsewhere) is not "the gateway has exited": the hook keeps
    the pod while the process lives, so its call still plays to the end."""
    port = free_port()
    server = serve(tmp_path, port)
    hook = None
    try:
        await until_ready(port)
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/ws") as ws:
            await speak_long_turn(ws)
            hook = drain_hook(server.pid, free_port())
            await asyncio.sleep(1.5)
            assert hook.poll() is None, "the hook returned while the gateway was still serving a call"
            while True:
                m = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(m, str) and json.loads(m)["type"] == "turn.done":
                    assert json.loads(m)["played_text"] == LONG
                    break
        out, _ = await asyncio.to_thread(hook.communicate, timeout=30)
        assert server.poll() is not None and hook.returncode == 0
        assert "cannot read" in out and "has exited" in out, out
    finally:
        for proc in (hook, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_hook_for_a_process_that_is_not_there_says_so():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "drain", "--pid", str(gone.pid), "--port", str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and f"no process {gone.pid}" in out.stdout, out.stdout + out.stderr
