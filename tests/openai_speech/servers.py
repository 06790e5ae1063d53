"""Upstream speech servers for the openai-speech engine's tests: `voxgate serve` started for real in another
process on loopback (its `POST /v1/audio/speech` is an OpenAI-compatible speech server), killed, restarted."""

from __future__ import annotations

import contextlib

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from tests.service.engines import free_port

ROOT = Path(__file__).resolve().parents[2]
# simulated speech that takes a while to make: a chunk is still streaming when the test acts on it
SLOW_SIM = {"first_packet_ms": 20, "capacity_x": 50, "ms_per_char": 70, "stream_rtf": 0.5, "packet_ms": 80}
FAST_SIM = {"first_packet_ms": 20, "capacity_x": 200, "ms_per_char": 40, "stream_rtf": 0.05}


class SpeechServer:
    """`voxgate serve` with a config of its own; `base` is what an OpenAI client takes (`http://…/v1`)."""

    def __init__(self, tmp: Path, name: str, config: dict):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/v1"
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    @classmethod
    def simulated(cls, tmp: Path, name: str, sim: dict | None = None, **sections) -> "SpeechServer":
        return cls(
            tmp,
            name,
            {
                "engine": {"kind": "simulated"},
                "simulated": sim or FAST_SIM,
                "playout": {"prebuffer_ms": 40},
                **sections,
            },
        )

    def start(self) -> "SpeechServer":
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        with open(self.log, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    "serve",
                    "--config",
                    str(self.config),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    async def wait_ready(self, timeout: float = 60.0) -> "SpeechServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"speech server exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                status, body = await asyncio.to_thread(self.get, "/readyz")
                if status == 200 and json.loads(body).get("ready"):
                    return self
            except OSError:
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError(f"speech server not ready in {timeout} s: {self.log.read_text()[-3000:]}")

    def metric(self, name: str) -> float:
        """A metric's value as the server's own /metrics reports it (the first sample of that name)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(f"{name} not in /metrics")

    def in_flight(self) -> float:
        return self.metric("voxgate_speech_requests_in_flight")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.asynccontextmanager
async def served_in_loop(server_class):
    """`start(mode)` → (server, base URL) for a test server that runs in the test's own loop (`server_class(mode)`
    with `await .start()` → (runner, base)); every one started is stopped on exit."""
    runners = []

    async def start(*args):
        server = server_class(*args)
        runner, base = await server.start()
        runners.append(runner)
        return server, base

    try:
        yield start
    finally:
        for runner in runners:
            await runner.cleanup()
