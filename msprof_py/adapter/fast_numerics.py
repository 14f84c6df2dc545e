"""``numerics="fast"``: low-precision matmuls and convolutions computed in float32 on the host.

PyTorch's CPU kernels for float16 and bfloat16 convolutions and matrix products are slow
(30-45x their float32 time on this VM: a 3x3 convolution of an 8x64x32x32 batch takes 34 ms in
float32 and 1.5 s in float16), so an AMP model profiled with ``numerics="cpu"`` spends most of
its wall time in them. With ``"fast"`` these ops get their low-precision inputs widened to
float32 (exact), run in float32 and have their outputs rounded back to the input dtype: the
arithmetic of a cube unit, which multiplies fp16/bf16 operands and accumulates in fp32, rather
than that of PyTorch's CPU kernels. Values are therefore *not* bitwise what the same program
computes on CPU (they differ in the last bits of some elements); every other op, and every
float32 op, is computed exactly as with ``"cpu"``. The simulated timeline does not change: the
device is costed from dtypes and shapes, never from host time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: ATen ops (base names) computed widened: the cube's work, forward and backward
UPCAST_OPS = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "mv",
        "addmv",
        "convolution",
        "convolution_overrideable",
        "convolution_backward",
        "convolution_backward_overrideable",
    }
)
_LOW = (torch.float16, torch.bfloat16)


class _Mixed(Exception):
    """Inputs in two different low-precision dtypes: run the op as is (torch decides)."""


def upcasts(base: str, writes: bool) -> bool:
    """Whether an op with ATen base name ``base`` is computed widened (functional ops only:
    an in-place or ``out=`` op must write its own tensor)."""
    return not writes and base.split(".", 1)[0] in UPCAST_OPS


def call_widened(call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``call(*args, **kwargs)`` with float16/bfloat16 tensors widened to float32 and the
    float32 tensors it returns rounded back to that dtype; as is when no input is low
    precision or inputs mix float16 and bfloat16."""
    found: list[torch.dtype] = []

    def widen(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.dtype in _LOW:
                if found and found[0] != value.dtype:
                    raise _Mixed
                found.append(value.dtype)
                return value.float()
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        return value

    try:
        wide_args = tuple(widen(a) for a in args)
        wide_kwargs = {k: widen(v) for k, v in kwargs.items()}
    except _Mixed:
        return call(*args, **kwargs)
    if not found:
        return call(*args, **kwargs)
    return _narrow(call(*wide_args, **wide_kwargs), found[0])


def _narrow(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.dtype == torch.float32 else value
    if isinstance(value, (list, tuple)):
        return type(value)(_narrow(v, dtype) for v in value)
    return value
