"""The one-machine call-plane recipe of docs/cluster.md: configs/cluster.yaml and deploy/haproxy/haproxy.cfg.

HAProxy checks its file as written; then the recipe runs for real — redis-server, two `voxgate serve
--config configs/cluster.yaml` nodes and HAProxy — with only its fixed ports moved to free ones (other
tests and engineers share this machine), and a Twilio call plus its agent meet through the balancer's
path doors on one node."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys

import pytest
import websockets
import yaml

from tests.cluster.harness import NEEDS, ROOT, Redis, free_port, http_json, wait_port, wait_until
from tests.telephony.clients import Control, TwilioClient

pytestmark = pytest.mark.skipif(
    bool(NEEDS), reason=f"needs {', '.join(NEEDS)} (scripts/install_test_deps.sh installs them)"
)

HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
CLUSTER_YAML = ROOT / "configs" / "cluster.yaml"


def test_haproxy_accepts_the_recipe_as_written():
    done = subprocess.run(["haproxy", "-c", "-f", str(HAPROXY_CFG)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    cfg = HAPROXY_CFG.read_text()
    assert re.search(r"^\s*mode http\b", cfg, re.M), "WebSocket upgrades need mode http"
    assert re.search(r"^\s*timeout tunnel\s+1h\b", cfg, re.M), "a call's WebSocket outlives timeout client/server"
    nodes = re.findall(r"^\s*server \S+ 127\.0\.0\.1:(\d+)", cfg, re.M)
    assert nodes == ["8081", "8082"]  # the ports the recipe starts configs/cluster.yaml's nodes on


def test_cluster_yaml_is_a_valid_node_config(monkeypatch):
    from gateway.config import load_config

    monkeypatch.setenv("VOXGATE_CLUSTER_SECRET", "s" * 32)
    config = load_config(CLUSTER_YAML)
    assert config.cluster.redis_url == "redis://127.0.0.1:6379/0" and config.server.port == 8081
    assert "127.0.0.1" in config.server.trusted_proxies  # HAProxy's X-Forwarded-For is believed


async def test_the_recipe_runs_a_call_through_haproxy(tmp_path):
    redis = Redis(tmp_path)
    redis.start()
    node_ports = [free_port("127.0.0.1"), free_port("127.0.0.1")]
    front = free_port("127.0.0.1")
    node_cfg = yaml.safe_load(CLUSTER_YAML.read_text())
    node_cfg["cluster"]["redis_url"] = redis.url
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(node_cfg))
    text = HAPROXY_CFG.read_text().replace("127.0.0.1:8080", f"127.0.0.1:{front}")
    text = text.replace("127.0.0.1:8081", f"127.0.0.1:{node_ports[0]}").replace(
        "127.0.0.1:8082", f"127.0.0.1:{node_ports[1]}"
    )
    (tmp_path / "haproxy.cfg").write_text(text)
    env = {**os.environ, "VOXGATE_CLUSTER_SECRET": secrets.token_hex(16), "PYTHONPATH": str(ROOT)}
    procs = []
    try:
        for port in node_ports:  # the recipe's `voxgate serve --config configs/cluster.yaml --port N`
            log = open(tmp_path / f"node-{port}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "gateway.cli",
                        "serve",
                        "--config",
                        str(tmp_path / "cluster.yaml"),
                        "--port",
                        str(port),
                        "--log-level",
                        "WARNING",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        haproxy = subprocess.Popen(
            ["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(haproxy)
        wait_port("127.0.0.1", front, proc=haproxy)
        for port in node_ports:
            await wait_until(lambda p=port: _ready(p), timeout=60)
        await wait_until(lambda: _ready(front), timeout=20)  # HAProxy's health checks passed

        base = f"ws://127.0.0.1:{front}"
        control = Control(await websockets.connect(f"{base}/v1/control/recipe-1"))
        await control.attach("recipe-1")
        tw = TwilioClient(await websockets.connect(f"{base}/v1/twilio/recipe-1", compression=None), "MZr1", "CAr1")
        await tw.start()
        assert (await control.expect("call.media", timeout=10))["state"] == "connected"
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello through the balancer.", "final": True})
        msg, _ = await tw.recv(timeout=10)
        assert msg["event"] == "media"
        done = await control.expect("turn.done", timeout=20)
        assert (
            done["sent_ms"] > 0 and done["interrupted"] is False
        )  # played_ms waits for mark echoes; this far end sends none
        await tw.stop()  # the caller hangs up: the call ends on its node
        assert (await control.expect("call.media", timeout=10))["state"] == "ended"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        redis.stop()


def _ready(port: int) -> bool:
    try:
        return http_json(f"http://127.0.0.1:{port}/readyz")[0] == 200
    except Exception:
        return False
