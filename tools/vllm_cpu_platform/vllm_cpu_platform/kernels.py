"""Torch-native stand-ins for the vllm._C kernels a CPU run reaches.

A CPU source build of vLLM compiles these in C++; PyPI's CUDA wheel has
neither them nor a CPU build of them. Each is registered under the name
vLLM calls, so vLLM's own code runs unchanged.
"""

import torch

_registered = False


def reshape_and_cache_flash(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
    value: torch.Tensor,
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_size]
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [num_tokens]; -1 marks padding
    kv_cache_dtype: str,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
) -> None:
    if kv_cache_dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise NotImplementedError(f"kv_cache_dtype {kv_cache_dtype!r} needs vllm._C")
    num_tokens = slot_mapping.shape[0]
    slots = slot_mapping.to(torch.int64)
    keep = slots >= 0
    block_size = key_cache.shape[1]
    blocks, offsets = slots[keep] // block_size, slots[keep] % block_size
    # Index assignment writes through the strided views into the cache.
    key_cache[blocks, offsets] = key[:num_tokens][keep].to(key_cache.dtype)
    value_cache[blocks, offsets] = value[:num_tokens][keep].to(value_cache.dtype)


def compute_slot_mapping_kernel_impl(
    query_start_loc: torch.Tensor,  # [num_reqs + 1], int32
    positions: torch.Tensor,  # [num_tokens], int64
    block_table: torch.Tensor,  # [max_num_reqs, max_num_blocks_per_req], int32
    slot_mapping: torch.Tensor,  # [max_num_tokens], int64; the rest is padded with -1
    block_size: int,
) -> None:
    """The CPU build's slot-mapping kernel (vLLM's CPU stand-in for a Triton kernel)."""
    starts = query_start_loc.to(torch.int64)
    lengths = starts[1:] - starts[:-1]
    rows = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    num_tokens = rows.numel()
    pos = positions[:num_tokens].to(torch.int64)
    numbers = block_table[rows, pos // block_size].to(torch.int64)
    slot_mapping[:num_tokens] = numbers * block_size + pos % block_size
    slot_mapping[num_tokens:] = -1


# Ops that vLLM's activation layers look up in __init__ (self.op = torch.ops._C.x)
# but never call here: with custom ops off every layer runs its forward_native.
_LOOKED_UP_ONLY = (
    "silu_and_mul",
    "situ_and_mul",
    "silu_and_mul_with_clamp",
    "mul_and_silu",
    "activation_lut_bf16",
    "gelu_tanh",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "swigluoai_and_mul",
    "swiglustep_and_mul",
    "gelu_new",
    "gelu_fast",
    "gelu_quick",
    "relu_squared",
    "relu2_no_mul",
    "fatrelu_and_mul",
)


def register_torch_ops() -> None:
    """Define the _C ops vLLM calls by name, once per process."""
    global _registered
    if _registered:
        return
    _registered = True
    c_lib = torch.library.Library("_C", "FRAGMENT")
    for name in _LOOKED_UP_ONLY:
        if not hasattr(torch.ops._C, name):
            c_lib.define(f"{name}(Tensor(a!) out, Tensor input) -> ()")
            c_lib.impl(name, _unavailable(f"torch.ops._C.{name} (use forward_native)"), "CPU")
    if not hasattr(torch.ops._C, "compute_slot_mapping_kernel_impl"):
        c_lib.define(
            "compute_slot_mapping_kernel_impl(Tensor query_start_loc, Tensor positions,"
            " Tensor block_table, Tensor(a!) slot_mapping, int block_size) -> ()"
        )
        c_lib.impl("compute_slot_mapping_kernel_impl", compute_slot_mapping_kernel_impl, "CPU")
    globals()["_c_lib"] = c_lib
    if not hasattr(torch.ops, "_C_cache_ops") or not hasattr(torch.ops._C_cache_ops, "reshape_and_cache_flash"):
        lib = torch.library.Library("_C_cache_ops", "FRAGMENT")
        lib.define(
            "reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache,"
            " Tensor(b!) value_cache, Tensor slot_mapping, str kv_cache_dtype,"
            " Tensor k_scale, Tensor v_scale) -> ()"
        )
        lib.impl("reshape_and_cache_flash", reshape_and_cache_flash, "CPU")
        # Keep the library object alive with the module.
        globals()["_cache_ops_lib"] = lib


def no_packed_gemm() -> None:
    """On a CPU with AMX, vLLM packs the weights of bf16 GEMMs for its sgl kernels
    (`torch.ops._C.convert_weight_packed`), which only a CPU source build has: those
    layers take torch's own linear here, as on a CPU without AMX."""
    from vllm.model_executor.layers import utils

    utils.check_cpu_sgl_kernel = lambda n, k, dtype: False


def _unavailable(name: str):
    def kernel(*args, **kwargs):
        raise NotImplementedError(f"{name} needs a CPU build of torchvision")

    return kernel


def register_torchvision_schemas() -> None:
    """Let PyPI's CUDA torchvision import on a CPU-only torch.

    Its C++ ops do not load here (they link libc10_cuda), but its Python side
    registers fake kernels for torchvision::nms and ::qnms at import, which
    fails unless the ops exist. vLLM imports torchvision for image models
    only; the speech models never call these ops.
    """
    if hasattr(torch.ops.torchvision, "nms"):
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        if op == "qnms":
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        else:
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.impl(op, _unavailable(f"torchvision::{op}"), "CPU")
    globals()["_torchvision_lib"] = lib
