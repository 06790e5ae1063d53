"""vLLM-Omni's OmniPlatform on TorchCpuPlatform (workers: omni_workers.py)."""

import os
from contextlib import nullcontext

import psutil
import torch
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

from vllm_cpu_platform.cpu_platform import TorchCpuPlatform

_HERE = os.path.dirname(__file__)


class TorchCpuOmniPlatform(OmniPlatform, TorchCpuPlatform):
    _omni_enum = OmniPlatformEnum.OOT

    @classmethod
    def get_omni_ar_worker_cls(cls) -> str:
        return "vllm_cpu_platform.omni_workers.CpuARWorker"

    @classmethod
    def get_omni_generation_worker_cls(cls) -> str:
        return "vllm_cpu_platform.omni_workers.CpuGenerationWorker"

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return _HERE

    @classmethod
    def get_diffusion_attn_backend_cls(cls, selected_backend, head_size, allow_trtllm_default=False) -> str:
        from vllm_omni.diffusion.attention.backends.registry import (
            DiffusionAttentionBackendEnum,
        )

        return DiffusionAttentionBackendEnum.TORCH_SDPA.get_path()

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False

    @classmethod
    def supports_talker_mtp_graph_capture(cls) -> bool:
        return False

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        pass

    @classmethod
    def get_free_memory(cls, device=None) -> int:
        return psutil.virtual_memory().available

    @classmethod
    def get_device_memory(cls, device=None) -> tuple[int, int]:
        mem = psutil.virtual_memory()
        return mem.available, mem.total

    @classmethod
    def create_autocast_context(cls, *args, **kwargs):
        return nullcontext()
