"""The batch-size what-if: which tasks grow with the batch and what they cost then."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from msprof_py.analyzers import batchscale
from msprof_py.device import costmodel
from msprof_py.device.spec import DeviceSpec

SPEC = DeviceSpec.load("ascend910b")
PARAMS = frozenset({(64, 64), (64,)})


def _task(**fields: object) -> dict[str, object]:
    row: dict[str, object] = {
        "kind": "kernel", "task_type": "AI_VECTOR_CORE", "op_type": "Add", "block_dim": 4,
        "start_ns": 0, "end_ns": 10_000, "cube_ns": 0, "vector_ns": 8_000, "memory_ns": 2_000,
        "input_shapes": "8,64", "output_shapes": "8,64", "input_dtypes": "float16",
        "output_dtypes": "float16", "host_op_id": -1, "copy_kind": "",
    }  # fmt: skip
    row.update(fields)
    return row


@pytest.mark.parametrize(
    ("shape", "carries"),
    [
        ((8, 3, 32, 32), True),  # the batch itself
        ((8 * 128, 512), True),  # batch x sequence rows
        ((64, 64), False),  # a parameter shape, though 64 is a multiple of 8
        ((4, 64), False),  # smaller than the batch
        ((), False),
    ],
)
def test_which_tensors_carry_the_batch(shape: tuple[int, ...], carries: bool) -> None:
    assert batchscale.carries_batch(shape, 8, PARAMS) is carries


def test_parameter_updates_do_not_grow() -> None:
    tasks = pd.DataFrame([_task(), _task(input_shapes="64,64;64,64", output_shapes="64,64")])
    assert list(batchscale.grows_with_batch(tasks, 8, PARAMS)) == [True, False]


def test_a_vector_kernel_on_few_cores_absorbs_the_batch_until_the_cores_run_out() -> None:
    tasks = pd.DataFrame([_task()])
    grows = np.array([True])
    # 4 blocks on 48 vector cores: x8 -> 32 blocks, each core's share unchanged
    (same,) = batchscale.scaled_durations(SPEC, tasks, grows, 8.0)
    per_core = SPEC.memory.gm_bytes_per_cycle_per_core * SPEC.cube.clock_hz
    bw = [min(SPEC.memory.effective_bandwidth, c * per_core) for c in (4, 32)]
    memory_then = 2_000 * 8 * bw[0] / bw[1]
    assert same == pytest.approx(2_000 + max(8_000, memory_then))
    # x24 -> 96 blocks on 48 cores: twice the work per core
    (double,) = batchscale.scaled_durations(SPEC, tasks, grows, 24.0)
    bw48 = min(SPEC.memory.effective_bandwidth, 48 * per_core)
    assert double == pytest.approx(2_000 + max(16_000, 2_000 * 24 * bw[0] / bw48))


def test_work_recorded_without_shapes_or_terms_grows_linearly() -> None:
    tasks = pd.DataFrame(
        [
            _task(input_shapes="", output_shapes="", input_dtypes="", output_dtypes=""),
            _task(vector_ns=0, memory_ns=0),
        ]
    )
    grows = batchscale.grows_with_batch(tasks, 8, PARAMS)
    assert list(grows) == [True, True]
    assert list(batchscale.scaled_durations(SPEC, tasks.iloc[1:], grows[1:], 3.0)) == [30_000]


def test_copies_grow_with_their_bytes_and_fixed_work_stays() -> None:
    tasks = pd.DataFrame([_task(kind="memcpy", task_type="DMA", op_type="MEMCPY_H2D"), _task()])
    out = batchscale.scaled_durations(SPEC, tasks, np.array([True, False]), 4.0)
    assert list(out) == [40_000, 10_000]


def test_a_convolution_is_recosted_by_the_gemm_tiling() -> None:
    x, w, y = (8, 16, 32, 32), (16, 16, 3, 3), (8, 16, 32, 32)
    m, n, k = 8 * 32 * 32, 16, 16 * 9
    nbytes = sum(math.prod(s) for s in (x, w, y)) * 2
    ratio = batchscale.gemm_growth(SPEC, "Conv2D", [x, w], [y], "float16", 32, 8, PARAMS)
    now = costmodel.matmul_cost(SPEC, m, n, k, dtype="float16", bytes_moved=nbytes)
    grown = sum(math.prod(s) * (32 if s[0] == 8 else 1) for s in (x, w, y)) * 2
    then = costmodel.matmul_cost(SPEC, m * 32, n, k, dtype="float16", bytes_moved=grown)
    assert ratio == pytest.approx(then.duration_ns / now.duration_ns)
    assert 1 < ratio < 32  # a larger GEMM tiles better than linearly


def test_the_weight_gradient_grows_along_k() -> None:
    go, x, w = (8, 16, 32, 32), (8, 16, 32, 32), (16, 16, 3, 3)
    ratio = batchscale.gemm_growth(
        SPEC, "Conv2DBackpropFilter", [go, x, w], [w], "float16", 4, 8, PARAMS
    )
    m, n, k = 16, 16 * 9, 8 * 32 * 32
    nbytes = sum(math.prod(s) for s in (go, x, w, w)) * 2
    grown = sum(math.prod(s) * (4 if s[0] == 8 else 1) for s in (go, x, w, w)) * 2
    now = costmodel.matmul_cost(SPEC, m, n, k, dtype="float16", bytes_moved=nbytes)
    then = costmodel.matmul_cost(SPEC, m, n, k * 4, dtype="float16", bytes_moved=grown)
    assert ratio == pytest.approx(then.duration_ns / now.duration_ns)


def test_a_matmul_without_a_batch_carrying_operand_has_no_gemm_growth() -> None:
    assert (
        batchscale.gemm_growth(
            SPEC, "MatMul", [(64, 64), (64, 64)], [(64, 64)], "float16", 2, 8, PARAMS
        )
        is None
    )


def test_value_reads_and_optimizer_work_never_grow() -> None:
    tasks = pd.DataFrame(
        [
            _task(
                kind="memcpy",
                task_type="DMA",
                input_shapes="",
                output_shapes="",
                input_dtypes="",
                output_dtypes="",
            ),  # a value read (.item())
            _task(host_op_id=7),  # batch-shaped, but launched inside Optimizer.step
            _task(
                host_op_id=8, input_shapes="", output_shapes="", input_dtypes="", output_dtypes=""
            ),  # a kernel described by nothing
            _task(host_op_id=9, input_shapes=";", output_shapes=""),  # 0-d tensors: a counter
        ]
    )
    grows = batchscale.grows_with_batch(tasks, 8, PARAMS, fixed_ops=np.array([7]))
    assert list(grows) == [False, False, True, False]
