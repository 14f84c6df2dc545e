"""Interval arithmetic, shape strings and step windows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analyze_helpers import Builder, steps

from msprof_py.analyzers import context, intervals, shapes


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_difference_and_intersect() -> None:
    a = (arr(0, 20), arr(10, 30))
    b = (arr(5, 25), arr(8, 40))
    s, e = intervals.difference(a, b)
    assert list(zip(s, e, strict=True)) == [(0, 5), (8, 10), (20, 25)]
    s, e = intervals.intersect(arr(0, 20), arr(10, 30), arr(5, 25), arr(8, 40))
    assert list(zip(s, e, strict=True)) == [(5, 8), (25, 30)]
    s, e = intervals.difference(a, (arr(), arr()))
    assert list(zip(s, e, strict=True)) == [(0, 10), (20, 30)]


def test_coverage_queries() -> None:
    cover = intervals.Coverage(arr(0, 5, 20), arr(10, 8, 30))  # overlapping spans merge
    assert cover.total == 20
    assert list(cover.within(arr(0, 5, 15, 25), arr(30, 25, 18, 40))) == [20, 10, 0, 5]
    assert list(cover.contains(arr(-1, 0, 9, 10, 20, 30))) == [
        False,
        True,
        True,
        False,
        True,
        False,
    ]
    empty = intervals.Coverage(arr(), arr())
    assert empty.total == 0 and list(empty.within(arr(0), arr(5))) == [0]


def test_assign_to_windows() -> None:
    got = intervals.assign(arr(-1, 0, 9, 10, 25), arr(0, 10), arr(10, 20))
    assert list(got) == [-1, 0, 0, 1, -1]


def test_shape_strings() -> None:
    assert shapes.parse("8,10;;4", "float32;int64;float32") == [(8, 10), (), (4,)]
    assert shapes.parse("", "float32") == [()]
    assert shapes.parse("", "") == []
    import pandas as pd

    m = shapes.numel_matrix(pd.Series(["8,10;4", "", "2,3"]), pd.Series(["a;b", "", "c"]), width=3)
    assert m.tolist() == [[80, 4, -1], [-1, -1, -1], [6, -1, -1]]
    assert shapes.first_dim(pd.Series(["8,3,32,32;16", "", "5"])).tolist() == [8, -1, 5]
    assert shapes.itemsizes(pd.Series(["float16;float32", "int64", "weird"])).tolist() == [2, 8, 4]


def test_steps_leave_out_the_warmup_step_and_the_tail() -> None:
    b = steps(Builder(), 3, 1000)
    b.step(3, 3000, 3500, source="end of run")
    for i in range(4):
        b.task(i * 1000 + 100, i * 1000 + 200, step=i)
    data = context.prepare(b.build(), 0)
    assert data.steps["step"].tolist() == [1, 2]
    assert data.warmup_skipped == [0]
    assert set(data.tasks["step"]) == {1, 2}
    assert data.step_time_ns == 2000
    assert context.prepare(b.build(), 0, warmup=0).steps["step"].tolist() == [0, 1, 2]


def test_steps_derived_from_tasks_without_a_steps_table() -> None:
    b = Builder()
    b.task(100, 400, step=0)
    b.task(1000, 1500, step=1)
    data = context.prepare(b.build(), 0, warmup=0)
    assert data.step_source == "task step numbers"
    assert data.steps[["step", "start_ns", "end_ns"]].values.tolist() == [
        [0, 100, 400],
        [1, 1000, 1500],
    ]


def test_whole_run_without_any_step() -> None:
    b = Builder()
    b.task(100, 400, step=-1)
    data = context.prepare(b.build(), 0)
    assert data.step_source == "whole run (no steps)"
    assert data.step_time_ns == 300 and len(data.tasks) == 1


def test_unknown_device_spec_is_reported_not_raised() -> None:
    data = context.prepare(steps(Builder(device="no-such-npu"), 1, 1000).build(), 0)
    assert data.spec is None and "no-such-npu" in data.spec_error


@pytest.mark.parametrize("n", [0, 1])
def test_empty_profiles_prepare(n: int) -> None:
    data = context.prepare(steps(Builder(), n, 1000).build(), 0)
    assert data.tasks.empty


def test_a_run_without_step_marks_says_how_to_mark_them() -> None:
    """A loop with no optimizer.step() (a manual SGD update, as the word language model
    example does) records no step boundary: the analysis says the run is one step and how
    to mark steps; a run with steps does not get the note."""
    from msprof_py.analyzers import analyze

    unmarked = Builder()
    unmarked.op("aten::mm", 0, 1_000, [{"start": 2_000, "end": 9_000, "op_type": "MatMul"}])
    notes = analyze(unmarked.build()).profile["notes"]
    assert any("no step boundary was recorded" in n and "msprof_py.step()" in n for n in notes)
    marked = steps(Builder(), 2, 10_000)
    marked.op("aten::mm", 0, 1_000, [{"start": 2_000, "end": 9_000, "op_type": "MatMul"}])
    notes = analyze(marked.build()).profile["notes"]
    assert not any("no step boundary" in n for n in notes)


def test_a_per_rank_table_is_computed_once_and_each_caller_owns_its_copy() -> None:
    """``context.per_rank`` computes a derived table once per rank's data and arguments; a
    caller adding a column or changing a value in what it got changes nothing the next
    caller gets; another rank's data computes its own."""
    calls: list[tuple] = []

    @context.per_rank
    def table(data: context.RankData, scale: int = 1) -> pd.DataFrame:
        calls.append((data.rank, scale))
        return pd.DataFrame({"t": data.tasks["duration_ns"] * scale})

    data = context.prepare(steps(Builder(), 3, 1000).build(), 0)
    b = steps(Builder(), 3, 1000)
    b.task(100, 400, step=1)
    other = context.prepare(b.build(), 0)
    first = table(data)
    first["extra"] = 1
    first.loc[:, "t"] = -5
    again = table(data)
    assert list(again.columns) == ["t"] and not (again["t"] == -5).any()
    assert table(data, 2) is not again and table(data, scale=2).equals(table(data, 2))
    assert len(table(other)) == 1
    assert calls == [(0, 1), (0, 2), (0, 2), (0, 1)]  # positional and keyword: two keys
