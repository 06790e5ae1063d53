"""The rendered manifests against voxgate itself: the config each pod gets loads with voxgate's own
loader, every command line parses with voxgate's own parser, every probe path and port exists on the
process it points at, the grace period covers a whole call, the HPAs scale on metrics voxgate exports,
and the ingress hashes on exactly the call id of every call-scoped path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.deploy.manifests import KUBE, VARIANTS, config_file, find, one, render

SECRET_VALUE = "s3cret-for-the-contract-test-0123456789"


def container(docs, kind, name) -> dict:
    return one(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]


def set_pod_env(monkeypatch, c: dict) -> None:
    """The env vars a pod's secrets fill, filled with a stand-in (the loader checks they are set)."""
    for env in c.get("env", []):
        monkeypatch.setenv(env["name"], env.get("value", SECRET_VALUE))


def parser_choices() -> set[str]:
    from gateway.cli import build_parser

    return set(build_parser()._subparsers._group_actions[0].choices)


def parse(argv: list[str]):
    from gateway.cli import build_parser

    assert argv[0] in parser_choices(), f"voxgate has no `voxgate {argv[0]}` subcommand"
    return build_parser().parse_args(argv)  # SystemExit = a flag voxgate does not have


def load(docs, key: str, tmp_path: Path, monkeypatch, c: dict):
    from gateway.config import load_config

    set_pod_env(monkeypatch, c)
    path = tmp_path / key
    path.write_text(config_file(docs, key))
    return load_config(str(path), {})  # a ConfigError fails the test: the shipped file must load as it is


