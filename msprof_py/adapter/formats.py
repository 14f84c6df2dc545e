"""Where the npu device keeps data in NPU-private formats, and the TransData this costs.

As CANN does for PyTorch: convolution activations live in NC1HWC0 and conv weights in FRACTAL_Z.
A tensor whose format differs from what a kernel needs is converted by a TransData task first,
and its storage keeps the new format (so a weight converted once stays FRACTAL_Z through the
optimizer). Format-agnostic kernels (elementwise, batch norm, pooling, optimizer updates) work
in whatever format their main input has and produce that format; every other kernel needs ND,
and data leaving the device is converted back to ND first.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ND = "ND"
NC1HWC0 = "NC1HWC0"
FRACTAL_Z = "FRACTAL_Z"
FRACTAL_NZ = "FRACTAL_NZ"

#: matmuls read FRACTAL_NZ operands directly (transposed or not): NZ weights never convert back
NZ_MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear"})

CONV = frozenset({"convolution_overrideable", "convolution"})
CONV_BACKWARD = frozenset({"convolution_backward_overrideable", "convolution_backward"})

#: Ops that run in any format, producing their main input's format.
FORMAT_AGNOSTIC = frozenset(
    {
        "relu",
        "relu_",
        "threshold_backward",
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "neg",
        "abs",
        "sqrt",
        "rsqrt",
        "exp",
        "sigmoid",
        "sigmoid_backward",
        "tanh",
        "tanh_backward",
        "silu",
        "silu_backward",
        "hardtanh",
        "hardtanh_backward",
        "clamp",
        "clamp_",
        "clamp_min",
        "leaky_relu",
        "leaky_relu_backward",
        "elu",
        "gelu",
        "gelu_backward",
        "copy",
        "copy_",
        "clone",
        "fill_",
        "zero_",
        "addcmul",
        "addcmul_",
        "addcdiv",
        "addcdiv_",
        "lerp_",
        "maximum",
        "minimum",
        "where",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "native_batch_norm_backward",
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
        "native_dropout",
        "native_dropout_backward",
        "_fused_sgd",
        "_fused_adam",
        "_fused_adamw",
        "_fused_sgd_",
        "_fused_adam_",
        "_fused_adamw_",
    }
)


def is_agnostic(base: str) -> bool:
    """True for ops that run in any format (including every ``_foreach_*`` op)."""
    return base in FORMAT_AGNOSTIC or base.startswith("_foreach_")


def conv_input_formats(base: str, count: int) -> dict[int, str]:
    """Input index -> format a convolution kernel needs (empty for other ops)."""
    if base in CONV:
        return {0: NC1HWC0, 1: FRACTAL_Z}
    if base in CONV_BACKWARD:
        return {0: NC1HWC0, 1: NC1HWC0, 2: FRACTAL_Z}
    return {}


def conv_output_formats(base: str) -> Sequence[str]:
    """Formats of a convolution's outputs, by output index."""
    if base in CONV:
        return (NC1HWC0,)
    if base in CONV_BACKWARD:
        return (NC1HWC0, FRACTAL_Z, ND)
    return ()


def private_allowed(t: torch.Tensor) -> bool:
    """Private formats are used for 4-D floating tensors only (2-D convolutions)."""
    return t.dim() == 4 and t.is_floating_point()
