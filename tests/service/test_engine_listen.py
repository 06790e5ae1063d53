"""`voxgate engine` that cannot listen where it is told: one line and exit 1, never a silent hang, and never
taking over the socket of an engine that already serves there (ZeroMQ's ipc:// bind would unlink it).

Real `voxgate engine` processes on loopback.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import msgspec
import pytest

pytest.importorskip("zmq")
import zmq.asyncio  # noqa: E402

from tests.service.engines import ROOT, EngineProcess, env, free_port  # noqa: E402


def run_engine(tmp_path, listen: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    config = tmp_path / "sim.yaml"
    config.write_text("engine: {kind: simulated}\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "engine",
            "--config",
            str(config),
            "--listen",
            listen,
            "--http-port",
            "0",
        ],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def said(proc: subprocess.CompletedProcess) -> str:
    return [line for line in proc.stdout.splitlines() if line.startswith("voxgate engine:")][-1]


def test_an_engine_that_cannot_bind_says_why_in_one_line_and_exits(tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    proc = run_engine(tmp_path, f"ipc://{a_file}/engine.sock")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert said(proc).startswith("voxgate engine: cannot start:") and str(a_file) in said(proc)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_engine(tmp_path, f"tcp://127.0.0.1:{port}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert said(proc).startswith("voxgate engine: cannot start:") and "in use" in said(proc)


async def _engine_id(endpoint: str) -> str:
    """What answers on an ipc:// endpoint: the engine id in its welcome."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        await sock.send_multipart([msgspec.msgpack.encode({"t": "hello", "v": 1, "gateway": "probe", "name": "t"})])
        while True:
            header = msgspec.msgpack.decode((await asyncio.wait_for(sock.recv_multipart(), 5))[0])
            if header["t"] == "welcome":
                return header["engine_id"]
    finally:
        sock.close()
        ctx.term()


async def test_a_second_engine_on_a_served_ipc_path_is_refused_and_the_first_keeps_serving(tmp_path):
    first = EngineProcess(tmp_path, "first")
    first.endpoint = f"ipc://{tmp_path}/engine.sock"
    first.start()
    try:
        await first.wait_ready()
        before = await _engine_id(first.endpoint)
        proc = await asyncio.to_thread(run_engine, tmp_path, first.endpoint)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "another process serves" in said(proc)
        assert await _engine_id(first.endpoint) == before  # still the first engine behind the path
    finally:
        first.stop()


def test_a_stale_ipc_socket_file_is_taken_over(tmp_path):
    """A socket file left by an engine that died is not a live engine: the new one serves there."""
    path = tmp_path / "engine.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    http = free_port()
    config = tmp_path / "sim.yaml"
    config.write_text("engine: {kind: simulated}\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "engine",
            "--config",
            str(config),
            "--listen",
            f"ipc://{path}",
            "--http-port",
            str(http),
        ],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("voxgate engine:"):
            line = proc.stdout.readline()
        assert "serving on" in line, line
    finally:
        proc.terminate()
        proc.wait(20)