def expand(args: list[str], c: dict) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args, with stand-ins for the downward API."""
    values = {"POD_IP": "10.1.2.3", "POD_NAME": "voxgate-gateway-abc"}
    return [re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), SECRET_VALUE), a) for a in args]


@pytest.mark.parametrize("variant", VARIANTS)
def test_gateway_config_and_command_line_are_voxgates_own(variant, tmp_path, monkeypatch):
    docs = render(variant)
    c = container(docs, "Deployment", "voxgate-gateway")
    args = parse(expand(c["args"], c))
    assert args.command == "serve" and args.config == "/etc/voxgate/gateway.yaml"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert Path(args.config).parent == Path(mount["mountPath"])
    cfg = load(docs, "gateway.yaml", tmp_path, monkeypatch, c)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == cfg.server.port and cfg.server.host == "0.0.0.0"
    assert ports["audiosocket"] == cfg.telephony.audiosocket_port
    assert cfg.cluster.redis_url and cfg.cluster.password_env in {e["name"] for e in c["env"]}
    redis = one(docs, "Service", "voxgate-redis")
    assert cfg.cluster.redis_url.split("//")[1].split(":")[0] == redis["metadata"]["name"]
    assert int(cfg.cluster.redis_url.rsplit(":", 1)[1].split("/")[0]) == redis["spec"]["ports"][0]["port"]
    assert cfg.webrtc.turn_secret_env in {e["name"] for e in c["env"]}
    writable = [m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")]
    for path in (cfg.server.voices_dir, cfg.server.log_dir, cfg.telephony.record_inbound_dir):
        assert path is None or any(Path(path).is_relative_to(w) for w in writable), (
            f"{path} is not on a writable volume"
        )
    pre = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre[0] == "voxgate"
    drain = parse(pre[1:])
    assert drain.command == "drain" and drain.pid == 1 and drain.port == cfg.server.port


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_grace_period_covers_a_whole_call_and_the_drain(variant, tmp_path, monkeypatch):
    docs = render(variant)
    pod = one(docs, "Deployment", "voxgate-gateway")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    limits = load(docs, "gateway.yaml", tmp_path, monkeypatch, c).server.limits
    grace = pod["terminationGracePeriodSeconds"]
    assert grace >= limits.max_call_s + 60, "a call that began just before the drain could be cut"
    assert grace >= limits.drain_timeout_s + 60, "the kubelet would kill the drain before it ends"
    assert limits.drain_timeout_s >= limits.max_call_s, "the drain would close calls that are still going"
    hook_timeout = float(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert limits.drain_timeout_s <= hook_timeout <= grace - 30


@pytest.mark.parametrize("variant", VARIANTS)
def test_engine_command_line_config_and_ports(variant, tmp_path, monkeypatch):
    docs = render(variant)
    sts = one(docs, "StatefulSet", "voxgate-engine")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    cfg = load(docs, "engine.yaml", tmp_path, monkeypatch, c)
    assert cfg.engine.kind == ("qwen3" if variant.startswith("gpu") else "espeak")
    if cfg.engine.kind == "qwen3":
        assert cfg.engine.model_dir == next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "models")
        assert Path(cfg.engine.vocoder_cache).parent == Path(
            next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "cache")
        )
    writable = [m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")]
    assert cfg.engine.voice_cache, "the default voice cache is under ~, on the read-only root filesystem"
    for path in (cfg.engine.vocoder_cache, cfg.engine.voice_cache, cfg.server.voices_dir, cfg.server.log_dir):
        assert path is None or any(Path(path).is_relative_to(w) for w in writable), (
            f"{path} is not on a writable volume"
        )
    args = parse(expand(c["args"], c))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert args.listen == f"tcp://0.0.0.0:{ports['engine']}" and args.http_port == ports["http"]
    assert Path(args.config).parent == Path(next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "config"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_gateways_engine_endpoints_are_the_engine_pods_the_hpa_may_run(variant, tmp_path, monkeypatch):
    docs = render(variant)
    gw = container(docs, "Deployment", "voxgate-gateway")
    cfg = load(docs, "gateway.yaml", tmp_path, monkeypatch, gw)
    sts = one(docs, "StatefulSet", "voxgate-engine")
    service = one(docs, "Service", sts["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"  # headless: every pod has its own name
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "engine")
    hpa = one(docs, "HorizontalPodAutoscaler", "voxgate-engine")
    wanted = [
        f"tcp://{sts['metadata']['name']}-{i}.{service['metadata']['name']}:{port}"
        for i in range(hpa["spec"]["maxReplicas"])
    ]
    assert list(cfg.engine.endpoints) == wanted
    secret_env = {e["name"] for e in gw["env"]} & {
        e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert secret_env, "gateways and engines share no secret for the TCP wire"


def test_gateway_probe_paths_and_the_preStop_port_exist_on_the_gateway():
    from gateway.app import Gateway
    from gateway.config import load_config

    app = Gateway(load_config(None, {"engine": {"kind": "simulated"}})).app
    served = {r.canonical for r in app.router.resources() if any(route.method == "GET" for route in r)}
    c = container(render("gpu"), "Deployment", "voxgate-gateway")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] in served, f"{probe} {get['path']} is not a route of the gateway"
        assert get["port"] in ports
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"


# ---------------------------------------------------------------- the hashing key
def call_id_pattern() -> tuple[re.Pattern, str]:
    """The ingress-nginx map's pattern (as a Python regex) and the variable it defines."""
    snippet = yaml.safe_load((KUBE / "ingress-nginx" / "values.yaml").read_text())["controller"]["config"][
        "http-snippet"
    ]
    variable = re.search(r"map \$uri \$(\w+)", snippet).group(1)
    pattern, target = re.search(r'"~(.+?)"\s+\$(\w+);', snippet).groups()
    group = re.search(r"\(\?<(\w+)>", pattern).group(1)
    assert target == group, "the map must yield the named group it captures"
    return re.compile(pattern.replace("(?<", "(?P<")), variable


