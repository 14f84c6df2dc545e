"""The roofline table: every kernel with FLOPs and bytes, aggregated, cube kernels included."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder

from msprof_py.analyzers import analyze, compute, context

MM_FLOPS, MM_BYTES = 2 * 64**3, 3 * 64 * 64 * 2


def profile() -> Builder:
    """12 vector kernel groups of 20 us each and one 2 us cube matmul: the cube kernel is
    not among the ten longest groups."""
    b = Builder().step(0, 0, 1_000_000)
    t = 0
    for i in range(12):
        for _ in range(2):
            b.op("aten::add", t, t + 1_000, [dict(start=t, end=t + 10_000, flops=1000 * (i + 1),
                 bytes=4000, input_shapes=f"{1000 * (i + 1)}", input_dtypes="float32",
                 op_type="Add")])  # fmt: skip
            t += 10_000
    b.op("aten::mm", t, t + 1_000, [dict(start=t, end=t + 2_000, flops=MM_FLOPS, bytes=MM_BYTES,
         input_shapes="64,64;64,64", input_dtypes="float16;float16", op_type="MatMul",
         task_type="AI_CORE")])  # fmt: skip
    b.op("aten::fill_", t + 2_000, t + 3_000, [dict(start=t + 3_000, end=t + 4_000, flops=0,
         bytes=0, op_type="Fill")])  # fmt: skip
    return b


def test_roofline_holds_every_kernel_with_the_cube_visible() -> None:
    a = analyze(profile().build(), top=10)
    longest = a.compute_density["ops"]
    assert "MatMul" not in set(longest["op_type"])  # the top-10 table misses it
    roof = a.compute_density["roofline"]
    assert len(roof) == 13 and roof["count"].sum() == 25  # the Fill has no FLOPs
    (mm,) = roof[roof["op_type"] == "MatMul"].itertuples()
    assert mm.unit == "cube" and mm.count == 1
    assert mm.intensity == pytest.approx(MM_FLOPS / MM_BYTES)
    assert mm.achieved_tflops == pytest.approx(MM_FLOPS / 2_000 / 1e3)
    add = roof[roof["input_shapes"] == "3000"].iloc[0]
    assert (add["unit"], add["count"], add["flops"]) == ("vector", 2, 3000)
    assert add["intensity"] == pytest.approx(3000 / 4000)


def test_roofline_bins_when_there_are_too_many_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute, "ROOFLINE_POINTS", 5)
    data = context.prepare(profile().build(), 0, warmup=0)
    roof = compute.roofline(data)
    assert roof["count"].sum() == 25 and roof["groups"].sum() == 13
    assert roof["total_ns"].sum() == 24 * 10_000 + 2_000
    # Add group i (1..12): intensity i/4 FLOP/B and rate i/10 FLOP/ns; in half-octave bins
    # (floor(2 log2 x)) the pairs of bins are distinct but for i = 6, 7 / 8, 9 / 10, 11
    adds = roof[roof["op_type"] == "Add"]
    assert len(adds) == 9 and sorted(adds["groups"]) == [1] * 6 + [2] * 3
    assert (adds["input_shapes"].str.endswith("shapes)")).all()
    assert "cube" in set(roof["unit"])
