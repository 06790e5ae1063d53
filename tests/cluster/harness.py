"""Real parts for the call-plane tests: Debian's redis-server and haproxy, and gateway nodes as subprocesses
(`python -m gateway.cli serve`, SimulatedEngine), each on its own 127.0.0.x address and a free port."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import websockets
import yaml

ROOT = Path(__file__).resolve().parents[2]
NEEDS = [b for b in ("redis-server", "haproxy") if shutil.which(b) is None]


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout} s")


def http_json(
    url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None
) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


class Redis:
    def __init__(self, workdir: Path, host: str = "127.0.0.1"):
        self.host, self.port, self.workdir = host, free_port(host), workdir
        self.proc: subprocess.Popen | None = None
        self._client = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                self.host,
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(self.host, self.port, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def client(self):
        """One client for the test's own looks into Redis (reconnects after a restart)."""
        import redis

        if self._client is None:
            self._client = redis.Redis(host=self.host, port=self.port, socket_timeout=2)
        return self._client


class Node:
    """One gateway process of the plane."""

    def __init__(self, name: str, host: str, workdir: Path, config: dict):
        self.name, self.host, self.workdir = name, host, workdir
        self.port = free_port(host)
        self.audiosocket_port = free_port(host)
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.log = workdir / f"{name}.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def start(self, wait: bool = True) -> None:
        cfg = dict(self.config)
        cfg["server"] = {**cfg.get("server", {}), "host": self.host, "port": self.port}
        cfg["telephony"] = {**cfg.get("telephony", {}), "audiosocket_port": self.audiosocket_port}
        cfg["cluster"] = {**cfg.get("cluster", {}), "node_id": self.name}
        path = self.workdir / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--log-level", "WARNING"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"node {self.name} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            try:
                if http_json(self.url + "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"node {self.name} not ready after {timeout} s: {self.log.read_text()[-2000:]}")

    def metric(self, name: str, labels: str = "") -> float:
        """Sum of a Prometheus counter's samples whose label text contains `labels`."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#") and labels in line:
                head = line.split(" ")[0]
                if head == name or head.startswith(name + "{"):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


HAPROXY = """global
  maxconn 2000
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  timeout tunnel 60s
frontend round_robin
  bind {host}:{rr}
  http-request del-header X-Voxgate-Hop
  default_backend rr_nodes
frontend by_call
  bind {host}:{hashed}
  http-request del-header X-Voxgate-Hop  # as docs/cluster.md's example: only nodes send it
  # the call id is the path's third segment (/v1/twilio/ID, /v1/control/ID): both legs of a call hash alike
  http-request set-header X-Call-Id %[path,field(4,/)]
  default_backend hashed_nodes
listen audiosocket_round_robin
  mode tcp
  bind {host}:{audiosocket}
  balance roundrobin
{audiosocket_servers}
backend rr_nodes
  balance roundrobin
{rr_servers}
backend hashed_nodes
  balance hdr(X-Call-Id)
  hash-type consistent
{hashed_servers}
"""


class HAProxy:
    def __init__(self, workdir: Path, nodes: list[Node], host: str = "127.0.0.1"):
        self.host, self.workdir, self.nodes = host, workdir, nodes
        self.rr_port, self.hash_port, self.audiosocket_port = free_port(host), free_port(host), free_port(host)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        servers = "\n".join(f"  server {n.name} {n.host}:{n.port}" for n in self.nodes)
        cfg = self.workdir / "haproxy.cfg"
        audiosocket = "\n".join(f"  server {n.name} {n.host}:{n.audiosocket_port}" for n in self.nodes)
        cfg.write_text(
            HAPROXY.format(
                host=self.host,
                rr=self.rr_port,
                hashed=self.hash_port,
                audiosocket=self.audiosocket_port,
                rr_servers=servers,
                hashed_servers=servers,
                audiosocket_servers=audiosocket,
            )
        )
        self.proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.host, self.rr_port, proc=self.proc)
        wait_port(self.host, self.hash_port, proc=self.proc)
        wait_port(self.host, self.audiosocket_port, proc=self.proc)

    @property
    def rr(self) -> str:
        return f"ws://{self.host}:{self.rr_port}"

    @property
    def hashed(self) -> str:
        return f"ws://{self.host}:{self.hash_port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


async def wait_until(predicate, timeout: float = 10.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(step)
    raise AssertionError(f"not true within {timeout} s")


async def speak_one_turn(url: str, text: str, voice: str | None = None, **connect) -> dict:
    """Open a native /v1/ws session at `url` (optionally with a voice), speak `text` as one final turn until its
    turn.done; returns session.started with the turn's "audio_bytes" added."""
    async with websockets.connect(url, **connect) as ws:
        await ws.send(json.dumps({"type": "session.start", **({"voice": voice} if voice else {})}))
        started = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert started["type"] == "session.started", started
        await ws.send(json.dumps({"type": "text", "turn_id": "t1", "text": text, "final": True}))
        audio = 0
        while True:
            msg = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(msg, bytes):
                audio += len(msg)
            elif json.loads(msg)["type"] == "turn.done":
                break
        started["audio_bytes"] = audio
        return started
