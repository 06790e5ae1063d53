"""deploy/kubernetes/components/sip renders (the real kubectl, kustomize 5): SIP gateways on the host network of
labelled nodes, one per node, SIP on 5060/udp, reading a config that is base/gateway.yaml plus `sip:`."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from gateway.config import SipConfig, load_config
from tests.deploy.manifests import KUBE, kubectl


def render(tmp_path) -> list[dict]:
    import os
    import subprocess

    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(KUBE / "overlays" / "gpu", tmp_path)],
                "components": [os.path.relpath(KUBE / "components" / "sip", tmp_path)],
            }
        )
    )
    out = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path), "--load-restrictor", "LoadRestrictionsNone"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    """The configs name these; the loader checks that they are set."""
    for name in ("VOXGATE_REDIS_PASSWORD", "VOXGATE_CLUSTER_SECRET", "VOXGATE_TURN_SECRET"):
        monkeypatch.setenv(name, "x" * 16)


def test_sip_gateways_run_on_the_host_network_one_per_labelled_node(tmp_path):
    docs = render(tmp_path)
    gateway = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "voxgate-gateway")
    pod = gateway["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"]["voxgate.io/sip"] == "true"
    assert (
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
        == "kubernetes.io/hostname"
    )
    container = pod["containers"][0]
    ports = {(p["containerPort"], p["protocol"]) for p in container["ports"]}
    assert {(5060, "UDP"), (5060, "TCP"), (8080, "TCP"), (9092, "TCP")} <= ports
    assert container["args"][:3] == ["serve", "--config", "/etc/voxgate/gateway-sip.yaml"]
    # sip.host is 0.0.0.0: SDP and Contact carry the node's address, from the downward API
    assert container["args"][-1] == "--sip-public-ip=$(HOST_IP)"
    host_ip = next(e for e in container["env"] if e["name"] == "HOST_IP")
    assert host_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    config_map = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("voxgate-config")
    )
    assert {"gateway.yaml", "gateway-sip.yaml"} <= set(config_map["data"])
    sip_cfg = tmp_path / "gateway-sip.yaml"
    sip_cfg.write_text(config_map["data"]["gateway-sip.yaml"])
    assert load_config(sip_cfg).sip.port == int(
        next(p["containerPort"] for p in container["ports"] if p["name"] == "sip")
    )


def test_every_object_validates_strictly(tmp_path):
    from tests.deploy.test_manifests import CRDS, KUBERNETES_VERSION

    kv = pytest.importorskip("kubernetes_validate", reason="the deploy-test extra: pip install kubernetes-validate")
    for doc in render(tmp_path):
        if (doc["apiVersion"], doc["kind"]) not in CRDS:
            kv.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_sip_config_is_the_base_config_plus_its_sip_section():
    base = load_config(KUBE / "base" / "gateway.yaml")
    with_sip = load_config(KUBE / "components" / "sip" / "gateway-sip.yaml")
    assert with_sip.sip.port is not None and base.sip.port is None
    assert dataclasses.replace(with_sip, sip=SipConfig(), source="") == dataclasses.replace(base, source="")
