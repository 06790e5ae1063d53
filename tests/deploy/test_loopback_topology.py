"""The deployment's topology as plain processes on loopback, with the configs and command lines that
`kubectl kustomize` renders for the cpu-demo overlay: one `voxgate engine`, two `voxgate serve`
gateways, Redis (Debian's redis-server standing in for the Valkey pod) and HAProxy standing in for
ingress-nginx, hashing on the same call-id pattern. Only addresses change (what cluster DNS and the
downward API would give): names and 0.0.0.0 become 127.0.0.x and free ports, the /cache volume a
folder. Twilio calls through
the balancer play, both legs of each call land on one gateway, and every probe answers on the port
the manifest names. Then a rollout: the rendered preStop hook drains the gateway holding a call; the
balancer (checking /readyz like a Service) drops it, its call speaks on, a new call goes to the other
gateway, and hook and gateway return once the call is over."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import websockets
import yaml

from audio.g711 import ulaw_decode
from tests.deploy.manifests import KUBE, config_file, one, render
from tests.telephony.clients import Control, TwilioClient

ROOT = Path(__file__).resolve().parents[2]
SECRET = "loopback-topology-secret-0123456789abcdef"
CALLS = [f"CA{n:032x}" for n in range(1, 7)]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args[:4]} exited:\n{log.read_text()[-3000:]}"
        try:
            if http_get(url)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never became ready:\n{log.read_text()[-3000:]}")


def expand(args: list[str], values: dict[str, str]) -> list[str]:
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in args]


def replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


def prerequisites() -> None:
    missing = [tool for tool in ("redis-server", "haproxy") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/install_test_deps.sh installs them)")


def haproxy_config(port: int, servers: list[tuple[str, str, int]]) -> str:
    """HAProxy in ingress-nginx's place: the same call-id pattern (the ingress-nginx values' map) picks
    the key, consistent hashing on it picks the gateway."""
    snippet = yaml.safe_load((KUBE / "ingress-nginx" / "values.yaml").read_text())["controller"]["config"][
        "http-snippet"
    ]
    pattern = re.search(r'"~(.+?)"\s+\$\w+;', snippet).group(1)
    lines = [
        "global",
        "  maxconn 512",
        "defaults",
        "  mode http",
        "  timeout connect 2s",
        "  timeout client 60s",
        "  timeout server 60s",
        "  timeout tunnel 1h",
        "frontend voxgate",
        f"  bind 127.0.0.1:{port}",
        "  http-request del-header X-Voxgate-Hop",  # the ingress-nginx values' location-snippet
        f"  acl call_scoped path_reg {pattern}",
        "  http-request set-var(txn.call_id) path,field(4,/) if call_scoped",  # /v1/<door>/<call_id>
        "  default_backend gateways",
        "backend gateways",
        "  balance hash var(txn.call_id)",
        "  hash-type consistent",
        "  option httpchk GET /readyz",  # the readiness probe: a draining gateway leaves the pool, as from a Service
    ]
    lines += [f"  server {name} {host}:{p} check inter 300 fall 1 rise 1" for name, host, p in servers]
    return "\n".join(lines) + "\n"


async def play_a_call(base: str, call_id: str) -> tuple[Control, TwilioClient]:
    control = Control(await websockets.connect(f"{base}/v1/control/{call_id}"))
    await control.attach(call_id)
    tw = TwilioClient(
        await websockets.connect(f"{base}/v1/twilio/{call_id}", compression=None), f"MZ{call_id[2:]}", call_id
    )
    await tw.start()
    assert (await control.expect("call.media", timeout=10))["state"] == "connected"
    await play_a_turn(control, tw, "t1")
    return control, tw


async def play_a_turn(control: Control, tw: TwilioClient, turn_id: str) -> None:
    await control.send({"type": "text", "turn_id": turn_id, "text": "Hello from the loopback cluster.", "final": True})
    frames = []
    while True:
        msg, _ = await tw.recv(timeout=15)
        if msg["event"] == "media":
            frames.append(base64.b64decode(msg["media"]["payload"]))
        elif msg["event"] == "mark":  # echoed as Twilio does once the audio before it has played
            await tw.echo_mark(msg["mark"]["name"])
            if msg["mark"]["name"].startswith(f"{turn_id}/"):  # an earlier turn's last marks may still be queued
                break
    assert len(frames) >= 10 and all(len(f) == 160 for f in frames)
    assert max(np.abs(ulaw_decode(f).astype(int)).max() for f in frames) > 1000, "the call is silent"
    done = await control.expect("turn.done", turn_id=turn_id, timeout=20)
    assert done["interrupted"] is False and done["played_ms"] >= 200


def sessions(host: str, port: int) -> float:
    return metric(http_get(f"http://{host}:{port}/metrics")[1].decode(), "voxgate_sessions_active")


def metric(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


async def test_the_rendered_topology_runs_on_loopback_and_a_call_plays(tmp_path):
    prerequisites()
    docs = render("cpu-demo")
    gw_c = one(docs, "Deployment", "voxgate-gateway")["spec"]["template"]["spec"]["containers"][0]
    en_c = one(docs, "StatefulSet", "voxgate-engine")["spec"]["template"]["spec"]["containers"][0]
    env = dict(os.environ)
    env.update({e["name"]: SECRET for e in gw_c["env"] + en_c["env"] if "secretKeyRef" in e.get("valueFrom", {})})
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{name}.log"
        procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT))
        return procs[-1], log

    try:
        # Redis, with the password the pods are given
        redis_port = free_port()
        redis, redis_log = start(
            "redis",
            [
                "redis-server",
                "--port",
                str(redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                SECRET,
            ],
        )
        # the engine: its rendered command line, listening where its Service would point
        engine_cfg = tmp_path / "engine.yaml"
        engine_data = yaml.safe_load(config_file(docs, "engine.yaml"))
        for key in ("voice_cache", "vocoder_cache"):  # the pod's /cache volume is a folder here
            if engine_data["engine"].get(key, "").startswith("/cache/"):
                engine_data["engine"][key] = str(tmp_path / engine_data["engine"][key].lstrip("/"))
        engine_cfg.write_text(yaml.safe_dump(engine_data))
        engine_port, engine_http = free_port(), free_port()
        args = replace_flag(en_c["args"], "--config", str(engine_cfg))
        args = replace_flag(args, "--listen", f"tcp://127.0.0.1:{engine_port}")
        args = replace_flag(args, "--http-port", str(engine_http))
        engine, engine_log = start("engine", [sys.executable, "-m", "gateway.cli", *args])
        ports = {p["name"]: p["containerPort"] for p in en_c["ports"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = en_c[probe]["httpGet"]
            assert ports[get["port"]] == 8081  # the manifest's probe port is the --http-port it passes
            wait_http(f"http://127.0.0.1:{engine_http}{get['path']}", engine, engine_log)
        # the gateways' config: the rendered file, with cluster DNS names replaced by loopback addresses
        gw_data = yaml.safe_load(config_file(docs, "gateway.yaml"))
        assert gw_data["engine"]["endpoints"][0].endswith(":7000")
        gw_data["engine"]["endpoints"] = [f"tcp://127.0.0.1:{engine_port}"]
        gw_data["cluster"]["redis_url"] = f"redis://127.0.0.1:{redis_port}/0"
        gw_data["telephony"]["audiosocket_port"] = 0
        gateway_cfg = tmp_path / "gateway.yaml"
        gateway_cfg.write_text(yaml.safe_dump(gw_data))
        gateways = []
        for name, host in (("gw-a", "127.0.0.2"), ("gw-b", "127.0.0.3")):
            port = free_port(host)
            args = expand(gw_c["args"], {"POD_IP": host, "POD_NAME": name}).copy()
            args = replace_flag(args, "--config", str(gateway_cfg))
            args = [a.replace(f"http://{host}:8080", f"http://{host}:{port}") for a in args]
            proc, log = start(name, [sys.executable, "-m", "gateway.cli", *args, "--host", host, "--port", str(port)])
            gateways.append((name, host, port, proc, log))
        for name, host, port, proc, log in gateways:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                wait_http(f"http://{host}:{port}{gw_c[probe]['httpGet']['path']}", proc, log)
        # HAProxy in front, as the ingress
        lb_port = free_port()
        (tmp_path / "haproxy.cfg").write_text(haproxy_config(lb_port, [(n, h, p) for n, h, p, _, _ in gateways]))
        lb, lb_log = start("haproxy", ["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")])
        wait_http(f"http://127.0.0.1:{lb_port}/v1/models", lb, lb_log, timeout=20)

        legs = await asyncio.gather(*(play_a_call(f"ws://127.0.0.1:{lb_port}", c) for c in CALLS))
        scraped = [http_get(f"http://{h}:{p}/metrics")[1].decode() for _, h, p, _, _ in gateways]
        per_gateway = [metric(text, "voxgate_sessions_active") for text in scraped]
        assert sum(per_gateway) == len(CALLS), f"legs of a call landed apart: sessions per gateway {per_gateway}"
        assert sum(metric(text, "voxgate_cluster_forwards_total") for text in scraped) == 0, "a leg needed a forward"
        assert all(n > 0 for n in per_gateway), f"the hash sent every call to one gateway: {per_gateway}"
        for control, tw in legs:
            await tw.stop()
            await control.close()
        # the metrics the engine HPA and the dashboard read are ones this engine exports
        status, body = http_get(f"http://127.0.0.1:{engine_http}/metrics")
        assert status == 200
        exported = set(re.findall(r"^# TYPE (\w+) ", body.decode(), re.M))
        hpa = one(docs, "HorizontalPodAutoscaler", "voxgate-engine")
        (wanted,) = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
        assert wanted in exported, (
            f"the engine HPA scales on {wanted}, which the engine does not export: {sorted(exported)}"
        )
        dashboard = (KUBE / "base" / "voxgate-dashboard.json").read_text()
        engine_side = {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"voxgate_engine_\w+", dashboard)}
        gateway_text = http_get(f"http://{gateways[0][1]}:{gateways[0][2]}/metrics")[1].decode()
        exported |= set(re.findall(r"^# TYPE (\w+) ", gateway_text, re.M))
        assert engine_side <= exported, f"the dashboard plots {sorted(engine_side - exported)}, which nothing exports"
        # A rollout: one call is up; its gateway's preStop hook drains it. The pod leaves the pool at once,
        # its call plays on to its end, a new call goes to the other gateway, the hook returns when the call
        # is over and the gateway exits by itself.
        base = f"ws://127.0.0.1:{lb_port}"
        for _ in range(100):
            if all(sessions(h, p) == 0 for _, h, p, _, _ in gateways):
                break
            await asyncio.sleep(0.1)
        control, tw = await play_a_call(base, "CA" + "d" * 32)
        (owner,) = [g for g in gateways if sessions(g[1], g[2]) == 1]
        (other,) = [g for g in gateways if g is not owner]
        _, o_host, o_port, o_proc, o_log = owner
        prestop = gw_c["lifecycle"]["preStop"]["exec"]["command"]  # voxgate drain --pid 1 --port 8080 …
        assert prestop[0] == "voxgate"
        args = replace_flag(replace_flag(prestop[1:], "--pid", str(o_proc.pid)), "--port", str(o_port))
        hook = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", *args, "--host", o_host, "--poll", "0.1"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(hook)
        for _ in range(100):
            if http_get(f"http://{o_host}:{o_port}/readyz")[0] == 503:
                break
            await asyncio.sleep(0.1)
        assert http_get(f"http://{o_host}:{o_port}/readyz")[0] == 503
        await asyncio.sleep(1.0)  # HAProxy's check (every 300 ms) takes the draining gateway out of the pool
        await play_a_turn(control, tw, "t2")  # the draining gateway's call speaks on
        assert hook.poll() is None, "the preStop hook returned while its gateway still held a call"
        new_control, new_tw = await play_a_call(base, "CA" + "e" * 32)  # a new call: the other gateway takes it
        assert sessions(other[1], other[2]) == 1 and o_proc.poll() is None
        await tw.stop()
        await control.close()
        out, _ = await asyncio.to_thread(hook.communicate, timeout=30)
        assert hook.returncode == 0 and "call(s) still open" in out, out
        assert await asyncio.to_thread(o_proc.wait, 30) == 0, o_log.read_text()[-2000:]
        await new_tw.stop()
        await new_control.close()
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
