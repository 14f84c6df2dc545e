"""The cost of one fused kernel: its members' work in one launch, moving only external bytes.

A fusion pass replaces several eager kernels by one. The fused kernel does the same
arithmetic, so its cube and vector times are the members' sums; it is launched once (one
scheduling overhead); and it reads only the group's external inputs and writes only its
external outputs: the intermediates stay on chip (UB, L0C), which is where fusion saves time.
Memory time is those external bytes at the bandwidth the kernel's cores can pull
(:func:`msprof_py.device.costmodel.memory_ns`). Duration = scheduling + the largest of the
three terms, the roofline every eager kernel follows. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from msprof_py.device.costmodel import KernelCost, bound_of, memory_ns
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import KernelSpec


def fused_task_type(cube_ns: float, vector_ns: float) -> TaskType:
    """The engine a fused kernel runs on: cube and vector work together make a MIX kernel
    (``MIX_AIC``), cube work alone an AI Core kernel, vector work alone a vector kernel."""
    if cube_ns > 0 and vector_ns > 0:
        return TaskType.MIX_AIC
    if cube_ns > 0:
        return TaskType.AI_CORE
    return TaskType.AI_VECTOR_CORE


def fused_cost(
    spec: DeviceSpec,
    members: Sequence[KernelSpec],
    *,
    external_bytes: int,
    task_type: TaskType | None = None,
) -> KernelCost:
    """Cost of one kernel doing the work of ``members`` while moving ``external_bytes``.

    cube and vector times and FLOPs are summed over the members, the kernel launches as many
    blocks as its widest member (``block_dim``, ``waves``: the maximum), memory time is
    ``external_bytes`` for those blocks (at most one per core of the engine doing the
    work: cube cores when there is cube work, vector cores otherwise), and the task type
    follows :func:`fused_task_type` unless ``task_type`` is given.
    """
    if not members:
        raise ValueError("a fused kernel needs at least one member kernel")
    if external_bytes < 0:
        raise ValueError("external_bytes must be >= 0")
    cube = sum(k.cost.cube_ns for k in members)
    vector = sum(k.cost.vector_ns for k in members)
    block_dim = max(k.cost.block_dim for k in members)
    cores = spec.cube.cores if cube > 0 else spec.vector.cores
    memory = memory_ns(spec, external_bytes, min(block_dim, cores))
    sched = spec.dispatch.device_sched_ns
    return KernelCost(
        task_type=task_type or fused_task_type(cube, vector),
        block_dim=block_dim,
        duration_ns=sched + round(max(cube, vector, memory)),
        sched_ns=sched,
        cube_ns=cube,
        vector_ns=vector,
        memory_ns=memory,
        waves=max(k.cost.waves for k in members),
        bound=bound_of(sched, cube, vector, memory),
        flops=sum(k.cost.flops for k in members),
        bytes=external_bytes,
    )
