"""The gateway under attack: `voxgate serve` in its own process, with its log on disk."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.loadtest.servers import free_port

# Fast simulated engine; idle and unknown-call timeouts long enough that the fuzzer, not a timer, ends calls.
CONFIG = """
server: {{host: 127.0.0.1, port: {port}, max_sessions: {max_sessions}, limits: {{idle_timeout_s: 60}}}}
engine: {{kind: simulated}}
simulated: {{first_packet_ms: 20, capacity_x: 400, ms_per_char: 40, stream_rtf: 0.1}}
playout: {{prebuffer_ms: 60}}
telephony: {{audiosocket_port: {as_port}, unknown_call_timeout_s: 30}}
"""
# the SIP entry's door, where the `sip` extra is installed (without it a gateway with sip.port refuses to start)
SIP_CONFIG = """sip: {{port: {sip_port}, host: 127.0.0.1, allow: [127.0.0.1], invites_per_source_per_s: 1000,
  rtp_ports: "40000-44999", ack_timeout_s: 2}}
"""

# What a crash or an unhandled error leaves in the log.
CRASH_MARKERS = ("Traceback (most recent call last)", "Error handling request", "Task exception was never retrieved")


class GatewayProcess:
    """Starts the gateway, tells whether it still lives, and what its log gained since the last look."""

    def __init__(self, max_sessions: int = 400, extra_config: str = "", log_dir: str | None = None):
        self.port = free_port()
        self.audiosocket_port = free_port()
        # a free TCP port; UDP on the same number is free as a rule on loopback. None: no SIP (the sip extra is missing)
        self.sip_port = free_port() if importlib.util.find_spec("aiosipua") else None
        self._dir = Path(log_dir or tempfile.mkdtemp(prefix="voxgate-fuzz-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self._dir / "fuzz.yaml"
        sip = SIP_CONFIG.format(sip_port=self.sip_port) if self.sip_port else ""
        self.config_path.write_text(
            CONFIG.format(port=self.port, as_port=self.audiosocket_port, max_sessions=max_sessions) + sip + extra_config
        )
        self.log_path = self._dir / "server.log"
        self.proc: subprocess.Popen | None = None
        self._log_offset = 0

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "GatewayProcess":
        env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", str(self.config_path), "--log-level", "WARNING"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the gateway exited with {self.proc.returncode} at start; log:\n{self.log_path.read_text()[-3000:]}"
                )
            if self.get("/readyz")[0] == 200:
                # wait for the AudioSocket listener too (it starts with the server, but the check is cheap)
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the gateway was not ready within {timeout_s:.0f} s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.http + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError as exc:
            return 0, str(exc)

    def healthy(self) -> bool:
        return self.alive() and self.get("/healthz")[0] == 200

    def new_log(self) -> str:
        """What the server logged since the last call."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        self._log_offset += len(data)
        return data.decode(errors="replace")

    def crashes_in(self, log_text: str) -> list[str]:
        """Log paragraphs that show an unhandled error."""
        lines = log_text.splitlines()
        return [
            "\n".join(lines[max(0, i - 2) : i + 25])
            for i, line in enumerate(lines)
            if any(m in line for m in CRASH_MARKERS)
        ]

    def metrics(self) -> str:
        return self.get("/metrics")[1]

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def histogram_quantile(metrics_before: str, metrics_after: str, name: str, q: float) -> float:
    """Bucket-interpolated quantile (seconds) of a Prometheus histogram over the interval between two scrapes."""

    def buckets(text: str) -> dict[float, float]:
        out = {}
        for line in text.splitlines():
            if line.startswith(name + "_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
        return out

    b, a = buckets(metrics_before), buckets(metrics_after)
    rows = sorted((le, n - b.get(le, 0.0)) for le, n in a.items())
    if not rows or rows[-1][1] <= 0:
        return float("nan")
    target, prev_le, prev_n = q * rows[-1][1], 0.0, 0.0
    for le, n in rows:
        if n >= target:
            if le == float("inf"):
                return prev_le
            return prev_le + (target - prev_n) / max(n - prev_n, 1e-9) * (le - prev_le)
        prev_le, prev_n = le, n
    return prev_le


def dump(obj, path: str) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
