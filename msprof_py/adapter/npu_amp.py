"""``torch.npu.amp``: autocast and GradScaler for npu, as ``torch.cuda.amp`` has them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from msprof_py.adapter.amp import GradScaler, autocast

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


def custom_fwd(
    fwd: Callable[..., Any] | None = None, *, cast_inputs: torch.dtype | None = None
) -> Any:
    """``torch.amp.custom_fwd`` for npu."""
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=cast_inputs)


def custom_bwd(bwd: Callable[..., Any]) -> Any:
    """``torch.amp.custom_bwd`` for npu."""
    return torch.amp.custom_bwd(bwd, device_type="npu")
