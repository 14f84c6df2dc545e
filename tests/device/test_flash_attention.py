"""The FlashAttention tile model (device/attention.py), checked against hand-computed costs."""

from __future__ import annotations

import dataclasses

import pytest

from msprof_py.device.attention import (
    FlashShape,
    flash_attention_cost,
    flash_kernel_cost,
    flash_tiling,
)
from msprof_py.device.costmodel import Bound, matmul_cost, vector_cost
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec

B910 = DeviceSpec.preset("ascend910b")
CLOCK = 1.8  # GHz: cycles / CLOCK = ns


def test_forward_cost_by_hand() -> None:
    """24 heads of a 1024-token fp16 attention, head dim 128, on the 910B2 preset."""
    shape = FlashShape(heads=24, sq=1024, skv=1024, d=128, dv=128)
    t = flash_tiling(B910, shape, backward=False)
    # 8 query blocks of 128 rows per head -> 192 units on 24 cube cores: 8 waves
    assert (t.units, t.units_per_head, t.block_dim, t.waves) == (192, 8, 24, 8)
    # per key block: Q K^T = (128/16)(128/16)(128/16) = 512 MMAD cycles, P V the same
    assert t.block_cube_cycles == pytest.approx(1024 / 0.99)
    # softmax: ceil(128*128*4 B / 256 B) = 256 repeats x 10 ops / 2 vector cores / 0.8
    assert t.block_vector_cycles == pytest.approx(1600)
    assert t.unit_cube_cycles == pytest.approx(8 * 1024 / 0.99)  # 8 key blocks per unit
    # HBM: q, k, v, o (1024*128*2 B = 262,144 each) + stats (1024 rows * 64 B), 24 heads
    assert t.hbm_bytes == 24 * (4 * 262_144 + 65_536)
    # L2, cube side: S (fp32) out + P (fp16) in per score, and 7 K/V re-reads per head
    assert t.l2_cube_bytes == 24 * (1024 * 1024 * 6 + 7 * 2 * 262_144)
    assert t.l2_vector_bytes == 24 * 1024 * 1024 * 6
    cost = flash_kernel_cost(B910, shape, backward=False)
    cube = 8 * 8 * 1024 / 0.99 / CLOCK
    vector = 8 * 12_800 / CLOCK
    fill = 8 * (1024 / 0.99) / CLOCK  # one block of the lighter stage
    l2 = t.l2_cube_bytes / 4750e9 * 1e9
    hbm = t.hbm_bytes / 1280e9 * 1e9  # 1.6 TB/s x 0.8 (below 24 cores x 32 B x 1.8 GHz)
    assert cost.cube_ns == pytest.approx(cube) and cost.vector_ns == pytest.approx(vector)
    assert cost.memory_ns == pytest.approx(max(l2, hbm))
    assert cost.duration_ns == 3000 + round(vector + fill)  # vector-bound, sched 3 us
    assert cost.task_type is TaskType.MIX_AIC and cost.bound is Bound.VECTOR
    assert cost.flops == pytest.approx(4 * 24 * 1024 * 1024 * 128)


def test_backward_has_five_matmuls_per_block_pair() -> None:
    shape = FlashShape(heads=2, sq=512, skv=256, d=64, dv=64)
    t = flash_tiling(B910, shape, backward=True)
    # units own key/value blocks: 2 per head; each streams the 4 query blocks
    assert (t.units, t.units_per_head) == (4, 2)
    # S, dP: (128/16)(128/16)(64/16) = 256 each; dV, dK, dQ: (128/16)(64/16)(128/16) = 256 each
    assert t.block_cube_cycles == pytest.approx(5 * 256 / 0.99)
    assert t.unit_cube_cycles == pytest.approx(4 * 5 * 256 / 0.99)
    assert t.block_vector_cycles == pytest.approx(256 * 14 / 2 / 0.8)


