"""L2 reuse of eager launches: the device buffers an op reads and writes, told to the device's
:class:`~msprof_py.device.l2.L2Residency` (when the preset enables ``memory.l2_reuse``).

Each launched op reads its npu inputs, then writes its outputs, in launch order; the bytes of
its reads still resident in L2 re-cost the op's first vector kernel
(:func:`msprof_py.device.costmodel.with_l2_reads`): a BatchNorm, ReLU, Add, Cast or softmax
reading what the previous kernel wrote pays L2 bandwidth for it. Buffers are keyed by their
device address; a tensor's bytes are those it stores (padded private formats included).
Kernels of compiled graphs (their values live in the graph's workspace) are not followed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from msprof_py.adapter.opcost import PlannedKernel, dtype_name
from msprof_py.adapter.tensors import memory_of
from msprof_py.device import costmodel
from msprof_py.device.formats import storage_bytes
from msprof_py.device.l2 import L2Residency
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec

#: (shape, dtype, format) key -> bytes stored
_BYTES: dict[tuple, int] = {}


def stored_bytes(key: tuple) -> int:
    """Bytes a tensor with (shape, dtype, format) ``key`` holds on the device."""
    found = _BYTES.get(key)
    if found is None:
        shape, dtype, fmt = key
        if fmt == "ND":
            found = math.prod(shape) * dtype.itemsize
        else:
            found = storage_bytes(tuple(shape), dtype_name(dtype), fmt)
        if len(_BYTES) > 100_000:
            _BYTES.clear()
        _BYTES[key] = found
    return found


def _address(t: torch.Tensor) -> int | None:
    held = memory_of(t)
    return None if held is None else held.address


def traffic(
    l2: L2Residency,
    inputs: Sequence[torch.Tensor],
    in_keys: Sequence[tuple],
    outputs: Sequence[torch.Tensor | None],
    out_keys: Sequence[tuple | None],
) -> int:
    """Tell ``l2`` an op read ``inputs`` and then wrote ``outputs``; the bytes of the reads that
    L2 served."""
    hits = 0
    for t, key in zip(inputs, in_keys, strict=False):
        address = _address(t)
        if address is not None:
            hits += l2.read(address, stored_bytes(key))
    for o, key in zip(outputs, out_keys, strict=False):
        if o is not None and key is not None:
            address = _address(o)
            if address is not None:
                l2.write(address, stored_bytes(key))
    return hits


def apply(spec: DeviceSpec, kernels: Sequence[PlannedKernel], hits: int) -> Sequence[PlannedKernel]:
    """``kernels`` with the first vector kernel re-costed for ``hits`` bytes read from L2."""
    if hits <= 0:
        return kernels
    for i, kernel in enumerate(kernels):
        if kernel.cost.task_type is TaskType.AI_VECTOR_CORE:
            cost = costmodel.with_l2_reads(spec, kernel.cost, hits)
            return (*kernels[:i], PlannedKernel(kernel.op_type, cost), *kernels[i + 1 :])
    return kernels
