"""low_utilisation proposes the largest batch that keeps peak memory within 80% of the
device's memory, capped at 256, with the throughput it models (hand-computed figures)."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder

from msprof_py.analyzers import context, engine
from msprof_py.analyzers.findings import FIRED, OK
from msprof_py.analyzers.rules_compute import RuleContext
from msprof_py.device.spec import DeviceSpec

USABLE = DeviceSpec.preset("ascend910b").memory.usable_bytes
GIB = 1024**3
STEP = 100_000


def run(batch: int, busy_ns: int, floor: int, activation: int):
    b = Builder().step(0, 0, STEP)
    copy = dict(start=0, end=100, kind="memcpy", copy_kind="HOST_TO_DEVICE", task_type="DMA")
    b.op(
        "aten::copy_",
        0,
        100,
        [copy | {"bytes": batch * 256 * 4}],
        input_shapes=f"{batch},256;{batch},256",
        input_dtypes="float32;float32",
    )
    kernel = dict(start=100, end=100 + busy_ns, task_type="AI_CORE", op_type="MatMul")  # busy
    b.op("aten::mm", 100, 1100, [kernel])
    b.mem(10, floor, floor)
    b.mem(5_000, floor + activation, floor + activation)
    data = context.prepare(b.build(), 0, warmup=0)
    return engine.run_rule("low_utilisation", RuleContext(data, {0: data}))


def test_memory_bound_batch() -> None:
    # floor + 3 x activation = 80% of usable memory: batch 32 -> 96
    act = GIB
    f = run(32, 10_000, int(0.8 * USABLE) - 3 * act, act)
    assert f.status == FIRED, f.message
    assert f.evidence["largest_batch_in_memory"] == 96 and f.evidence["best"] == 96
    # device work x3 = 30 us still under the 100 us step: the step stays, 3x the samples
    assert f.evidence["throughput_now"] == pytest.approx(32 / 100e-6)
    assert f.evidence["throughput"] == pytest.approx(96 / 100e-6)
    assert f.estimated_gain_us == pytest.approx(100 - 100 / 3, abs=1e-3)
    assert "Batch 96 is the largest" in f.message and "capped" not in f.message
    assert "to 96" in f.advice


def test_batch_capped_at_256_and_device_filling() -> None:
    # memory allows thousands; the proposal stops at 256 (8x); device work 40 us x 8 = 320 us
    f = run(32, 40_000, GIB, GIB)
    assert f.status == FIRED, f.message
    assert f.evidence["largest_batch_in_memory"] > 256 and f.evidence["best"] == 256
    assert "(capped at 256)" in f.message
    assert f.evidence["step_us"] == pytest.approx(320.0)
    assert f.evidence["throughput"] == pytest.approx(256 / 320e-6)
    assert f.evidence["speedup"] == pytest.approx((256 / 320) / (32 / 100))
    assert f.estimated_gain_us == pytest.approx(100 - 320 / 8)


def test_no_advice_at_the_cap_or_without_room() -> None:
    f = run(256, 10_000, GIB, GIB)
    assert f.status == OK and f.evidence["why"] == "at the cap"
    full = run(32, 10_000, int(0.8 * USABLE) - GIB // 64, GIB)
    assert full.status == OK and full.evidence["why"] == "no larger batch fits in memory"


def test_busy_device_gets_no_batch_advice() -> None:
    assert run(32, 90_000, GIB, GIB).status == OK
