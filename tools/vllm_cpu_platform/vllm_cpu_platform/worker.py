"""vLLM's CPUWorker without the _C memory-node binding."""

import torch
from vllm.v1.worker.cpu_worker import CPUWorker


class _NoMemoryEnv:
    def init_cpu_memory_env(self, nodes) -> None:
        pass  # NUMA binding of a CPU source build; nothing to bind here


def _with_memory_env_stub(init):
    def wrapped(*args, **kwargs):
        if hasattr(torch.ops._C, "init_cpu_memory_env"):
            return init(*args, **kwargs)
        real = torch.ops._C
        torch.ops._C = _NoMemoryEnv()
        try:
            return init(*args, **kwargs)
        finally:
            torch.ops._C = real

    return wrapped


class TorchCPUWorker(CPUWorker):
    __init__ = _with_memory_env_stub(CPUWorker.__init__)
