"""Building blocks for ops the adapter implements itself (torch_npu's fused ops, collectives).

A custom op computes its result on the host views of its npu inputs, wraps the host result as
an npu tensor, and launches the kernel(s) it costs on the current stream:

    with device_call() as state:
        out = wrap(reference(host(q), host(k), host(v)), "npu_fusion_attention")
        launch_kernel("FlashAttentionScore", "npu_fusion_attention", cost, [q, k, v], [out])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from msprof_py.adapter import backend, runtime
from msprof_py.adapter.runtime import AdapterState
from msprof_py.adapter.tensors import adopt, host_view
from msprof_py.device.costmodel import KernelCost

__all__ = ["device_call", "host", "launch_kernel", "numerics_none", "state", "wrap"]


def state() -> AdapterState:
    """The installed adapter state (device, current stream, modes)."""
    return runtime.state()


def numerics_none() -> bool:
    """True when tensors hold shapes only (``numerics="none"``)."""
    return runtime.state().meta


@contextmanager
def device_call(name: str = "", args: tuple = ()) -> Iterator[AdapterState]:
    """Mark a call into the device (measured host time; a host op ``name`` for the
    collectors) and give the adapter state."""
    current = runtime.state()
    current.enter(name, args)
    try:
        yield current
    finally:
        current.leave()


def host(t: torch.Tensor) -> torch.Tensor:
    """The CPU (or meta) tensor aliasing an npu tensor's values."""
    return host_view(t)


def wrap(result: torch.Tensor, tag: str) -> torch.Tensor:
    """An npu tensor holding a fresh host tensor's values (takes device memory)."""
    return adopt(result, runtime.state(), tag)


def launch_kernel(
    op_type: str,
    name: str,
    cost: KernelCost,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
) -> None:
    """Launch one costed kernel on the current stream, recording its tensors' shapes."""
    backend.launch_custom(runtime.state(), name, op_type, cost, inputs, outputs)
