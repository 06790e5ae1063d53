"""Run-time imports stay free of transformers, qwen_tts and qwen_asr (docs/development.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

MODULES = [
    "gateway",
    "gateway.cli",
    "tts",
    "tts.engine",
    "tts.qwen3.checkpoint",
    "tts.qwen3.generate",
    "tts.qwen3.tools",
    "tts.qwen3.codec",
    "tts.qwen3.engine",
    "tts.aligner",
]


@pytest.mark.parametrize("module", MODULES)
def test_importing_runtime_code_leaves_out_the_reference_packages(module):
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'qwen_tts', 'qwen_asr', 'nagisa')); "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{module} pulled in: {r.stdout.strip()} {r.stderr[-500:]}"
