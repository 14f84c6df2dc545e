"""Errors the npu device raises in torch's own style."""

from __future__ import annotations

from typing import NoReturn

import torch

from msprof_py.device import NpuOutOfMemoryError


class NpuOutOfMemory(torch.OutOfMemoryError):
    """The simulated NPU ran out of memory (a ``torch.OutOfMemoryError``).

    ``detail`` is the device-level error with the requested, allocated, reserved and free bytes.
    """

    def __init__(self, detail: NpuOutOfMemoryError) -> None:
        super().__init__(str(detail))
        self.detail = detail


def raise_oom(exc: NpuOutOfMemoryError) -> NoReturn:
    """Re-raise a device OOM as torch's out-of-memory error."""
    raise NpuOutOfMemory(exc) from None


class NumericsNoneError(RuntimeError):
    """An operation needed tensor values while the device runs with ``numerics="none"``.

    Raised for reads the shapes-only policy gives no value (see
    :mod:`msprof_py.adapter.shapes_only`) and for ops whose output shape depends on values.
    """

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"{operation} needs tensor values, but the npu device runs with numerics='none' "
            "(shapes only); run with numerics='cpu' to compute values"
        )
        self.operation = operation
