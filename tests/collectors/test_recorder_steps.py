"""Step boundaries: which marks end a step when a script marks steps itself."""

from __future__ import annotations

from msprof_py.collectors.recorder import Recorder


class Rows:
    """A writer that keeps the appended rows."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {}

    def append(self, table: str, row: tuple) -> None:
        self.rows.setdefault(table, []).append(row)


def steps_of(marks: list[tuple[str, int]]) -> list[tuple]:
    writer = Rows()
    recorder = Recorder(writer, lambda: 0)  # type: ignore[arg-type]
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
