"""`voxgate serve --workers N`: real worker processes on one port (SO_REUSEPORT) beside a real redis-server."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import websockets

from tests.conftest import CLUSTER_SECRET_ENV

HOST = "127.0.0.1"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/install_test_deps.sh installs it)")
    host = "127.0.0.23"
    port = free_port(host)
    proc = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            host,
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path_factory.mktemp("redis")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"redis://{host}:{port}/0"
    proc.terminate()
    proc.wait(10)


def write_config(tmp_path, redis_url: str | None) -> str:
    cluster = f"cluster: {{redis_url: '{redis_url}', secret_env: {CLUSTER_SECRET_ENV}}}\n" if redis_url else ""
    path = tmp_path / "workers.yaml"
    path.write_text(
        f"server: {{host: {HOST}, port: 0}}\nengine: {{kind: simulated}}\n"
        "simulated: {first_packet_ms: 20, capacity_x: 1000}\n" + cluster
    )
    return str(path)


class Serve:
    """`voxgate serve --workers N` as a subprocess, its output read by a thread so that no wait can block
    past its timeout (a worker that hangs in its start holds the pipe open without writing)."""

    def __init__(self, config: str, workers: int):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--config",
                config,
                "--workers",
                str(workers),
                "--log-level",
                "WARNING",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put("")  # EOF: every process holding the pipe has exited

    def read_until(self, pattern: str, timeout: float = 60.0) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {pattern!r} within {timeout} s:\n" + "".join(self.lines) + self.stacks()
                ) from None
            if not line:
                raise AssertionError("serve exited:\n" + "".join(self.lines))
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                return m

    def rest(self, timeout: float) -> str:
        """Everything it writes until every process holding its output has exited."""
        deadline, out = time.monotonic() + timeout, []
        try:
            while line := self._queue.get(timeout=max(0.0, deadline - time.monotonic())):
                out.append(line)
        except queue.Empty:
            raise AssertionError(
                f"still running {timeout} s on:\n" + "".join(self.lines + out) + self.stacks()
            ) from None
        self.lines += out
        return "".join(out)

    def stacks(self) -> str:
        """Where the parent and its workers are (py-spy, where installed): what a hang report needs."""
        if shutil.which("py-spy") is None:
            return ""
        pids = subprocess.run(["pgrep", "-s", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return "".join(
            subprocess.run(["py-spy", "dump", "--pid", pid], capture_output=True, text=True, timeout=30).stdout
            for pid in pids
        )

    def kill(self) -> None:
        """The parent and every worker left (they share its session and process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def active_sessions(own_url: str) -> float:
    text = urllib.request.urlopen(own_url + "/metrics", timeout=5).read().decode()
    return float(re.search(r"^voxgate_sessions_active (\S+)$", text, re.M).group(1))


def test_workers_without_redis_url_refuse_in_one_line(tmp_path):
    serve = Serve(write_config(tmp_path, None), 2)
    out = serve.rest(timeout=60)
    assert serve.proc.wait(10) == 2
    assert out.strip().count("\n") == 0 and "cluster.redis_url" in out and "--workers 2" in out


def test_workers_with_an_in_process_qwen3_engine_refuse_in_one_line(tmp_path):
    """N workers would each load the model (N copies on one GPU): the refusal names the engine service."""
    path = tmp_path / "qwen3.yaml"
    path.write_text(
        f"server: {{host: {HOST}, port: 0}}\nengine: {{kind: qwen3, model_dir: /nonexistent}}\n"
        f"cluster: {{redis_url: 'redis://127.0.0.1:1/0', secret_env: {CLUSTER_SECRET_ENV}}}\n"
    )
    serve = Serve(str(path), 2)
    out = serve.rest(timeout=60)
    assert serve.proc.wait(10) == 2
    assert out.strip().count("\n") == 0 and "load the model 2 times" in out and "voxgate engine" in out


async def _one_call(port: int, text: str) -> tuple[int, dict]:
    async with websockets.connect(f"ws://{HOST}:{port}/v1/ws") as ws:
        await ws.send(json.dumps({"type": "session.start", "output": {"encoding": "mulaw", "sample_rate": 8000}}))
        await ws.send(json.dumps({"type": "text", "turn_id": "t1", "text": text, "final": True}))
        frames = 0
        while True:
            msg = await asyncio.wait_for(ws.recv(), 20)
            if isinstance(msg, bytes):
                frames += 1
                continue
            event = json.loads(msg)
            if event["type"] == "turn.done":
                return frames, event


def test_a_worker_stuck_in_its_shutdown_is_killed_and_the_parent_exits(tmp_path, redis_url):
    """A worker that does not exit after SIGTERM (here: stopped with SIGSTOP, so it cannot) is killed once the
    drain timeout and the grace have passed; the other exits by itself and the parent returns."""
    import gateway.workers as W

    path = tmp_path / "stuck.yaml"
    path.write_text(
        f"server: {{host: {HOST}, port: 0, limits: {{drain_timeout_s: 0.5}}}}\nengine: {{kind: simulated}}\n"
        f"cluster: {{redis_url: '{redis_url}', key_prefix: 'stuck:', secret_env: {CLUSTER_SECRET_ENV}}}\n"
    )  # the killed worker's keys stay till their TTL
    serve = Serve(str(path), 2)
    try:
        pids = [
            int(serve.read_until(r"worker \d+: node \S+, own address \S+ \(pid (\d+)\)").group(1)) for _ in range(2)
        ]
        os.kill(pids[0], signal.SIGSTOP)
        serve.proc.send_signal(signal.SIGTERM)
        out = serve.rest(timeout=0.5 + W.STOP_GRACE_S + 20)
        assert serve.proc.wait(10) == 0
        assert f"pid {pids[0]}) did not stop within" in out, "".join(serve.lines)
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        serve.kill()


def test_two_workers_both_serve_sessions_on_one_port(tmp_path, redis_url):
    serve = Serve(write_config(tmp_path, redis_url), 2)
    try:
        port = int(serve.read_until(r"2 workers sharing http://[^:]+:(\d+)").group(1))
        workers = {}
        for _ in range(2):
            m = serve.read_until(r"worker (\d+): node (\S+), own address (http://\S+) \(pid (\d+)\)")
            workers[int(m.group(1))] = (m.group(2).rstrip(","), m.group(3), int(m.group(4)))
        assert sorted(workers) == [0, 1]
        assert workers[0][0] != workers[1][0]  # each worker is its own node
        assert workers[0][0].endswith("-w0") and workers[1][0].endswith("-w1")
        # both joined the plane as nodes, each reachable at its own address (the forward's target)
        import redis

        r = redis.Redis.from_url(redis_url, decode_responses=True)
        deadline = time.monotonic() + 10
        while len(r.zrange("voxgate:nodes", 0, -1)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(r.zrange("voxgate:nodes", 0, -1)) == sorted(w[0] for w in workers.values())
        for node_id, own_url, _ in workers.values():
            assert r.hget(f"voxgate:node:{node_id}", "url") == own_url

        async def calls_held_open(n: int) -> list[float]:
            conns = [await websockets.connect(f"ws://{HOST}:{port}/v1/ws") for _ in range(n)]
            for ws in conns:
                await ws.send(json.dumps({"type": "session.start"}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.started"
            counts = [await asyncio.to_thread(active_sessions, w[1]) for w in workers.values()]
            for ws in conns:
                await ws.close()
            return counts

        counts = asyncio.run(calls_held_open(16))
        # the kernel spread 16 connections over both (all on one: 2 in 65,536)
        assert sum(counts) == 16 and min(counts) >= 1, counts
        # and a call on the shared port plays through, whichever worker takes it
        frames, done = asyncio.run(_one_call(port, "Hello from one of two workers."))
        assert frames > 20 and done["interrupted"] is False

        # a worker that dies is restarted; the other serves on meanwhile
        os.kill(workers[0][2], signal.SIGKILL)
        m = serve.read_until(r"worker 0: node (\S+), own address (http://\S+) \(pid (\d+)\)")
        assert int(m.group(3)) != workers[0][2]
        frames, _ = asyncio.run(_one_call(port, "Still here."))
        assert frames > 5
    finally:
        serve.proc.send_signal(signal.SIGTERM)
        try:
            serve.proc.wait(30)
        finally:
            serve.kill()
    assert serve.proc.returncode == 0
