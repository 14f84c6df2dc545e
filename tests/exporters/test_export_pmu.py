"""The modelled PMU columns of op_summary / kernel_details, against hand-computed values."""

from __future__ import annotations

import pandas as pd
import pytest

from msprof_py.analyzers.shapes import tensor_bytes
from msprof_py.device.spec import DeviceSpec
from msprof_py.exporters.pmu import PMU_HEADER, pmu_columns


def _task(**kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "kind": "kernel", "task_type": "AI_CORE", "dur_ns": 10_000, "cube_ns": 0,
        "vector_ns": 0, "memory_ns": 0, "block_dim": 4, "bytes": 1000,
        "output_shapes": "10,10", "output_dtypes": "float16",
    }  # fmt: skip
    row.update(kw)
    return row


def test_tensor_bytes() -> None:
    assert tensor_bytes("10,10;3", "float16;int64") == 200 + 24
    assert tensor_bytes("", "") == 0
    assert tensor_bytes("", "float32") == 4  # a 0-d tensor
    assert tensor_bytes("4", "nosuchtype") == 0


def test_cube_vector_and_other_rows() -> None:
    spec = DeviceSpec.preset("ascend910b")
    tasks = pd.DataFrame(
        [
            _task(cube_ns=6000, memory_ns=4000),  # 200 of 1000 bytes are the output
            _task(task_type="AI_VECTOR_CORE", vector_ns=3000, memory_ns=5000, bytes=400),
            _task(task_type="AI_CPU"),
            _task(kind="collective", task_type="HCCL"),
            _task(),  # a kernel of an older profile: no pipe times
        ]
    )
    pmu = pmu_columns(tasks, spec)
    assert list(pmu.columns) == PMU_HEADER
    cube = pmu.iloc[0]
    assert cube["aicore_time(us)"] == 10.0 and cube["aic_mac_time(us)"] == 6.0
    assert cube["aic_mac_ratio"] == 0.6
    assert cube["aic_mte2_time(us)"] == 3.2 and cube["aic_fixpipe_time(us)"] == 0.8
    assert cube["aic_scalar_time(us)"] == 4.0 and cube["aic_scalar_ratio"] == 0.4
    assert cube["aiv_time(us)"] == 0.0 and cube["aiv_vec_time(us)"] == 0.0
    assert cube["aic_total_cycles"] == round(10e-6 * spec.cube.clock_hz * 4)
    assert cube["cube_utilization(%)"] == pytest.approx(100 * 0.6 * 4 / spec.cube.cores, abs=1e-3)
    vec = pmu.iloc[1]  # output 200 of 400 bytes: stores half the HBM time
    assert vec["aicore_time(us)"] == 0.0 and vec["aic_mac_ratio"] == 0.0
    assert vec["aiv_time(us)"] == 10.0 and vec["aiv_vec_ratio"] == 0.3
    assert vec["aiv_mte2_time(us)"] == 2.5 and vec["aiv_mte3_time(us)"] == 2.5
    assert vec["aiv_scalar_time(us)"] == 5.0 and vec["cube_utilization(%)"] == 0.0
    for i in (2, 3, 4):
        assert set(pmu.iloc[i]) == {"N/A"}


def test_without_a_spec_cycles_are_na() -> None:
    pmu = pmu_columns(pd.DataFrame([_task(cube_ns=6000)]), None)
    assert pmu.iloc[0]["aic_total_cycles"] == "N/A"
    assert pmu.iloc[0]["cube_utilization(%)"] == "N/A"
    assert pmu.iloc[0]["aic_mac_ratio"] == 0.6
