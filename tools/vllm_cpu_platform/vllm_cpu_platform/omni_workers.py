"""vLLM-Omni's stage workers on the CPU (imported by qualname, in the worker process).

vLLM-Omni's talker (autoregressive) and code2wav (generation) stages run in
workers derived from vLLM's GPU worker and model runner. Here the same
Omni model runners are combined with vLLM's CPUModelRunner (which swaps
device buffers for host ones) and run in vLLM's CPUWorker.
"""

from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
from vllm_omni.worker.gpu_generation_model_runner import GPUGenerationModelRunner
from vllm_omni.worker.mixins import OmniWorkerMixin

from vllm_cpu_platform.worker import TorchCPUWorker


class CpuARModelRunner(GPUARModelRunner, CPUModelRunner):
    """The Omni talker runner; CPUModelRunner sits before GPUModelRunner in the MRO."""

    _to_list = CPUModelRunner._to_list

    def capture_model(self) -> int:
        return 0


class CpuGenerationModelRunner(GPUGenerationModelRunner, CPUModelRunner):
    """The Omni code2wav runner on host tensors."""

    _to_list = CPUModelRunner._to_list

    def capture_model(self) -> int:
        return 0


class _CpuOmniWorker(OmniWorkerMixin, TorchCPUWorker):
    model_runner_cls: type

    def init_device(self):
        from vllm.v1.worker import cpu_worker

        # Omni hooks live in the v1 runners only (as on XPU and NPU).
        self.use_v2_model_runner = False
        real = cpu_worker.CPUModelRunner
        cpu_worker.CPUModelRunner = self.model_runner_cls
        try:
            super().init_device()
        finally:
            cpu_worker.CPUModelRunner = real


class CpuARWorker(_CpuOmniWorker):
    model_runner_cls = CpuARModelRunner


class CpuGenerationWorker(_CpuOmniWorker):
    model_runner_cls = CpuGenerationModelRunner
