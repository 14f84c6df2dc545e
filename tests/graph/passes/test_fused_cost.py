"""fused_cost: one launch, summed work, memory for the external bytes only (hand-computed)."""

from __future__ import annotations

import pytest

from msprof_py.device.costmodel import Bound, KernelCost, memory_ns
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.fused_cost import fused_cost, fused_task_type
from msprof_py.graph.ir import KernelSpec

SPEC = DeviceSpec.load("ascend910b")  # sched 3000 ns, HBM 1.28 TB/s, 32 B/cycle/core at 1.8 GHz


def _k(
    cube: float, vector: float, block_dim: int, flops: float = 0.0, waves: int = 1
) -> KernelSpec:
    tt = TaskType.AI_CORE if cube else TaskType.AI_VECTOR_CORE
    cost = KernelCost(tt, block_dim, 0, 3000, cube, vector, 0.0, waves, Bound.CUBE, flops, 0)
    return KernelSpec("X", cost)


def test_cube_and_vector_members_make_one_mix_kernel() -> None:
    members = [_k(10_000, 0, 24, 1e9), _k(0, 2_000, 48, 1e6, waves=2)]
    cost = fused_cost(SPEC, members, external_bytes=12_800_000)
    # 24 cube cores pull 24 * 32 B * 1.8 GHz = 1.3824 TB/s > 1.28 TB/s: HBM bound
    assert cost.memory_ns == pytest.approx(12_800_000 / 1.28e12 * 1e9)  # 10 000 ns
    assert cost.cube_ns == 10_000 and cost.vector_ns == 2_000
    assert cost.duration_ns == 3_000 + 10_000
    assert cost.sched_ns == 3_000
    assert cost.task_type is TaskType.MIX_AIC
    assert cost.bound is Bound.CUBE
    assert cost.block_dim == 48 and cost.waves == 2
    assert cost.flops == pytest.approx(1e9 + 1e6)
    assert cost.bytes == 12_800_000


def test_vector_only_group_few_blocks_is_memory_bound_on_its_cores() -> None:
    members = [_k(0, 500, 4), _k(0, 300, 2)]
    cost = fused_cost(SPEC, members, external_bytes=1_280_000)
    per_core = 32 * 1.8e9  # 4 blocks pull 230.4 GB/s, below HBM
    assert cost.memory_ns == pytest.approx(1_280_000 / (4 * per_core) * 1e9)  # 5555.6
    assert cost.duration_ns == 3_000 + 5_556
    assert cost.bound is Bound.MEMORY
    assert cost.task_type is TaskType.AI_VECTOR_CORE
    assert cost.vector_ns == 800


def test_tiny_group_is_overhead_bound_and_pays_one_launch() -> None:
    members = [_k(0, 100, 1)] * 3
    cost = fused_cost(SPEC, members, external_bytes=0)
    assert cost.duration_ns == 3_000 + 300
    assert cost.bound is Bound.OVERHEAD


def test_public_memory_ns_matches_the_roofline_term() -> None:
    assert memory_ns(SPEC, 1_280_000, 48) == pytest.approx(1000.0)
    assert memory_ns(SPEC, 0, 48) == 0.0


def test_task_type_rules_and_errors() -> None:
    assert fused_task_type(1.0, 0.0) is TaskType.AI_CORE
    assert fused_task_type(0.0, 1.0) is TaskType.AI_VECTOR_CORE
    assert fused_task_type(1.0, 1.0) is TaskType.MIX_AIC
    with pytest.raises(ValueError):
        fused_cost(SPEC, [], external_bytes=0)
    with pytest.raises(ValueError):
        fused_cost(SPEC, [_k(0, 1, 1)], external_bytes=-1)
