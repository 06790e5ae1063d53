"""vLLM's CpuPlatform on torch-native kernels: eager, FlexAttention, fp32 or bf16."""

import torch
from vllm.logger import init_logger
from vllm.platforms.cpu import CpuPlatform
from vllm.v1.attention.backends.registry import AttentionBackendEnum

from vllm_cpu_platform.kernels import no_packed_gemm, register_torch_ops

logger = init_logger(__name__)


class TorchCpuPlatform(CpuPlatform):
    """CpuPlatform for PyPI's CUDA wheel of vLLM (no vllm._C)."""

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16]

    @classmethod
    def import_kernels(cls) -> None:
        # No vllm._C here: register the few ops vLLM calls by name instead.
        register_torch_ops()
        no_packed_gemm()

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("MLA / sparse attention need vllm._C on CPU")
        # FlexAttention is plain torch; it runs eager (see _eager_flex_attention).
        _eager_flex_attention()
        return AttentionBackendEnum.FLEX_ATTENTION.get_path()

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        super().check_and_update_config(vllm_config)
        compilation = vllm_config.compilation_config
        compilation.mode = CompilationMode.NONE
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.max_cudagraph_capture_size = 0
        # Every CustomOp takes its forward_native (no _C kernel behind it).
        compilation.custom_ops = ["none"]
        if vllm_config.model_config is not None:
            vllm_config.model_config.enforce_eager = True
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "vllm.v1.worker.cpu_worker.CPUWorker":
            parallel.worker_cls = "vllm_cpu_platform.worker.TorchCPUWorker"

    @classmethod
    def get_default_ir_op_priority(cls, vllm_config):
        from vllm.config.kernel import IrOpPriorityConfig

        return IrOpPriorityConfig.with_default(["native"])


def _eager_flex_attention() -> None:
    """Run vLLM's FlexAttention backend without torch.compile (no inductor build)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from vllm.v1.attention.backends import flex_attention as flex

    flex.flex_attention_compiled = flex_attention
    flex.create_block_mask_compiled = create_block_mask
