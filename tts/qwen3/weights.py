"""Loading `model.safetensors` by the official key names onto a model built on the meta device."""

from __future__ import annotations

import os

import torch

from tts.qwen3.config import ConfigError, ModelConfig, check_checkpoint_files, load_config
from tts.qwen3.model import Qwen3TTSModel

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ConfigError("bad_dtype", f"dtype {dtype!r} is not one of float32, bfloat16, float16") from None


def build_model(
    config: ModelConfig, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32
) -> Qwen3TTSModel:
    with torch.device(device):
        model = Qwen3TTSModel(config)
    return model.to(dtype) if device != "meta" else model


def load_state(
    path: str, expected: dict[str, torch.Size], device: str | torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Read the expected tensors from a safetensors file (memory-mapped, one tensor at a time)."""
    from safetensors import safe_open

    state: dict[str, torch.Tensor] = {}
    with safe_open(path, framework="pt", device="cpu") as f:
        keys = set(f.keys())
        present = keys
        missing = sorted(set(expected) - present)
        unexpected = sorted(present - set(expected))
        if missing or unexpected:
            raise ConfigError(
                "bad_weights",
                f"{path}: weights do not match the config"
                + (f"; missing keys: {', '.join(missing)}" if missing else "")
                + (f"; unexpected keys: {', '.join(unexpected)}" if unexpected else ""),
            )
        wrong = []
        for key in sorted(expected):
            t = f.get_tensor(key)
            if t.shape != expected[key]:
                wrong.append(f"{key} {tuple(t.shape)} != {tuple(expected[key])}")
                continue
            state[key] = t.to(device=device, dtype=dtype)
        if wrong:
            raise ConfigError("bad_weights", f"{path}: tensor shapes do not match the config: {'; '.join(wrong)}")
    return state


def load_model(
    model_dir: str,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
    config: ModelConfig | None = None,
) -> Qwen3TTSModel:
    """The talker side of a checkpoint directory, weights in `dtype` on `device`."""
    config = config or load_config(model_dir)
    check_checkpoint_files(model_dir)
    dtype = parse_dtype(dtype)
    model = build_model(config, "meta")
    expected = {k: v.shape for k, v in model.state_dict().items()}
    state = load_state(os.path.join(model_dir, "model.safetensors"), expected, device, dtype)
    model.load_state_dict(state, assign=True, strict=True)
    model.fuse_projections()
    return model.eval().requires_grad_(False)  # inference only: no autograd bookkeeping


def random_model(
    config: ModelConfig,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
    seed: int = 0,
    std: float = 0.02,
) -> Qwen3TTSModel:
    """Random weights in the official init scheme (normal(0, std) matrices, zero biases, unit norms)."""
    dtype = parse_dtype(dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    model = build_model(config, "meta")
    state = {}
    for name, p in model.state_dict().items():
        if name.endswith("norm.weight"):
            t = torch.ones(p.shape, dtype=dtype, device=device)
        elif name.endswith(".bias"):
            t = torch.zeros(p.shape, dtype=dtype, device=device)
        else:  # drawn on the device in the target dtype: the 1.7B shape needs no host round trip
            t = torch.empty(p.shape, dtype=dtype, device=device).normal_(0.0, std, generator=gen)
        state[name] = t
    model.load_state_dict(state, assign=True, strict=True)
    model.fuse_projections()
    return model.eval().requires_grad_(False)  # inference only: no autograd bookkeeping
