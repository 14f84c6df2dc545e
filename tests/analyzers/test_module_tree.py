"""The module tree and the flame graph table on a hand-built profile where every number is known.

Per step (two analysed steps, identical): forward ops A (block.proj, 10 us), V (a view in
block.proj, no kernel), B (block.act, 4 us), C (the top module, 2 us); backward ops, paired by
the autograd sequence numbers, F (node of A: 6 + 7 us), E (node of B: 5 us), D (node of C:
3 us); an optimizer op G outside any module (1 us) and a copy no host op launched (8 us).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from msprof_py.analyzers import analyze
from msprof_py.analyzers.flame import folded_text, write_folded
from msprof_py.analyzers.schema import to_json, write_csv
from tests.analyzers.analyze_helpers import Builder

US = 1000


def _kernel(start: int, us: int) -> dict:
    return {"start": start, "end": start + us * US}


def _profile() -> Builder:
    b = Builder()
    for step in (0, 1):
        t = step * 1_000_000
        seq = 100 * step
        dev = t + 500_000

        def op(name: str, kernels: list[int], step: int = step, **cols: object) -> None:
            nonlocal t, dev
            ks = []
            for us in kernels:
                ks.append(_kernel(dev, us))
                dev += us * US
            b.op(name, t, t + US, ks, step=step, **cols)
            t += 2 * US

        fwd = {"module": "Net/Block/Linear", "module_path": "block.proj"}
        op("aten::addmm", [10], sequence=seq + 11, **fwd)
        op("aten::view", [], sequence=seq + 11, **fwd)
        op("aten::relu", [4], sequence=seq + 12, module="Net/Block/ReLU", module_path="block.act")
        op("aten::mul", [2], sequence=seq + 13, module="Net", module_path="")
        # backward: no module on the stack, only the node's number
        op("aten::mul", [3], sequence=seq + 12)
        op("aten::threshold_backward", [5], sequence=seq + 11)
        op("aten::mm", [6, 7], sequence=seq + 10)
        op("aten::_foreach_add_", [1])
        b.task(dev, dev + 8 * US, kind="memcpy", task_type="MEMCPY", name="copy", step=step)
        b.step(step, step * 1_000_000, step * 1_000_000 + 900_000)
    return b


@pytest.fixture(scope="module")
def analysis():
    return analyze(_profile().build(), warmup=0)


def _row(tree: pd.DataFrame, module: str) -> pd.Series:
    return tree.set_index("module").loc[module]


def test_tree_rows_are_depth_first_in_execution_order(analysis) -> None:
    tree = analysis.modules["tree"]
    assert list(tree["module"]) == ["", "block", "block.proj", "block.act"]
    assert list(tree["depth"]) == [0, 1, 2, 2]
    assert list(tree["name"]) == ["Net", "block", "proj", "act"]
    assert list(tree["class_name"]) == ["Net", "Block", "Linear", "ReLU"]


def test_self_and_total_times_per_step_split_forward_and_backward(analysis) -> None:
    tree = analysis.modules["tree"]
    proj = _row(tree, "block.proj")
    assert proj["self_forward_ns"] == 10 * US
    assert proj["self_backward_ns"] == (6 + 7) * US
    assert (proj["ops_per_step"], proj["kernels_per_step"]) == (3, 3)
    act = _row(tree, "block.act")
    assert (act["self_forward_ns"], act["self_backward_ns"]) == (4 * US, 5 * US)
    block = _row(tree, "block")
    assert block["self_ns"] == 0
    assert block["total_forward_ns"] == 14 * US
    assert block["total_backward_ns"] == 18 * US
    assert block["total_ops_per_step"] == 5
    root = _row(tree, "")
    assert (root["self_forward_ns"], root["self_backward_ns"]) == (2 * US, 3 * US)
    assert root["self_other_ns"] == 1 * US
    assert root["total_ns"] == 38 * US
    assert tree["self_ns"].sum() == root["total_ns"]
    assert root["share_of_device"] == 1.0
    assert block["share_of_device"] == pytest.approx(32 / 38)
    assert root["total_kernels_per_step"] == 8  # A, B, C, D, E, F (2), G


def test_summary_splits_the_device_time_by_phase(analysis) -> None:
    (s,) = analysis.modules["summary"]
    assert s["device_ns_per_step"] == 38 * US
    assert s["forward_ns_per_step"] == 16 * US
    assert s["backward_ns_per_step"] == 21 * US
    assert s["other_ns_per_step"] == 1 * US
    assert s["unlinked_ns_per_step"] == 8 * US


def test_flame_table_falls_back_to_module_paths(analysis) -> None:
    flame = analysis.modules["flame"]
    assert set(flame["source"]) == {"modules"}
    by = dict(zip(flame["frames"], flame["device_ns"], strict=True))
    assert by["Net;block;proj;aten::addmm"] == 2 * 10 * US
    assert by["Net;block;proj;aten::mm (backward)"] == 2 * 13 * US
    assert by["Net;aten::_foreach_add_"] == 2 * US
    assert "Net;block;proj;aten::view" not in by  # no device time
    assert sum(by.values()) == 2 * 38 * US


def test_folded_text_lines_parse_and_sum_to_the_op_device_time(analysis, tmp_path) -> None:
    lines, source = write_folded(analysis, tmp_path / "out.folded")
    text = (tmp_path / "out.folded").read_text()
    assert source == "modules"
    assert len(text.splitlines()) == lines == len(analysis.modules["flame"])
    total = 0.0
    for line in text.splitlines():
        frames, value = line.rsplit(" ", 1)
        assert frames.split(";")[0] == "Net"
        total += float(value)
    assert total == pytest.approx(2 * 38)
    assert "Net;block;proj;aten::addmm 20\n" in text


def test_folded_values_keep_nanoseconds() -> None:
    table = pd.DataFrame(
        {"rank": [0, 1], "source": "modules", "frames": ["a;b", "a"], "device_ns": [1500, 2000]}
    )
    assert folded_text(table) == "rank 0;a;b 1.5\nrank 1;a 2\n"


def test_tree_is_in_json_and_csv(analysis, tmp_path) -> None:
    doc = json.loads(json.dumps(to_json(analysis)))
    assert [r["module"] for r in doc["modules"]["tree"]] == ["", "block", "block.proj", "block.act"]
    assert doc["modules"]["summary"][0]["backward_ns_per_step"] == 21 * US
    files = {p.name for p in write_csv(analysis, tmp_path)}
    assert {"modules_tree.csv", "modules_flame.csv", "modules_summary.csv"} <= files


def test_profile_without_module_columns_has_a_root_only_tree() -> None:
    b = Builder()
    b.op("aten::add", 0, US, [_kernel(0, 4)])
    b.step(0, 0, 10 * US)
    tree = analyze(b.build()).modules["tree"]
    assert list(tree["module"]) == [""]
    assert list(tree["name"]) == ["(no module)"]
    assert tree["self_other_ns"].iloc[0] == 4 * US


def test_report_shows_the_tree_indented_in_tree_order() -> None:
    import re

    from msprof_py.report.build import build_html

    profile = _profile().build()
    html = build_html(profile, analyze(profile, warmup=0))
    section = html[html.index('<section id="modules">') : html.index('<section id="steps">')]
    cells = re.findall(r'<tr><td data-v="(\d+)">([^<]*)</td>', section)
    assert [(key, name) for key, name in cells] == [
        ("0000000", "Net"),
        ("0000001", "\u00a0\u00a0block"),
        ("0000002", "\u00a0\u00a0\u00a0\u00a0proj"),
        ("0000003", "\u00a0\u00a0\u00a0\u00a0act"),
    ]
    assert "Self backward (us)" in section
