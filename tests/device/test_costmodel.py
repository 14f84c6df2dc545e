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


# GEMM tiling constants of the ascend910b preset
EFF = 0.99  # MMAD efficiency in a block's K loop
BLOCK = 3400  # cycles of fixed overhead per block
FEED = 4750e9 / 24 / 1.8e9  # one core's share of L2 bandwidth: 109.95 B/cycle
CLOCK = 1.8e9


def test_4096_cubed_fp16_matmul() -> None:
    cost = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="float16")
    tiling = costmodel.gemm_tiling(B910, 4096, 4096, 4096, dtype="float16")
    # 128x256 tiles: 32 x 16 = 512 tiles on 24 cores = 22 waves (the last one a third full)
    assert (tiling.tile_m * tiling.tile_n, tiling.tiles, tiling.split_k) == (128 * 256, 512, 1)
    assert cost.block_dim == 24 and cost.waves == 22  # one block per core, 22 tiles each
    # one K step: MMAD 8 x 16 = 128 cycles; MTE2 (128 + 256) x 16 x 2 B / 109.95 = 111.8: MMAD
    assert tiling.step_cycles == 128
    block = 256 * 128 / EFF + BLOCK  # 256 K steps = 36,499.0 cycles
    cube_ns = 22 * block / CLOCK * 1e9  # = 446,098.8 ns
    assert cost.cube_ns == pytest.approx(cube_ns)
    assert cost.memory_ns == pytest.approx(3 * 4096 * 4096 * 2 / HBM * 1e9)  # 78,643.2 ns
    assert cost.duration_ns == SCHED + round(cube_ns) == 449_099
    assert cost.bound is Bound.CUBE and cost.task_type is TaskType.AI_CORE
    # 306 TFLOPS: 86.5% of the 353.9 TFLOPS peak (S3 measured 272-322 over LLM shapes)
    assert cost.flops / (cost.duration_ns * 1e-9) / 1e12 == pytest.approx(306.0, abs=0.1)


def test_published_bf16_shapes_within_a_few_percent() -> None:
    # S3: mamf-finder on a 910B2C (BF16), four printed trials
    published = {
        (6912, 16384, 2048): 291.58,
        (2304, 5120, 1536): 272.60,
        (6144, 17920, 2816): 301.26,
        (14336, 4096, 4096): 317.32,
    }
    for (m, n, k), tflops in published.items():
        cost = costmodel.matmul_cost(B910, m, n, k, dtype="bfloat16")
        assert cost.flops / cost.duration_ns / 1e3 == pytest.approx(tflops, rel=0.03)
    # 2304 x 5120 x 1536 by hand: 18 x 20 = 360 tiles = 15 waves of 96 K steps
    small = costmodel.matmul_cost(B910, 2304, 5120, 1536, dtype="bfloat16")
    assert small.duration_ns == SCHED + round(15 * (96 * 128 / EFF + BLOCK) / CLOCK * 1e9)


def test_one_tile_more_than_the_cores_costs_a_second_wave() -> None:
    k = 4096
    big = 256 * 128 / EFF + BLOCK  # a 128x256 block: 256 K steps of 128 MMAD cycles
    cost_24 = costmodel.matmul_cost(B910, 128 * 4, 256 * 6, k)  # 24 tiles of 128x256
    assert (cost_24.block_dim, cost_24.waves) == (24, 1)
    assert cost_24.cube_ns == pytest.approx(big / CLOCK * 1e9)
    # 25 tiles of 128x256 would take 2 waves (72,998 cycles); the tiling picks 50 tiles of
    # 128x128 in 3 waves instead: MTE2-bound steps of 256 x 32 B / 109.95 = 74.5 cycles
    small = 256 * (256 * 32 / FEED) / EFF + BLOCK
    cost_25 = costmodel.matmul_cost(B910, 128 * 5, 256 * 5, k)
    assert 3 * small < 2 * big
    assert (cost_25.block_dim, cost_25.waves) == (24, 3)
    assert cost_25.cube_ns == pytest.approx(3 * small / CLOCK * 1e9)
    # either way the 25th tile costs far more than 1/24 more time
    assert cost_25.cube_ns > 1.5 * cost_24.cube_ns


