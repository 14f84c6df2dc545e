"""Step boundaries: which marks end a step when a script marks steps itself."""

from __future__ import annotations

import pytest

from msprof_py.collectors.recorder import Recorder
from msprof_py.collectors.stepsource import parse_steps_from


class Rows:
    """A writer that keeps the appended rows."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {}

    def append(self, table: str, row: tuple) -> None:
        self.rows.setdefault(table, []).append(row)

    def flush(self) -> None:
        """The recorder flushes at the first step and then when due: nothing to do here."""

    def flush_if_due(self) -> None:
        """See :meth:`flush`."""


def steps_of(marks: list[tuple[str, int]], steps_from: str = "optimizer") -> list[tuple]:
    """The step rows (without the optimizer index) the marks make."""
    return [row[:4] for row in step_rows(marks, steps_from)]


def step_rows(marks: list[tuple[str, int]], steps_from: str = "optimizer") -> list[tuple]:
    writer = Rows()
    recorder = Recorder(writer, lambda: 0, steps_from=steps_from)  # type: ignore[arg-type]
    for source, now in marks:
        recorder.end_step(source, now)
    return writer.rows.get("steps", [])


def test_optimizer_marks_steps_when_the_script_does_not() -> None:
    marks = [("optimizer", 100), ("optimizer", 200)]
    assert steps_of(marks) == [(0, 0, 100, "optimizer"), (1, 100, 200, "optimizer")]


def test_an_explicit_mark_right_after_optimizer_step_leaves_no_sliver_step() -> None:
    """``optimizer.step(); msprof_py.step()`` in a loop: the first explicit mark confirms the
    boundary the optimizer just marked; from then on the explicit marks alone end steps."""
    marks = [
        ("optimizer", 100),
        ("msprof_py.step", 101),
        ("optimizer", 200),
        ("msprof_py.step", 201),
        ("optimizer", 300),
        ("msprof_py.step", 301),
    ]
    assert steps_of(marks) == [
        (0, 0, 100, "optimizer"),
        (1, 100, 201, "msprof_py.step"),
        (2, 201, 301, "msprof_py.step"),
    ]


def test_explicit_marks_alone() -> None:
    marks = [("torch_npu.profiler", 50), ("torch_npu.profiler", 90)]
    assert steps_of(marks) == [(0, 0, 50, "torch_npu.profiler"), (1, 50, 90, "torch_npu.profiler")]


GAN = [("optimizer#0", 100), ("optimizer#1", 150), ("optimizer#0", 300), ("optimizer#1", 350)]


def test_each_optimizer_step_ends_a_step_and_says_which_optimizer() -> None:
    assert step_rows(GAN) == [
        (0, 0, 100, "optimizer", 0),
        (1, 100, 150, "optimizer", 1),
        (2, 150, 300, "optimizer", 0),
        (3, 300, 350, "optimizer", 1),
    ]


def test_steps_from_one_optimizer_makes_one_step_per_iteration() -> None:
    assert step_rows(GAN, "1") == [(0, 0, 150, "optimizer", 1), (1, 150, 350, "optimizer", 1)]
    assert step_rows(GAN, "0") == [(0, 0, 100, "optimizer", 0), (1, 100, 300, "optimizer", 0)]


def test_steps_from_marks_ignores_the_optimizers() -> None:
    marks = [*GAN[:2], ("msprof_py.step", 160), *GAN[2:], ("msprof_py.step", 360)]
    assert steps_of(marks, "marks") == [
        (0, 0, 160, "msprof_py.step"),
        (1, 160, 360, "msprof_py.step"),
    ]


def test_steps_from_is_checked() -> None:
    for bad in ("optimiser", "-1", "1.5", ""):
        with pytest.raises(ValueError, match="--steps-from"):
            parse_steps_from(bad)
    assert parse_steps_from(" 2 ") == "2"
