"""Cost model: hand-computed roofline examples on the ascend910b preset (reference section 9)."""

from __future__ import annotations

import pytest

from msprof_py.device import costmodel
from msprof_py.device.costmodel import Bound
from msprof_py.device.records import CopyKind, TaskType
from msprof_py.device.spec import DeviceSpec, SpecError

B910 = DeviceSpec.preset("ascend910b")
SCHED = 3000  # device scheduling overhead, ns
HBM = 1.6e12 * 0.8  # achievable HBM bandwidth, B/s


def test_4096_cubed_fp16_matmul() -> None:
    cost = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="float16")
    cycles = (4096 // 16) ** 3  # fractal cycles, 16x16x16 per cycle
    assert cost.block_dim == 24  # 512 output tiles of 128x256 > 24 cube cores
    cube_ns = cycles / 24 / 1.8e9 / 0.85 * 1e9  # = 456,895.86 ns
    assert cost.cube_ns == pytest.approx(cube_ns)
    assert cost.memory_ns == pytest.approx(3 * 4096 * 4096 * 2 / HBM * 1e9)  # 78,643.2 ns
    assert cost.duration_ns == SCHED + round(cube_ns) == 459_896
    assert cost.bound is Bound.CUBE and cost.task_type is TaskType.AI_CORE
    assert cost.flops == 2 * 4096**3
    # ~299 TFLOPS achieved: 85% of the 353.9 TFLOPS peak, less the scheduling overhead
    assert cost.flops / (cost.duration_ns * 1e-9) / 1e12 == pytest.approx(298.8, abs=0.1)


def test_fp32_matmul_runs_on_the_cube_at_half_rate() -> None:
    cost = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="float32")
    cycles = 256 * 256 * (4096 // 8)  # K0 = 8 for fp32
    cube_ns = cycles / 24 / 1.8e9 / 0.85 * 1e9  # = 913,791.72 ns
    assert cost.duration_ns == SCHED + round(cube_ns) == 916_792
    assert cost.memory_ns == pytest.approx(3 * 4096 * 4096 * 4 / HBM * 1e9)


def test_fp32_matmul_on_a_cube_without_fp32_runs_in_fp16() -> None:
    spec = DeviceSpec.preset("ascend910a")
    fp32 = costmodel.matmul_cost(spec, 2048, 2048, 2048, dtype="float32")
    fp16 = costmodel.matmul_cost(spec, 2048, 2048, 2048, dtype="float16")
    assert fp32.cube_ns == pytest.approx(fp16.cube_ns)
    with pytest.raises(SpecError):
        costmodel.matmul_cost(spec, 16, 16, 16, dtype="int64")


def test_matmul_pads_to_the_fractal_and_small_ones_use_few_cores() -> None:
    cost = costmodel.matmul_cost(B910, 17, 17, 17)
    assert cost.block_dim == 1
    # 17 pads to 32 on every axis: 2 x 2 x 2 fractal cycles on one core
    assert cost.cube_ns == pytest.approx(8 / 1.8e9 / 0.85 * 1e9)
    assert cost.bytes == 3 * 32 * 32 * 2
    assert cost.bound is Bound.OVERHEAD


def test_long_unaligned_k_becomes_mix_aic() -> None:
    unaligned = costmodel.matmul_cost(B910, 4096, 4096, 4100)  # 8200 B per row: not 512-aligned
    aligned = costmodel.matmul_cost(B910, 4096, 4096, 4096)
    short = costmodel.matmul_cost(B910, 64, 64, 1500)  # unaligned but under 50 us of MACs
    assert unaligned.task_type is TaskType.MIX_AIC
    assert aligned.task_type is TaskType.AI_CORE
    assert short.task_type is TaskType.AI_CORE


def test_large_elementwise_add_is_memory_bound() -> None:
    n = 2**26  # 64 Mi fp32 elements per operand
    nbytes = 3 * n * 4  # two inputs read, one output written
    cost = costmodel.vector_cost(B910, elements=n, dtype="float32", bytes_moved=nbytes)
    assert cost.block_dim == 48
    assert cost.vector_ns == pytest.approx(n * 4 / 256 / 48 / 1.8e9 / 0.8 * 1e9)  # 15,170.4 ns
    assert cost.memory_ns == pytest.approx(nbytes / HBM * 1e9)  # 629,145.6 ns
    assert cost.duration_ns == SCHED + 629_146
    assert cost.bound is Bound.MEMORY and cost.task_type is TaskType.AI_VECTOR_CORE


def test_tiny_op_is_dominated_by_overhead() -> None:
    cost = costmodel.vector_cost(B910, elements=16, dtype="float32", bytes_moved=192)
    assert cost.block_dim == 1
    # one 256-byte repeat (0.69 ns) and 192 B at one core's 57.6 GB/s (3.33 ns)
    assert cost.memory_ns == pytest.approx(192 / (32 * 1.8e9) * 1e9)
    assert cost.duration_ns == SCHED + 3
    assert cost.bound is Bound.OVERHEAD


def test_one_block_more_than_cores_costs_a_second_wave() -> None:
    n = 48 * 256 * 1000  # fp16 elements: 1000 repeats per core at 48 blocks
    one_wave = costmodel.vector_cost(B910, elements=n, dtype="float16", bytes_moved=0, block_dim=48)
    two_waves = costmodel.vector_cost(
        B910, elements=n, dtype="float16", bytes_moved=0, block_dim=49
    )
    assert one_wave.waves == 1 and two_waves.waves == 2
    assert two_waves.vector_ns == pytest.approx(one_wave.vector_ns * 2 * 48 / 49)


def test_aicpu_is_far_slower() -> None:
    cost = costmodel.aicpu_cost(B910, elements=1_000_000, bytes_moved=8_000_000)
    assert cost.task_type is TaskType.AI_CPU
    assert cost.duration_ns == 30_000 + 5_000_000  # launch + 1e6 / 2e8 elements/s
    vector = costmodel.vector_cost(B910, elements=1_000_000, dtype="int32", bytes_moved=8_000_000)
    assert cost.duration_ns > 100 * vector.duration_ns


def test_transdata_to_nc1hwc0_costs_the_padded_bytes() -> None:
    shape = (32, 3, 224, 224)
    cost = costmodel.transdata_cost(B910, shape, "float16", "NCHW", "NC1HWC0")
    src = 32 * 3 * 224 * 224 * 2  # 9,633,792 B
    dst = 32 * 1 * 224 * 224 * 16 * 2  # C padded from 3 to C0 = 16: 51,380,224 B
    assert cost.bytes == src + dst
    assert cost.duration_ns == SCHED + round((src + dst) / HBM * 1e9)  # 47,667 ns of traffic


@pytest.mark.parametrize(
    ("kind", "pinned", "expected"),
    [
        (CopyKind.H2D, True, 10_000 + round(2**20 / 25e9 * 1e9)),  # 51,943 ns
        (CopyKind.D2H, True, 10_000 + round(2**20 / 25e9 * 1e9)),
        (CopyKind.H2D, False, 25_000 + round(2**20 / 10e9 * 1e9)),  # 129,858 ns
        (CopyKind.D2D, True, SCHED + round(2 * 2**20 / HBM * 1e9)),  # 4,638 ns
    ],
)
def test_copy_durations(kind: CopyKind, pinned: bool, expected: int) -> None:
    assert costmodel.copy_ns(B910, kind, 2**20, pinned=pinned) == expected


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        costmodel.matmul_cost(B910, -1, 2, 2)
    with pytest.raises(ValueError):
        costmodel.copy_ns(B910, CopyKind.H2D, -5)
