"""Shared helpers for device tests."""

from __future__ import annotations

from msprof_py.device.costmodel import Bound, KernelCost
from msprof_py.device.records import TaskType


def kernel(
    duration_ns: int, block_dim: int = 24, task_type: TaskType = TaskType.AI_CORE
) -> KernelCost:
    """A kernel of a given duration and block dim, bypassing the roofline."""
    return KernelCost(
        task_type=task_type,
        block_dim=block_dim,
        duration_ns=duration_ns,
        sched_ns=0,
        cube_ns=0.0,
        vector_ns=0.0,
        memory_ns=0.0,
        waves=1,
        bound=Bound.OVERHEAD,
        flops=0.0,
        bytes=0,
    )
