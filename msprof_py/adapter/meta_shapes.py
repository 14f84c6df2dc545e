"""Fast shape functions for hot ops in shapes-only mode (``numerics="none"``).

torch's meta kernels for batch norm are Python decompositions that trace the whole
computation on meta tensors (about 10 ms per call); a ResNet-50 step calls them 106 times.
The outputs' shapes and dtypes are simple, so shapes-only mode builds them directly. A test
checks every function against torch's own meta kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten
_LOW = (torch.float16, torch.bfloat16)


def _stats_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float32 if x.dtype in _LOW else x.dtype


def _like(x: torch.Tensor) -> torch.Tensor:
    fmt = (
        torch.channels_last
        if x.dim() == 4
        and x.is_contiguous(memory_format=torch.channels_last)
        and not x.is_contiguous()
        else torch.contiguous_format
    )
    return torch.empty_like(x, memory_format=fmt)


def batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``native_batch_norm`` / ``_native_batch_norm_legit``: (out, save_mean, save_invstd)."""
    channels = x.shape[1] if x.dim() > 1 else 1
    stats = x.new_empty((channels,), dtype=_stats_dtype(x))
    return _like(x), stats, x.new_empty((channels,), dtype=_stats_dtype(x))


def batch_norm_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``native_batch_norm_backward``: (grad_input, grad_weight, grad_bias) as masked."""
    channels = x.shape[1] if x.dim() > 1 else 1
    param_dtype = weight.dtype if weight is not None else x.dtype
    grad_input = _like(x) if output_mask[0] else None
    grad_weight = x.new_empty((channels,), dtype=param_dtype) if output_mask[1] else None
    grad_bias = x.new_empty((channels,), dtype=param_dtype) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


#: op overload -> shape function used instead of torch's meta kernel in shapes-only mode
FAST: dict[torch._ops.OpOverload, Callable[..., Any]] = {
    aten.native_batch_norm.default: batch_norm,
    aten._native_batch_norm_legit.default: batch_norm,
    aten.native_batch_norm_backward.default: batch_norm_backward,
}
