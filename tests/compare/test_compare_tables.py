"""msprof compare's tables on hand-built runs whose every number is known
(compare_helpers: BASE and NEW differ by a faster matmul and a gelu instead of a conv)."""

from __future__ import annotations

import pytest
from compare_helpers import MM_SHAPES, host_only_run, run

from msprof_py.compare import PROJECTION_LABEL, CompareError, compare
from msprof_py.compare.names import (
    CONV,
    FLASH_ATTENTION,
    MATMUL,
    OpNameMapError,
    family,
    is_backward,
    parse_op_name_map,
)


def _overall(result) -> dict[str, dict]:
    return {row["index"]: row for row in result.overall.to_dict(orient="records")}


def test_overall_split_per_step() -> None:
    rows = _overall(compare(run("base"), run("new")))
    expected = {  # (base ms, new ms) per step
        "MatMul": (0.010, 0.006),
        "Conv (Forward)": (0.008, 0.0),
        "Vector": (0.004, 0.007),
        "Computing Time": (0.022, 0.013),  # the kernels run back to back
        "Uncovered Communication Time": (0.006, 0.006),
        "Free Time": (0.072, 0.081),
        "E2E Time": (0.100, 0.100),
        "Flash Attention (Forward)": (0.0, 0.0),
        "Other Cube": (0.0, 0.0),
    }
    for index, (base_ms, new_ms) in expected.items():
        row = rows[index]
        assert row["base_duration_ms"] == pytest.approx(base_ms), index
        assert row["new_duration_ms"] == pytest.approx(new_ms), index
        assert row["diff_duration_ms"] == pytest.approx(new_ms - base_ms), index
    assert rows["MatMul"]["base_ratio"] == pytest.approx(0.10)
    assert rows["MatMul"]["diff_ratio"] == pytest.approx(0.6)
    assert rows["Vector"]["new_number"] == 2 and rows["Vector"]["base_number"] == 1
    for side in ("base", "new"):  # computing + uncovered communication + free == E2E
        parts = ("Computing Time", "Uncovered Communication Time", "Free Time")
        total = sum(rows[p][f"{side}_duration_ms"] for p in parts)
        assert total == pytest.approx(rows["E2E Time"][f"{side}_duration_ms"])


def test_operators_matched_and_ranked_by_change() -> None:
    ops = compare(run("base"), run("new")).operators
    got = [
        (r["base_name"], r["new_name"], r["diff_time_us"], r["match"]) for _, r in ops.iterrows()
    ]
    assert got[:3] == [
        ("aten::convolution", "", -8.0, "base only"),
        ("aten::mm", "aten::mm", -4.0, "name+shapes"),
        ("", "aten::gelu", 3.0, "new only"),
    ]
    assert sorted(g[0] for g in got[3:]) == ["aten::add", "c10d::allreduce_"]
    assert all(g[2] == 0 for g in got[3:])
    mm = ops[ops["base_name"] == "aten::mm"].iloc[0]
    assert (mm["base_time_us"], mm["new_time_us"], mm["base_count"]) == (10.0, 6.0, 1.0)
    assert mm["base_input_shapes"] == MM_SHAPES


def test_family_match_and_op_name_map() -> None:
    renamed = run("new", mm_name="aten::addmm")
    ops = compare(run("base"), renamed).operators
    row = ops[ops["base_name"] == "aten::mm"].iloc[0]
    assert (row["new_name"], row["match"], row["diff_time_us"]) == (
        "aten::addmm",
        "family+shapes",
        -4.0,
    )
    mapped = compare(run("base"), renamed, op_name_map={"aten::mm": "aten::addmm"}).operators
    row = mapped[mapped["base_name"] == "aten::addmm"].iloc[0]
    assert (row["new_name"], row["match"]) == ("aten::addmm", "name+shapes")
    stats = compare(run("base"), renamed).operator_statistic
    assert stats.iloc[0]["operator"] == "aten::convolution"
    assert "aten::mm = aten::addmm" in set(stats["operator"])


def test_modules_memory_communication() -> None:
    result = compare(run("base"), run("new"))
    mods = result.modules.set_index("module")
    assert mods.loc["(top)", "base_total_us"] == pytest.approx(28.0)
    assert mods.loc["(top)", "new_total_us"] == pytest.approx(19.0)
    assert mods.loc["conv", "diff_self_us"] == pytest.approx(-8.0)
    assert mods.loc["act", "new_self_us"] == pytest.approx(7.0)
    assert mods.loc["fc", "module_class"] == "Linear"
    mem = result.memory.iloc[0]
    assert (mem["operator"], mem["base_size_kb"], mem["new_size_kb"]) == ("aten::mm", 4.0, 2.0)
    peaks = result.memory_statistic.set_index("index")
    assert peaks.loc["Peak Allocated", "base_mb"] == pytest.approx(4096 / 2**20)
    assert peaks.loc["Peak Reserved", "diff_mb"] == 0
    comm = result.communication.iloc[0]
    assert (comm["collective"], comm["base_calls"], comm["base_avg_us"]) == ("allreduce", 1, 6.0)
    assert comm["base_mb"] == 1.0 and comm["diff_time_ms"] == 0


