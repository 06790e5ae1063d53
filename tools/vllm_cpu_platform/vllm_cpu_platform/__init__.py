"""A vLLM / vLLM-Omni platform plugin for CPU-only machines without vllm._C.

PyPI's vLLM wheel is a CUDA build: on a machine without a GPU no platform
activates, and vLLM's own CPU platform needs the C++ kernels of a CPU source
build. This plugin activates vLLM's CpuPlatform with torch-native pieces in
their place (see platform.py). It is a test and bench tool, not for
production serving. Activation is explicit: VOXGATE_VLLM_CPU=1.
"""

import os

ACTIVATE_ENV = "VOXGATE_VLLM_CPU"


def _active() -> bool:
    return os.environ.get(ACTIVATE_ENV, "") == "1"


def vllm_platform() -> str | None:
    """Entry point of group vllm.platform_plugins (run early in every vLLM process)."""
    if not _active():
        return None
    from vllm_cpu_platform.kernels import register_torchvision_schemas

    register_torchvision_schemas()
    return "vllm_cpu_platform.cpu_platform.TorchCpuPlatform"


def omni_platform() -> str | None:
    """Entry point of group vllm_omni.platform_plugins."""
    return "vllm_cpu_platform.omni.TorchCpuOmniPlatform" if _active() else None
