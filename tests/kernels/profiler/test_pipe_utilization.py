"""PipeUtilization.csv: msprof op's columns, per-block times and ratios, hand-computed."""

from __future__ import annotations

import csv
import math

import numpy as np
from opprof_samples import copy_add_copy, one_mmad

from msprof_py.kernels import launch, pipeutil
from msprof_py.kernels.opprof import profile_launch
from msprof_py.kernels.roofline import roofline

EXPECTED_COLUMNS = [
    "block_id", "sub_block_id",
    "aic_time(us)", "aic_total_cycles", "aic_cube_time(us)", "aic_cube_ratio",
    "aic_scalar_time(us)", "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio",
    "aic_mte2_time(us)", "aic_mte2_ratio", "aic_mte3_time(us)", "aic_mte3_ratio",
    "aic_fixpipe_time(us)", "aic_fixpipe_ratio",
    "aiv_time(us)", "aiv_total_cycles", "aiv_vec_time(us)", "aiv_vec_ratio",
    "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)", "aiv_mte2_ratio",
    "aiv_mte3_time(us)", "aiv_mte3_ratio", "icache_miss_rate",
]  # fmt: skip

GIB = 2**30


def _cycles(nbytes: int, gib_s: float) -> int:
    """Cycles at the 1.8 GHz table clock for a move at ``gib_s`` (a table point)."""
    return math.ceil(nbytes / (gib_s * GIB / 1.8e9))


def test_vector_kernel_rows_match_hand_computed_cycles(tmp_path) -> None:
    n = 8192  # 16 KiB of fp16: exactly a table point on both paths
    x = np.ones(n, np.float16)
    z = np.zeros_like(x)
    result = launch(copy_add_copy, 1, x, z, n)
    mte2 = _cycles(16384, 68.0)  # GM->UB at 16 KiB
    vec = 16384 // 256  # one 256 B repeat per cycle
    mte3 = _cycles(16384, 86.8)  # UB->GM at 16 KiB
    total = mte2 + vec + mte3  # depth 1, one tile: strictly in sequence
    assert result.total_cycles == total

    path = pipeutil.write(result, tmp_path / "PipeUtilization.csv")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == EXPECTED_COLUMNS
        (row,) = list(reader)
    assert row["block_id"] == "0" and row["sub_block_id"] == "0"
    assert int(row["aiv_total_cycles"]) == total
    assert float(row["aiv_time(us)"]) == round(total / 1800, 3)  # 1.8 GHz
    assert float(row["aiv_mte2_ratio"]) == round(mte2 / total, 3)
    assert float(row["aiv_vec_ratio"]) == round(vec / total, 3)
    assert float(row["aiv_mte3_ratio"]) == round(mte3 / total, 3)
    assert float(row["aiv_scalar_ratio"]) == round(3 / total, 3)  # 3 dispatches
    assert float(row["aiv_vec_time(us)"]) == round(vec / 1800, 3)
    # a vector-only kernel has no cube core: its aic columns are N/A, as is the icache
    assert row["aic_time(us)"] == row["aic_cube_ratio"] == row["icache_miss_rate"] == "N/A"


def test_mix_kernel_splits_pipes_between_cube_and_vector_core() -> None:
    m = k = n = 64
    a = np.ones((m, k), np.float16)
    b = np.ones((k, n), np.float16)
    c = np.zeros((m, n), np.float16)
    result = launch(one_mmad, 1, a, b, c, m, k, n)
    assert result.core_type == "mix"
    (row,) = pipeutil.rows(result)
    total = result.total_cycles
    busy = result.blocks[0].pipe_busy
    assert busy["M"] == (m // 16) * (k // 16) * (n // 16)  # one 16x16x16 fractal per cycle
    assert float(row["aic_cube_ratio"]) == round(busy["M"] / total, 3)
    assert float(row["aic_mte2_ratio"]) == round(busy["MTE2"] / total, 3)  # GM->L1: cube side
    assert float(row["aic_fixpipe_ratio"]) == round(busy["FIX"] / total, 3)
    assert float(row["aic_mte1_ratio"]) == round(busy["MTE1"] / total, 3)
    assert row["aiv_mte2_ratio"] == row["aiv_vec_ratio"] == "0.000"
    assert row["aic_total_cycles"] == row["aiv_total_cycles"] == total
    np.testing.assert_array_equal(c, np.full((m, n), k, np.float16))


def test_roofline_counts_gm_bytes_and_flops_of_the_instructions() -> None:
    m = k = n = 64
    a, b = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    c = np.zeros((m, n), np.float16)
    result = launch(one_mmad, 1, a, b, c, m, k, n)
    roof = roofline(result)
    assert roof.gm_bytes == (m * k + k * n + m * n) * 2  # Fixpipe writes fp16, not fp32
    assert roof.cube_flops == 2 * m * k * n
    assert roof.unit == "cube"
    spec = result.chip.spec
    assert roof.peak == 24 * 16 * 16 * 16 * 2 * spec.cube.clock_hz
    assert roof.intensity == 2 * m * k * n / roof.gm_bytes
    assert roof.bound == "memory"  # 21 FLOP/B is far left of the ridge
    assert roof.achieved == roof.cube_flops / (result.duration_ns / 1e9)
    assert "roofline" in profile_launch(result).summary()