def test_the_ingress_hashes_on_the_call_id_of_every_call_scoped_path():
    from gateway.app import Gateway
    from gateway.config import load_config

    pattern, variable = call_id_pattern()
    ingress = one(render("gpu"), "Ingress", "voxgate")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"] == f"${variable}"
    app = Gateway(load_config(None, {"engine": {"kind": "simulated"}})).app
    routes = [r.canonical for r in app.router.resources()]
    scoped = [r for r in routes if r.endswith("/{call_id}")]
    assert {"/v1/twilio/{call_id}", "/v1/control/{call_id}"} <= set(scoped)
    for call_id in ("CA5f8c0e1d2b3a4c5d6e7f8091a2b3c4d5", "call-42_x.y~z"):
        keys = set()
        for route in scoped:
            m = pattern.match(route.replace("{call_id}", call_id))
            assert m, f"{route} has a call id the ingress does not hash on"
            keys.add(m.group(m.re.groupindex and next(iter(m.re.groupindex))))
        assert keys == {call_id}, "the legs of one call would hash apart"
    for route in routes:  # everything else spreads ($request_id)
        if not route.endswith("/{call_id}"):
            assert not pattern.match(route.replace("{name}", "x")), route


# ---------------------------------------------------------------- metrics
def gateway_metric_names() -> set[str]:
    from gateway.metrics import GatewayMetrics

    return {m.name for m in GatewayMetrics(lambda: {}, "simulated").registry.collect()}


def engine_metric_names() -> set[str]:
    """Families the engine service (`voxgate engine`) exports on its /metrics."""
    from gateway.engine_service import metric_names

    return metric_names()


def exported(name: str, names: set[str]) -> bool:
    base = re.sub(r"_(bucket|sum|count|total)$", "", name)
    return name in names or base in names


def test_the_hpas_and_the_dashboard_use_metrics_voxgate_exports():
    docs = render("gpu")
    gateway = gateway_metric_names()
    engine = engine_metric_names()
    for name, exports in (("voxgate-gateway", gateway), ("voxgate-engine", engine)):  # each on its own pods' metrics
        hpa = one(docs, "HorizontalPodAutoscaler", name)
        (metric,) = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
        assert exported(metric, exports), f"HPA {name} scales on {metric}, which its pods do not export"
    rules = yaml.safe_load((KUBE / "prometheus-adapter" / "values.yaml").read_text())["rules"]["custom"]
    served = {r["name"]["as"] for r in rules}
    for h in find(docs, "HorizontalPodAutoscaler"):
        for m in h["spec"]["metrics"]:
            assert m["pods"]["metric"]["name"] in served, f"no adapter rule serves {m['pods']['metric']['name']}"
        down = h["spec"]["behavior"]["scaleDown"]
        assert down["stabilizationWindowSeconds"] >= 600 and down["policies"][0]["value"] == 1
    dashboard = (KUBE / "base" / "voxgate-dashboard.json").read_text()
    missing = {n for n in re.findall(r"voxgate_\w+", dashboard) if not exported(n, gateway | engine)}
    assert not missing, f"the dashboard plots metrics voxgate does not export: {sorted(missing)}"


# ---------------------------------------------------------------- the hop header stays inside
def test_every_shipped_front_door_drops_a_callers_hop_header():
    """X-Voxgate-Hop is sent by gateways to each other only: each proxy config voxgate ships removes a caller's."""
    values = yaml.safe_load((KUBE / "ingress-nginx" / "values.yaml").read_text())["controller"]["config"]
    assert re.search(r'proxy_set_header\s+X-Voxgate-Hop\s+"";', values.get("location-snippet", ""))
    route = yaml.safe_load((KUBE / "components" / "gateway-api" / "httproute.yaml").read_text())
    for rule in route["spec"]["rules"]:
        removed = [
            h
            for f in rule.get("filters", [])
            if f["type"] == "RequestHeaderModifier"
            for h in f["requestHeaderModifier"].get("remove", [])
        ]
        assert "X-Voxgate-Hop" in removed, rule
    docs = KUBE.parents[1] / "docs"
    assert re.search(r'proxy_set_header X-Voxgate-Hop "";', (docs / "security.md").read_text())  # the nginx example
    assert "http-request del-header X-Voxgate-Hop" in (docs / "cluster.md").read_text()  # the HAProxy example
