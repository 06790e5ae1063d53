"""What a lab would keep with a run: versions, machine, configs, input digests, GPU monitor."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

_PACKAGES = ("voxgate", "numpy", "aiohttp", "websockets", "prometheus-client", "soxr", "torch", "pyyaml")


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _voice_references(config: dict) -> dict[str, str]:
    """sha256 of every file a voice entry points at (reference audio, prompts)."""
    out = {}
    for name, voice in (config.get("voices") or {}).items():
        if not isinstance(voice, dict):
            continue
        for key, value in voice.items():
            if isinstance(value, str) and len(value) < 4096 and os.path.isfile(value):
                out[f"{name}.{key}:{value}"] = sha256_file(value)
    return out


def environment(scenario_path: str, config_paths: dict[str, str | None], gateways: dict[str, str]) -> dict:
    versions = {}
    for pkg in _PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    repo = Path(__file__).resolve().parents[2]
    configs = {}
    for label, path in config_paths.items():
        if not path:
            continue
        text = Path(path).read_text(encoding="utf-8")
        parsed = yaml.safe_load(text) or {}
        configs[label] = {
            "path": path,
            "sha256": sha256_file(path),
            "text": text,
            "voice_references": _voice_references(parsed),
        }
    gpus = (
        _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        if shutil.which("nvidia-smi")
        else None
    )
    return {
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": sys.argv,
        "python": sys.version,
        "platform": platform.platform(),
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "gpu": gpus,
        "versions": versions,
        "git": {
            "commit": _run(["git", "-C", str(repo), "rev-parse", "HEAD"]),
            "dirty": bool(_run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])),
        },
        "scenarios": {"path": scenario_path, "sha256": sha256_file(scenario_path)},
        "gateways": gateways,
        "configs": configs,
    }


class GpuMonitor:
    """`nvidia-smi dmon` into gpu_dmon.log for the whole run, when a GPU is present."""

    def __init__(self, out: Path):
        self.proc: subprocess.Popen | None = None
        if shutil.which("nvidia-smi"):
            f = open(out / "gpu_dmon.log", "wb")
            try:
                self.proc = subprocess.Popen(
                    ["nvidia-smi", "dmon", "-s", "pucm", "-o", "T"], stdout=f, stderr=subprocess.STDOUT
                )
            except OSError:
                self.proc = None
            f.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
