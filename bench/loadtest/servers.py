"""Gateways under test: a local `voxgate serve` subprocess per config, or a remote URL.

A subprocess keeps the server's CPU apart from the client's measurements
(separate GIL, separate event loop), as a real deployment would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp


@dataclass
class Target:
    label: str  # A, B, ...
    ws_url: str  # ws://host:port/v1/ws
    http_url: str  # http://host:port
    config_path: str | None = None
    process: subprocess.Popen | None = None
    log_path: str | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def target_from_url(label: str, url: str) -> Target:
    """Accept ws(s)://host:port[/v1/ws] or http(s)://host:port."""
    parts = urlsplit(url if "://" in url else "ws://" + url)
    secure = parts.scheme in ("wss", "https")
    path = parts.path if parts.path and parts.path != "/" else "/v1/ws"
    ws = urlunsplit(("wss" if secure else "ws", parts.netloc, path, parts.query, ""))
    http = urlunsplit(("https" if secure else "http", parts.netloc, "", "", ""))
    return Target(label, ws, http)


async def start_local(label: str, config_path: str | None, log_dir: Path, ready_timeout_s: float = 60.0) -> Target:
    """`voxgate serve --config PATH` on a free loopback port; with no config, the stub gateway (bench/loadtest/stub.py)."""
    port = free_port()
    log_path = log_dir / f"server_{label}.log"
    if config_path:
        cmd = [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--config",
            config_path,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
        ]
    else:
        cmd = [sys.executable, "-m", "bench.loadtest.stub", "--host", "127.0.0.1", "--port", str(port)]
    logf = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=os.getcwd(), start_new_session=True)
    logf.close()
    target = Target(label, f"ws://127.0.0.1:{port}/v1/ws", f"http://127.0.0.1:{port}", config_path, proc, str(log_path))
    deadline = time.monotonic() + ready_timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"gateway {label} ({config_path or 'stub'}) exited with {proc.returncode}; see {log_path}"
                )
            try:
                async with http.get(target.http_url + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return target
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.2)
    stop_local(target)
    raise RuntimeError(f"gateway {label} ({config_path}) not ready within {ready_timeout_s:.0f} s; see {log_path}")


def stop_local(target: Target, timeout_s: float = 15.0) -> None:
    proc = target.process
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def scrape(http: aiohttp.ClientSession, target: Target) -> str:
    """The gateway's /metrics text ('' with a comment when it cannot be read)."""
    try:
        async with http.get(target.http_url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
            return await r.text()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return f"# scrape failed: {type(exc).__name__}: {exc}\n"


def parse_prometheus(text: str) -> dict[str, float]:
    """Sample lines of the text exposition format → {'name{labels}': value}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def counter_deltas(before: str, after: str) -> dict[str, float]:
    """Every sample that changed between two scrapes, with its change (gauges: the new value)."""
    b, a = parse_prometheus(before), parse_prometheus(after)
    out = {}
    for key, value in a.items():
        name = key.split("{", 1)[0]
        if name.endswith("_created"):
            continue  # creation timestamps, not measurements
        if name.endswith(("_total", "_count", "_sum")):
            d = value - b.get(key, 0.0)
            if d:
                out[key] = d
        elif "_bucket" not in name and value != b.get(key):
            out[key] = value
    return out