def test_one_step_each() -> None:
    result = compare(run("base"), run("new"), base_step=2, new_step=1)
    assert result.base.steps == [2] and result.new.steps == [1]
    assert _overall(result)["MatMul"]["diff_duration_ms"] == pytest.approx(-0.004)
    with pytest.raises(CompareError, match="BASE has no step 7 \\(steps: 1-2\\)"):
        compare(run("base"), run("new"), base_step=7)
    with pytest.raises(CompareError, match="no rank 3"):
        compare(run("base"), run("new"), rank=3)


def test_host_only_base_is_a_projection() -> None:
    result = compare(host_only_run(), run("new", mm_name="aten::addmm"))
    assert result.projection and result.label == PROJECTION_LABEL
    assert result.to_json()["mode"] == "projection"
    assert any("BASE has no device tasks" in w for w in result.warnings)
    rows = _overall(result)
    # leaf ops only: aten::t 1 us, aten::addmm 15 us, aten::relu 5 us (not aten::linear)
    assert rows["MatMul"]["base_duration_ms"] == pytest.approx(0.015)
    assert rows["Computing Time"]["base_duration_ms"] == pytest.approx(0.021)
    assert rows["Free Time"]["base_duration_ms"] == pytest.approx(0.079)
    ops = result.operators
    assert "aten::linear" not in set(ops["base_name"])
    addmm = ops[ops["base_name"] == "aten::addmm"].iloc[0]
    assert (addmm["base_time_us"], addmm["new_time_us"]) == (15.0, 6.0)
    assert result.modules.empty  # the CPU trace has no module paths


def test_different_programs_warn() -> None:
    result = compare(run("base"), run("new", command="python other.py"))
    assert any("different programs" in w for w in result.warnings)
    assert not compare(run("base"), run("new")).warnings


@pytest.mark.parametrize(
    ("text", "fam"),
    [
        ("MatMulV2", MATMUL),
        ("ampere_sgemm_128x64_nn", MATMUL),
        ("volta_sgemm_64x32_sliced1x4_tn", MATMUL),
        ("aten::addmm", MATMUL),
        ("aten::mm", MATMUL),
        ("Conv2DBackpropInput", CONV),
        ("aten::convolution", CONV),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_tf32", CONV),
        ("cudnn::detail::implicit_convolve_sgemm", CONV),
        ("FlashAttentionScore", FLASH_ATTENTION),
        ("aten::_scaled_dot_product_flash_attention", FLASH_ATTENTION),
        ("pytorch_flash::flash_fwd_kernel", FLASH_ATTENTION),
        ("aten::add", ""),
        ("vectorized_elementwise_kernel", ""),
    ],
)
def test_families(text: str, fam: str) -> None:
    assert family(text) == fam


def test_backward_names() -> None:
    assert is_backward("FlashAttentionScoreGrad") and is_backward("", "aten::convolution_backward")
    assert not is_backward("Conv2D", "aten::convolution")


def test_op_name_map_entries(tmp_path) -> None:
    text = tmp_path / "map.txt"
    text.write_text("# CUDA -> NPU\naten::addmm = aten::mm\n\nvolta_sgemm=MatMulV2\n")
    js = tmp_path / "map.json"
    js.write_text('{"a": "b"}')
    got = parse_op_name_map(["x=y,p=q", str(text), str(js)])
    assert got == {
        "x": "y",
        "p": "q",
        "aten::addmm": "aten::mm",
        "volta_sgemm": "MatMulV2",
        "a": "b",
    }
    with pytest.raises(OpNameMapError, match="no such file"):
        parse_op_name_map([str(tmp_path / "missing")])
    with pytest.raises(OpNameMapError, match="expected a=b"):
        parse_op_name_map(["a="])
    bad = tmp_path / "bad.txt"
    bad.write_text("just a name\n")
    with pytest.raises(OpNameMapError, match="line 1"):
        parse_op_name_map([str(bad)])


def test_a_projection_takes_host_ops_at_the_level_the_device_run_records_them() -> None:
    """aten::linear wraps aten::t and aten::addmm, which wraps an aten::copy_; the device run
    launched work from aten::t and aten::addmm: those two count, once each (not the linear
    around them, nor the copy inside addmm); a leaf outside them (aten::relu) counts too."""
    import pandas as pd

    from msprof_py.compare.records import leaf_mask, projection_mask

    ops = pd.DataFrame(
        {
            "name": ["aten::linear", "aten::t", "aten::addmm", "aten::copy_", "aten::relu"],
            "start_ns": [0, 0, 10, 20, 100],
            "end_ns": [100, 10, 90, 30, 120],
            "thread": [1, 1, 1, 1, 1],
        }
    )
    picked = projection_mask(ops, frozenset({"aten::t", "aten::addmm", "aten::relu"}))
    assert list(ops["name"][picked]) == ["aten::t", "aten::addmm", "aten::relu"]
    # without peer names: the leaf ops
    assert list(ops["name"][leaf_mask(ops)]) == ["aten::t", "aten::copy_", "aten::relu"]
    assert list(projection_mask(ops, frozenset())) == list(leaf_mask(ops))
