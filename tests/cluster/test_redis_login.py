"""A Redis that wants a password: the start's one-line refusal says so and names cluster.password_env, instead
of calling a Redis that answered "unreachable" with its raw protocol error. A real redis-server with requirepass;
real `voxgate serve` and `voxgate engine` processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cluster.harness import NEEDS, ROOT, free_port, wait_port
from tests.conftest import CLUSTER_SECRET_ENV

pytestmark = pytest.mark.skipif("redis-server" in NEEDS, reason="needs redis-server (scripts/install_test_deps.sh)")

HOST = "127.0.0.19"


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory):
    port = free_port(HOST)
    proc = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            HOST,
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            "the-right-password",
            "--dir",
            str(tmp_path_factory.mktemp("redis")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(HOST, port, proc=proc)
    yield f"redis://{HOST}:{port}/0"
    proc.kill()
    proc.wait()


def refusal(tmp_path, command: list[str], cluster: str, env_extra: dict | None = None) -> str:
    import os

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"engine: {{kind: simulated}}\nserver: {{host: {HOST}, port: 0}}\ncluster: {cluster}\n")
    env = {k: v for k, v in os.environ.items() if k != "QA_REDIS_PASSWORD"}
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *command, "--config", str(cfg), "--log-level", "ERROR"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, **(env_extra or {})},
    )
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    return lines[0]


def test_no_password_configured_names_cluster_password_env(locked_redis, tmp_path):
    line = refusal(tmp_path, ["serve"], f"{{redis_url: '{locked_redis}', secret_env: {CLUSTER_SECRET_ENV}}}")
    assert locked_redis in line and "password" in line and "cluster.password_env" in line, line
    assert "unreachable" not in line and "HELLO" not in line, line
    line = refusal(tmp_path, ["engine", "--listen", f"ipc://{tmp_path}/e.sock"], f"{{redis_url: '{locked_redis}'}}")
    assert locked_redis in line and "cluster.password_env" in line, line


def test_a_wrong_password_names_the_variable_it_came_from(locked_redis, tmp_path):
    line = refusal(
        tmp_path,
        ["serve"],
        f"{{redis_url: '{locked_redis}', password_env: QA_REDIS_PASSWORD, secret_env: {CLUSTER_SECRET_ENV}}}",
        {"QA_REDIS_PASSWORD": "not-the-password"},
    )
    assert locked_redis in line and "refused the password in QA_REDIS_PASSWORD" in line, line


def test_a_node_without_cluster_secret_env_refuses_to_start_naming_it(tmp_path):
    """The hop secret comes from the environment only (never made up and kept in Redis): without it, no start."""
    line = refusal(tmp_path, ["serve"], "{redis_url: 'redis://127.0.0.1:1/0'}")
    assert "cluster.secret_env is required" in line, line
