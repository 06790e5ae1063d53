"""Engine processes for tests: `voxgate engine` started for real on loopback, found by its HTTP port."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRET = "service-test-secret-0123456789"
# simulated speech that takes seconds to make: a turn is still mid-flight when something breaks
SLOW_SIM = {"first_packet_ms": 20, "capacity_x": 50, "ms_per_char": 70, "stream_rtf": 0.5, "packet_ms": 80}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def env() -> dict:
    """The tests' environment (PYTHONPATH: this tree) plus the engine secret."""
    return {**os.environ, "VOXGATE_ENGINE_SECRET": SECRET}


class EngineProcess:
    """`voxgate engine` on tcp://127.0.0.1:PORT (same port when started again)."""

    def __init__(self, tmp: Path, name: str, simulated: dict | None = None, heartbeat_s: float = 1.0):
        self.port, self.http_port = free_port(), free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(yaml.safe_dump({"engine": {"kind": "simulated"}, "simulated": simulated or SLOW_SIM}))
        self.heartbeat_s = heartbeat_s
        self.proc: subprocess.Popen | None = None
        self.log = tmp / f"{name}.log"

    def start(self) -> "EngineProcess":
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "engine",
                "--config",
                str(self.config),
                "--listen",
                self.endpoint,
                "--http-port",
                str(self.http_port),
                "--heartbeat-s",
                str(self.heartbeat_s),
            ],
            cwd=ROOT,
            env=env(),
            stdout=open(self.log, "ab"),
            stderr=subprocess.STDOUT,
        )
        return self

    def ready(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=1) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:  # 503: not ready, with its reason
            return json.loads(exc.read())
        except OSError:
            return None

    async def wait_ready(self, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            body = await asyncio.to_thread(self.ready)
            if body and body.get("ready"):
                return body
            await asyncio.sleep(0.1)
        raise TimeoutError(f"engine not ready in {timeout} s: {self.log.read_text()[-2000:]}")

    def streams(self) -> int:
        body = self.ready()
        return -1 if body is None else body["streams"]

    def metric(self, line_start: str) -> float | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(line_start):
                    return float(line.rsplit(" ", 1)[1])
        return None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
