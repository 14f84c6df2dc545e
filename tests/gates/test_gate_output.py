"""Gate outputs (Markdown within 1 MiB, JUnit XML) and diffs of hand-made figures."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from msprof_py.gates.check import check_absolute
from msprof_py.gates.diff import NotComparable, comparability, diff_figures
from msprof_py.gates.gate import GateResult
from msprof_py.gates.output import gate_junit, gate_markdown


def result_of(checks, figs) -> GateResult:
    return GateResult("runs/new", checks, {f.rank: f for f in figs}, warnings=["noisy <&>"])


def test_junit_has_one_case_per_metric_and_failures_with_messages(make_figures) -> None:
    ranks = [make_figures(), make_figures(rank=1, step_time_ms=12.0)]
    checks = [c for f in ranks for c in check_absolute(f, {"step_time_ms": 11.0}, {"Add": 2})]
    root = ET.fromstring(gate_junit(result_of(checks, ranks)))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "0")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "step_time_ms (rank 0)",
        "op_type_time_ms.Add (rank 0)",
        "step_time_ms (rank 1)",
        "op_type_time_ms.Add (rank 1)",
    ]
    failure = cases[2].find("failure")
    assert failure is not None
    assert failure.get("message") == "step_time_ms = 12 ms > limit 11 ms [rank 1]"
    assert all(c.find("failure") is None for i, c in enumerate(cases) if i != 2)
    assert suite.find("properties/property[@name='warning']").get("value") == "noisy <&>"


def test_markdown_lists_failures_first_and_escapes_pipes(make_figures) -> None:
    figs = make_figures(op_type_time_ms={"A|B": 5.0})
    checks = check_absolute(figs, {"step_time_ms": 20.0}, {"A|B": 1.0})
    text = gate_markdown(result_of(checks, [figs]))
    lines = text.splitlines()
    assert lines[0] == "## msprof gate: FAIL: 1 of 2 checks over budget"
    table = [line for line in lines if line.startswith("| `")]
    assert table[0].startswith("| `op_type_time_ms.A\\|B` | 5 ms | <= 1 ms | **FAIL**")
    assert table[1].startswith("| `step_time_ms` |")
    assert "> **Warning:** noisy \\<\\&\\>" in text  # no raw HTML in a job summary


def test_markdown_stays_under_the_limit_with_a_note(make_figures) -> None:
    long = "x" * 200  # long op type names: fewer rows fill 1 MiB
    figs = make_figures(op_type_time_ms={f"Op{i:05d}{long}": 1.0 for i in range(6_000)})
    limits = {name: 0.5 if i % 150 == 0 else 2.0 for i, name in enumerate(figs.op_type_time_ms)}
    checks = check_absolute(figs, {}, limits)
    text = gate_markdown(result_of(checks, [figs]))
    assert len(text.encode("utf-8")) <= 1024 * 1024
    assert "more rows left out to keep this summary under 1024 KiB" in text
    assert text.count("**FAIL**") == 40  # failures come first, so none is lost
    small = gate_markdown(result_of(checks, [figs]), limit=4096)
    assert len(small.encode("utf-8")) <= 4096 and "rows left out" in small


def test_diff_of_hand_made_figures(make_figures) -> None:
    base = {0: make_figures()}
    new = {0: make_figures(step_time_ms=12.5, op_type_time_ms={"MatMul": 3.0, "Mul": 0.5})}
    new[0].op_type_count_per_step.update({"Mul": 2.0})
    new[0].op_type_count_per_step.pop("Add")
    d = diff_figures(base, new)
    assert d.figures[0].metric == "step_time_ms"
    assert d.figure("step_time_ms").delta == pytest.approx(2.5)
    assert d.figure("step_time_ms").relative == pytest.approx(0.25)
    assert {o.op_type: o.status for o in d.op_types} == {
        "Add": "removed",
        "Mul": "added",
        "MatMul": "same",
    }
    assert [o.op_type for o in d.op_types] == ["Add", "Mul", "MatMul"]  # by |change of ms|
    assert d.changed and d.to_json()["op_types"][1]["relative"] is None


def test_incomparable_figures_are_refused_unless_forced(make_figures) -> None:
    base = {0: make_figures()}
    other = {0: make_figures(device="ascend910a", steps=5)}
    reasons, _ = comparability(base, other)
    assert len(reasons) == 2
    assert "ascend910b" in reasons[0] and "ascend910a" in reasons[0]
    assert "3 analysed steps" in reasons[1]
    with pytest.raises(NotComparable):
        diff_figures(base, other)
    forced = diff_figures(base, other, force=True)
    assert forced.warnings[:2] == reasons and not forced.changed
    with pytest.raises(NotComparable, match="different ranks"):
        diff_figures(base, {0: make_figures(), 1: make_figures(rank=1)})


def _rendered(d) -> str:
    import io

    from rich.console import Console

    from msprof_py.gates.output import render_diff

    out = io.StringIO()
    render_diff(d, Console(file=out, width=200))
    return out.getvalue()


def test_diff_values_read_as_numbers_with_units(make_figures) -> None:
    import re

    base = {0: make_figures()}
    # the copies grow from 1 KiB to 2 MiB a step (x2,048), utilisation drops 0.8 -> 0.725
    new = {0: make_figures(copy_bytes_per_step=2.0 * 2**20, utilization=0.725, sync_time_ms=0.75)}
    text = _rendered(diff_figures(base, new))
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    copy = [c.strip() for c in rows["copy_bytes_per_step"].split("│")[2:6]]
    assert copy == ["1.0 KiB", "2.0 MiB", "+2.0 MiB", "x2,048"]
    util = [c.strip() for c in rows["utilization"].split("│")[2:6]]
    assert util == ["80.0%", "72.5%", "-7.5 pp", "-9.4%"]
    sync = [c.strip() for c in rows["sync_time_ms"].split("│")[2:6]]
    assert sync == ["0.500 ms", "0.750 ms", "+0.250 ms", "+50.0%"]
    assert [c.strip() for c in rows["peak_memory_mb"].split("│")[2:6]] == [
        "1,000.0 MiB",
        "1,000.0 MiB",
        "0",
        "0%",
    ]
    assert not re.search(r"\de[+-]\d", text)  # no exponents anywhere
    assert not re.search(r"\d{5,}\.\d%", text)  # no six-digit percentages


def test_diff_ranks_the_times_by_how_much_they_moved(make_figures) -> None:
    base = {0: make_figures()}
    new = {
        0: make_figures(
            step_time_ms=10.1,  # +0.1 ms: still first, the headline
            exposed_copy_ms=0.4,  # +0.2 ms, +100%
            device_time_ms=9.0,  # +1.0 ms, +12.5%: the larger impact, despite the smaller %
            launches_per_step=300.0,  # +200%, no time: after every time
        )
    }
    order = [f.metric for f in diff_figures(base, new).figures]
    assert order[:4] == ["step_time_ms", "device_time_ms", "exposed_copy_ms", "communication_ms"]
    times = [m for m in order if m.endswith("_ms")]
    assert order[: len(times)] == times  # every time before any other figure
    assert order[len(times)] == "launches_per_step"


def test_diff_warns_when_the_profiles_ran_different_programs(make_figures) -> None:
    from msprof_py.gates.diff import program

    assert program("python train.py --lr 0.1") == "train.py"
    assert program("/usr/bin/python3 -m torch.distributed.run --nproc-per-node=2 a.py") == "a.py"
    assert program("torchrun --nproc-per-node=2 sample_runs/train_ddp.py --steps=4") == (
        "sample_runs/train_ddp.py"
    )
    assert program("python -m mypkg.train") == "-m mypkg.train"
    same = diff_figures(
        {0: make_figures(command="python train.py --lr 0.1")},
        {0: make_figures(command="python train.py --lr 0.2")},
    )
    assert same.warnings == []  # the same program with other arguments: what a diff is for
    other = diff_figures(
        {0: make_figures(command="python train.py")}, {0: make_figures(command="python eval.py")}
    )
    (warning,) = other.warnings
    assert warning.startswith("different programs: BASE ran train.py, NEW ran eval.py")