def test_narrow_output_gemm_splits_k_across_the_cores() -> None:
    # grad-weight shape of a ResNet-50 layer1 1x1 conv at bs256: 64 x 64 x 802,816
    m = n = 64
    k = 256 * 56 * 56
    tiling = costmodel.gemm_tiling(B910, m, n, k)
    assert (tiling.tile_m, tiling.tile_n, tiling.tiles) == (64, 64, 1)
    assert tiling.split_k == 24 and tiling.block_dim == 24
    assert tiling.k_chunk == 33_456  # ceil(802,816 / 24) = 33,451 -> multiple of 16
    # one K step: MMAD 4 x 4 = 16 cycles; MTE2 (64 + 64) x 32 B at 0.75 of 109.95 B/cycle
    # (B's rows are 128 B, not 512 B-aligned) = 49.7 cycles
    step = 128 * 32 / (FEED * 0.75)
    assert tiling.step_cycles == pytest.approx(step)
    cost = costmodel.matmul_cost(B910, m, n, k)
    assert cost.cube_ns == pytest.approx((33_456 // 16 * step / EFF + BLOCK) / CLOCK * 1e9)
    # partial sums: 24 slices x 64 x 64 fp32, written and read back
    operands = (64 * k + k * 64) * 2 + 64 * 64 * 2
    assert cost.bytes == operands + 2 * 24 * 64 * 64 * 4
    one_core = costmodel.matmul_cost(B910, m, n, k, block_dim=1)
    assert one_core.duration_ns > 20 * cost.duration_ns


def test_unaligned_rows_slow_the_operand_feed() -> None:
    aligned = costmodel.gemm_tiling(B910, 4096, 4096, 4096)
    unaligned = costmodel.gemm_tiling(B910, 4000, 4000, 4000)  # 8000 B rows: not 512-aligned
    assert aligned.step_cycles == 128
    # MTE2 at 0.75 of the feed: 12,288 B / (109.95 x 0.75) = 149.0 cycles > MMAD 128
    assert unaligned.step_cycles == pytest.approx(384 * 32 / (FEED * 0.75))
    rate = {
        size: costmodel.matmul_cost(B910, size, size, size).flops
        / costmodel.matmul_cost(B910, size, size, size).duration_ns
        for size in (4000, 4096)
    }
    assert rate[4000] < 0.9 * rate[4096]


def test_fp32_matmul_runs_on_the_cube_at_half_rate() -> None:
    cost = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="float32")
    fp16 = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="float16")
    # K0 = 8: twice the K steps; the fp32 slices (4 B) feed at (128 + 256) x 8 x 4 / 109.95
    assert costmodel.gemm_tiling(B910, 4096, 4096, 4096, dtype="float32").step_cycles == 128
    assert cost.cube_ns == pytest.approx(22 * (512 * 128 / EFF + BLOCK) / CLOCK * 1e9)
    assert cost.cube_ns > 1.9 * fp16.cube_ns
    assert cost.memory_ns == pytest.approx(3 * 4096 * 4096 * 4 / HBM * 1e9)


def test_fp32_matmul_on_a_cube_without_fp32_runs_in_fp16() -> None:
    spec = DeviceSpec.preset("ascend910a")
    fp32 = costmodel.matmul_cost(spec, 2048, 2048, 2048, dtype="float32")
    fp16 = costmodel.matmul_cost(spec, 2048, 2048, 2048, dtype="float16")
    assert fp32.cube_ns >= fp16.cube_ns  # same fractal; fp32 operands are twice the bytes
    with pytest.raises(SpecError):
        costmodel.matmul_cost(spec, 16, 16, 16, dtype="int64")


def test_matmul_pads_to_the_fractal_and_small_ones_use_few_cores() -> None:
    cost = costmodel.matmul_cost(B910, 17, 17, 17)
    # 17 pads to 32 on every axis; 16x16 tiles (4 blocks, 2 K steps each) beat one 32x32 block:
    # a 16x16 step is MTE2-bound, 1024 B at 0.75 x 109.95 B/cycle (34 B rows) = 12.4 cycles
    assert cost.block_dim == 4
    assert cost.cube_ns == pytest.approx((2 * 1024 / (FEED * 0.75) / EFF + BLOCK) / CLOCK * 1e9)
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
    # launch + max(1e6 FLOPs / 4e9 FLOP/s, 8e6 B / 8e9 B/s) = 30 us + 1 ms
    assert cost.duration_ns == 30_000 + 1_000_000
    vector = costmodel.vector_cost(B910, elements=1_000_000, dtype="int32", bytes_moved=8_000_000)
    assert cost.duration_ns > 100 * vector.duration_ns


def test_aicpu_costs_a_matmul_per_flop() -> None:
    n = 1024
    cost = costmodel.aicpu_cost(B910, elements=n * n, bytes_moved=3 * n * n * 4, flops=2 * n**3)
    # 2.147 GFLOP at 4 GFLOP/s: 0.537 s, not the 5 ms its 1 Mi elements would cost
    assert cost.duration_ns == 30_000 + round(2 * n**3 / 4e9 * 1e9) == 536_900_912
    assert cost.flops == 2 * n**3


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