def test_causal_density_scales_the_streamed_blocks() -> None:
    full = flash_tiling(B910, FlashShape(4, 2048, 2048, 128, 128), backward=False)
    half = flash_tiling(B910, FlashShape(4, 2048, 2048, 128, 128, density=0.5), backward=False)
    assert half.unit_cube_cycles == pytest.approx(full.unit_cube_cycles / 2)
    assert half.l2_vector_bytes == full.l2_vector_bytes // 2


def test_key_value_rereads_use_l2_until_the_heads_in_flight_overflow_it() -> None:
    """The re-reads of K/V by a head's other query blocks come from L2 while the heads in
    flight fit in it; a spec without L2 pays them in HBM."""
    shape = FlashShape(heads=24, sq=1024, skv=4096, d=128, dv=128)
    no_l2 = dataclasses.replace(B910, memory=dataclasses.replace(B910.memory, l2_bytes=0))
    cached = flash_tiling(B910, shape, backward=False)
    spilled = flash_tiling(no_l2, shape, backward=False)
    rereads = 24 * 7 * 2 * 4096 * 128 * 2  # 7 other query blocks read K and V again
    assert spilled.hbm_bytes - cached.hbm_bytes == rereads
    assert cached.l2_cube_bytes - spilled.l2_cube_bytes == rereads
    slow = flash_kernel_cost(no_l2, shape, backward=False)
    fast = flash_kernel_cost(B910, shape, backward=False)
    assert slow.memory_ns > fast.memory_ns


def test_grouped_query_attention_reads_fewer_key_value_bytes() -> None:
    mha = flash_tiling(B910, FlashShape(8, 512, 512, 128, 128), backward=False)
    gqa = flash_tiling(B910, FlashShape(8, 512, 512, 128, 128, kv_share=0.25), backward=False)
    kv_bytes = 8 * 2 * 512 * 128 * 2
    assert mha.hbm_bytes - gqa.hbm_bytes == kv_bytes * 3 // 4


def _naive_forward_ns(heads: int, seq: int, d: int) -> int:
    """BatchMatMul, SoftmaxV2 (fp16 scores through HBM), BatchMatMul."""
    scores = matmul_cost(B910, seq, seq, d, batch=heads)
    softmax = vector_cost(
        B910,
        elements=heads * seq * seq,
        dtype="float16",
        bytes_moved=heads * seq * seq * 4,
        ops_per_element=10,
    )
    out = matmul_cost(B910, seq, d, seq, batch=heads)
    return scores.duration_ns + softmax.duration_ns + out.duration_ns


@pytest.mark.parametrize("seq", [1024, 4096, 8192])
def test_long_sequences_run_faster_fused_than_naive(seq: int) -> None:
    fused = flash_kernel_cost(B910, FlashShape(24, seq, seq, 128, 128), backward=False)
    assert fused.duration_ns < _naive_forward_ns(24, seq, 128)
    assert fused.bytes < 24 * seq * seq * 2  # less HBM traffic than one score matrix


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        FlashShape(1, -1, 4, 16, 16)
    with pytest.raises(ValueError, match="density"):
        FlashShape(1, 4, 4, 16, 16, density=1.5)
    empty = flash_kernel_cost(B910, FlashShape(0, 128, 128, 64, 64), backward=False)
    assert empty.duration_ns == B910.dispatch.device_sched_ns and empty.cube_ns == 0


def test_keyword_entry_point_is_the_tile_model() -> None:
    """The shim and the analysis call :func:`flash_attention_cost`; it is the tile model with
    the caller's input/output bytes."""
    shape = FlashShape(16, 512, 512, 64, 64, "bfloat16", kv_share=0.5, density=0.5)
    by_keywords = flash_attention_cost(
        B910, batch=16, sq=512, skv=512, d=64, dv=64, dtype="bfloat16", nbytes=1 << 20,
        density=0.5, kv_share=0.5, backward=True,
    )  # fmt: skip
    assert by_keywords == flash_kernel_cost(B910, shape, backward=True, io_bytes=1 << 20)
