"""The engine registry in the call plane: a `voxgate engine` process registers itself in Redis with a TTL and
its load; a gateway with `engine.kind: remote` and no `engine.endpoints` finds it there, speaks through it,
and drops it within the TTL once the engine is killed. Real redis-server, real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import CLUSTER_SECRET_ENV
from tests.cluster.harness import NEEDS, ROOT, Node, Redis, http_json, speak_one_turn, wait_until

pytestmark = pytest.mark.skipif(
    bool(NEEDS), reason=f"needs {', '.join(NEEDS)} (scripts/install_test_deps.sh installs them)"
)
pytest.importorskip("zmq", reason="the engine service needs the service extra")

TTL_S = 3.0


async def test_engines_register_in_redis_and_gateways_find_them_there(tmp_path):
    redis = Redis(tmp_path)
    redis.start()
    cluster = {"redis_url": redis.url, "claim_ttl_s": TTL_S, "secret_env": CLUSTER_SECRET_ENV}
    engine_cfg = tmp_path / "engine.yaml"
    engine_cfg.write_text(
        yaml.safe_dump(
            {
                "engine": {"kind": "simulated"},
                "cluster": cluster,
                "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20},
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    engine = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "engine",
            "--config",
            str(engine_cfg),
            "--listen",
            f"ipc://{tmp_path}/engine.sock",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    gateway = Node(
        "g1", "127.0.0.7", tmp_path, {"engine": {"kind": "remote"}, "cluster": cluster, "playout": {"prebuffer_ms": 40}}
    )
    try:
        r = redis.client()
        key = await wait_until(lambda: next(iter(r.scan_iter(match="voxgate:engine:*")), None), timeout=30)
        entry = {k.decode(): v.decode() for k, v in r.hgetall(key).items()}
        assert entry["endpoint"] == f"ipc://{tmp_path}/engine.sock" and entry["engine"] == "simulated"
        assert {"active", "queued", "draining"} <= entry.keys() and 0 < r.pttl(key) <= TTL_S * 1000
        gateway.start()  # no endpoint list anywhere: it finds the engine in Redis
        assert (await speak_one_turn(f"{gateway.ws}/v1/ws", "Hello from a registered engine."))["audio_bytes"] > 0
        engine.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        await wait_until(lambda: not r.exists(key), timeout=TTL_S + 2)  # its registration expires within the TTL
        # the gateway's link saw the engine go at once; within a directory refresh it drops the engine too
        await wait_until(
            lambda: "no engine is registered" in http_json(gateway.url + "/readyz")[1].get("reason", ""), timeout=TTL_S
        )
        assert time.monotonic() - t_kill <= TTL_S + 3
    finally:
        engine.kill()
        engine.wait()
        gateway.stop()
        redis.stop()


async def test_an_isolated_engine_stays_private_to_its_gateway(tmp_path, start_gateway):
    """engine.isolate's child serves its own gateway on a private ipc:// socket: it never registers in the plane
    (a gateway elsewhere that finds engines in Redis would send its calls to an endpoint that is not its own)."""
    redis = Redis(tmp_path)
    redis.start()
    try:
        gw = await start_gateway(
            {
                "engine": {"kind": "simulated", "isolate": True},
                "cluster": {"redis_url": redis.url, "claim_ttl_s": TTL_S, "secret_env": CLUSTER_SECRET_ENV},
            }
        )
        assert (
            gw.supervisor is not None
            and (await asyncio.to_thread(http_json, f"http://127.0.0.1:{gw.port}/readyz"))[0] == 200
        )
        r = redis.client()
        assert r.exists(f"voxgate:node:{gw.core.cluster.node_id}")  # the gateway itself is in the plane
        await asyncio.sleep(TTL_S / 3 + 0.5)  # past a registration beat of the child, had it one
        assert list(r.scan_iter(match="voxgate:engine*")) == []
    finally:
        redis.stop()


async def test_a_registered_tcp_engine_this_gateway_has_no_secret_for_is_named_in_readyz(
    tmp_path, start_gateway, monkeypatch
):
    """A gateway without VOXGATE_ENGINE_SECRET that finds a tcp:// engine in the registry says why it cannot use it
    (before: a link stuck 'connecting' for ever, and a log blaming Redis)."""
    monkeypatch.delenv("VOXGATE_ENGINE_SECRET", raising=False)
    redis = Redis(tmp_path)
    redis.start()
    cluster = {"redis_url": redis.url, "claim_ttl_s": TTL_S, "secret_env": CLUSTER_SECRET_ENV}
    engine_cfg = tmp_path / "engine.yaml"
    engine_cfg.write_text(yaml.safe_dump({"engine": {"kind": "simulated"}, "cluster": cluster}))
    from tests.service.engines import free_port

    env = {
        **os.environ,
        "VOXGATE_ENGINE_SECRET": "registry-test-secret-0123456789",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    engine = None
    try:
        gw = await start_gateway({"engine": {"kind": "remote"}, "cluster": cluster})
        engine = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "engine",
                "--config",
                str(engine_cfg),
                "--listen",
                f"tcp://127.0.0.1:{free_port()}",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        deadline = time.monotonic() + 30
        while True:  # the gateway runs in this loop: ask it from a thread
            status, body = await asyncio.to_thread(http_json, f"http://127.0.0.1:{gw.port}/readyz")
            if r_found(redis) and "VOXGATE_ENGINE_SECRET" in body.get("reason", "") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert (
            status == 503 and "VOXGATE_ENGINE_SECRET" in body.get("reason", "") and "tcp://127.0.0.1:" in body["reason"]
        ), body
    finally:
        if engine is not None:
            engine.kill()
            engine.wait()
        redis.stop()


def r_found(redis) -> bool:
    return bool(list(redis.client().scan_iter(match="voxgate:engine:*")))
