"""Shared fixtures for the Qwen3-TTS port tests: tiny checkpoints written once per session."""

from __future__ import annotations

import pytest

from tests.qwen3.official import official_unavailable_reason


@pytest.fixture(scope="session")
def official():
    """Skip (with the reason) when the official qwen-tts cannot be imported."""
    reason = official_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from tests.qwen3 import official as helpers

    return helpers


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny CustomVoice (1b7 structure) checkpoint with our own random init."""
    from tts.qwen3.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("tiny_cv")
    make_tiny_model(str(d), variant="1b7", kind="custom_voice", seed=0)
    return str(d)


@pytest.fixture(scope="session")
def official_dirs(official, tmp_path_factory):
    """Tiny checkpoints whose weights the official classes initialised, by (variant, kind)."""
    made = {}

    def get(variant: str, kind: str) -> str:
        if (variant, kind) not in made:
            d = tmp_path_factory.mktemp(f"official_{variant}_{kind}")
            official.write_official_tiny(str(d), variant=variant, kind=kind, seed=1)
            made[(variant, kind)] = str(d)
        return made[(variant, kind)]

    return get


@pytest.fixture
def cuda_semantics():
    """SDPA answering as CUDA does (layout, refusals; judged at bfloat16, the GPU's dtype) and host<->device
    traffic counted on the engine's watched threads, for one test: (CudaSdpa, Transfers)."""
    import torch

    from tts.qwen3.cuda_semantics import cuda_semantics as on

    with on(torch.bfloat16) as pair:
        yield pair
