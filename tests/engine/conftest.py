"""The engine tests' tiny Qwen3 checkpoint (the real architecture, random weights, seed 4): built once per test
module on first use, so a module's engines may change it without reaching another module's."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    pytest.importorskip("torch")
    from tts.qwen3.checkpoint import Checkpoint
    from tts.qwen3.tiny import make_tiny_model

    d = str(tmp_path_factory.mktemp("tiny"))
    make_tiny_model(d, seed=4)
    return Checkpoint.load(d)
