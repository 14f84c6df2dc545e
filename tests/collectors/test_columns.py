"""Tasks and allocator events become columns when the writer flushes, not rows on the hot path.

Each test compares the chunk conversion with the row a task or memory event must give, written
out here field by field (the schema's column order), so a column out of place, a text rendered
from the wrong tuple or a record changed after it was emitted shows up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from msprof_py.collectors.columns import memory_columns, task_columns
from msprof_py.device.records import (
    MemoryAction,
    MemoryRecord,
    TaskKind,
    TaskRecord,
    TaskType,
)
from msprof_py.profile.schema import TABLES
from msprof_py.profile.writer import RawWriter

SHAPES = ((8, 16), (16,))
STATIC = {"op_state": "static"}


def _kernel(task_id: int, shapes: tuple = SHAPES, attrs: dict | None = STATIC) -> TaskRecord:
    return TaskRecord(
        task_id, 0, TaskKind.KERNEL, TaskType.AI_VECTOR_CORE, "aten::add", "Add", 8,
        100 + task_id, 200 + task_id, 260 + task_id, 3, 128.0, 1024,
        shapes, ("float16", "float16"), ("ND", "ND"), ((8, 16),), ("float16",), ("ND",),
        attrs, 11, 22, 33,
    )  # fmt: skip


def _copy(task_id: int) -> TaskRecord:
    return TaskRecord(
        task_id, 2, TaskKind.MEMCPY, TaskType.DMA, "aten::copy_", "MEMCPY_H2D", 0,
        10, 20, 90, 0, 0.0, 4096, attrs={"copy_kind": "HOST_TO_DEVICE", "pinned": True},
    )  # fmt: skip


def _collective(task_id: int) -> TaskRecord:
    attrs = {"collective": "allreduce", "algorithm": "ring", "world_size": 4,
             "notify_wait_ns": 750}  # fmt: skip
    return TaskRecord(
        task_id, 5, TaskKind.COLLECTIVE, TaskType.HCCL, "hcom_allReduce_", "allreduce", 0,
        1, 2, 3, 0, 0.0, 64, attrs=attrs,
    )  # fmt: skip


def _expected_task_row(t: TaskRecord, parent: int, step: int) -> tuple:
    """The tasks row of ``t``, field by field."""
    a = t.attrs or {}
    return (
        t.task_id, t.stream_id, t.kind.value, t.task_type.value, t.name, t.op_type,
        t.block_dim, t.launch_ns, t.start_ns, t.end_ns, t.wait_ns, t.flops, t.bytes,
        ";".join(",".join(map(str, s)) for s in t.input_shapes), ";".join(t.input_dtypes),
        ";".join(t.input_formats), ";".join(",".join(map(str, s)) for s in t.output_shapes),
        ";".join(t.output_dtypes), ";".join(t.output_formats),
        a.get("copy_kind", ""), a.get("pinned", False), a.get("collective", ""),
        a.get("algorithm", ""), a.get("world_size", 0), a.get("notify_wait_ns", 0),
        a.get("op_state", ""), t.cube_ns, t.vector_ns, t.memory_ns, parent, step,
    )  # fmt: skip


def _rows(columns: list[list]) -> list[tuple]:
    return list(zip(*columns, strict=True))


def test_task_columns_are_the_rows_of_each_record() -> None:
    # the same shape tuple object on several tasks (as the adapter hands it), an equal but
    # distinct one, another shape, no attributes, copies and collectives with their own
    entries = [
        (_kernel(0), 7, 1),
        (_kernel(1), 7, 1),
        (_kernel(2, shapes=((8, 16), (16,))), 8, 1),
        (_kernel(3, shapes=((4, 4, 4),), attrs=None), -1, 2),
        (_copy(4), 9, 2),
        (_collective(5), -1, 2),
        (_kernel(6, shapes=()), 10, 3),
    ]
    columns = task_columns(entries)
    assert len(columns) == len(TABLES["tasks"].columns)
    assert _rows(columns) == [_expected_task_row(*entry) for entry in entries]
    row = _rows(columns)[3]
    assert row[13] == "4,4,4" and row[19:26] == ("", False, "", "", 0, 0, "")
    assert _rows(columns)[5][21:25] == ("allreduce", "ring", 4, 750)


def test_no_tasks_give_empty_columns() -> None:
    assert task_columns([]) == [[] for _ in TABLES["tasks"].columns]
    assert memory_columns([]) == [[] for _ in TABLES["memory"].columns]


def test_memory_columns_are_the_rows_of_each_event() -> None:
    events = [
        (MemoryRecord(5, MemoryAction.SEGMENT_ALLOC, 0, 2 << 20, 0, 2 << 20, 0), 0),
        (MemoryRecord(6, MemoryAction.MALLOC, 512, 1024, 1024, 2 << 20, 1024, 1, "aten::mul"), 0),
        (MemoryRecord(9, MemoryAction.FREE, 512, 1024, 0, 2 << 20, 0, 1, "aten::mul"), 1),
    ]
    expected = [
        (m.time_ns, m.action.value, m.address, m.size, m.allocated, m.reserved, m.active,
         m.stream_id, m.tag, step)
        for m, step in events
    ]  # fmt: skip
    assert _rows(memory_columns(events)) == expected


def test_writer_converts_each_flushed_chunk(tmp_path: Path) -> None:
    """Chunks that fill up and the last partial chunk all go through the conversion, and
    the parts hold every row once, in order."""
    writer = RawWriter(tmp_path / "raw", {"rank": 0}, chunk_rows=4)
    writer.convert_at_flush("tasks", task_columns)
    entries = [(_kernel(i, attrs=None if i % 3 else STATIC), i, i // 4) for i in range(10)]
    for entry in entries:
        writer.append("tasks", entry)
    writer.append("steps", (0, 0, 100, "optimizer", 0))  # other tables keep plain rows
    writer.flush()
    parts = sorted((tmp_path / "raw").glob("tasks-*.parquet"))
    assert [p.name for p in parts] == [f"tasks-0000{i}.parquet" for i in range(3)]
    table = pq.read_table(parts[0]).to_pylist() + [
        row for p in parts[1:] for row in pq.read_table(p).to_pylist()
    ]
    names = [c.name for c in TABLES["tasks"].columns]
    assert [tuple(r[n] for n in names) for r in table] == [_expected_task_row(*e) for e in entries]
    assert writer.rows_written["tasks"] == 10 and writer.rows_written["steps"] == 1


def test_a_failing_conversion_stops_recording_not_the_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = RawWriter(tmp_path / "raw", {"rank": 0}, chunk_rows=2)

    def broken(entries: list) -> list[list]:
        raise ValueError("cannot convert")

    writer.convert_at_flush("tasks", broken)
    writer.append("tasks", (_kernel(0), -1, 0))
    writer.append("tasks", (_kernel(1), -1, 0))  # the chunk is full: flushed, and fails
    assert writer.failed == "cannot convert"
    assert "recording stopped: cannot convert" in capsys.readouterr().err


RECORDED = """
import sys, torch
from msprof_py.collectors.session import SessionConfig, start_session
from msprof_py.adapter import runtime
from msprof_py.device import TaskRecord, MemoryRecord
session = start_session(SessionConfig(output=sys.argv[1], export=False, deterministic=True))
rows = []
def snapshot(r):  # what each record holds when it is emitted
    if isinstance(r, TaskRecord):
        rows.append(("task", r.task_id, r.stream_id, r.name, r.start_ns, r.end_ns,
                     tuple(map(tuple, r.input_shapes)), tuple(r.output_dtypes),
                     dict(r.attrs or {})))
    elif isinstance(r, MemoryRecord):
        rows.append(("memory", r.time_ns, r.action.value, r.address, r.size, r.allocated))
runtime.state().npu.subscribe(snapshot)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
model = model.to("npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16).to("npu", non_blocking=True)
for _ in range(3):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print(session.stop())
import json, pathlib
pathlib.Path(sys.argv[2]).write_text(json.dumps(rows))
"""


def test_recorded_tasks_and_memory_hold_what_each_record_said_when_emitted(
    tmp_path: Path,
) -> None:
    """A record is converted long after it was emitted: the flushed rows must still be what
    the device said at the time (nothing the adapter or engine changes later leaks in)."""
    import json

    from msprof_py.profile import load

    snapshot = tmp_path / "emitted.json"
    proc = subprocess.run(
        [sys.executable, "-c", RECORDED, str(tmp_path / "out"), str(snapshot)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    profile = load(Path(proc.stdout.strip().splitlines()[-1]))
    emitted = json.loads(snapshot.read_text())
    tasks = profile.tasks.sort_values("task_id")
    want_tasks = [r for r in emitted if r[0] == "task"]
    assert len(tasks) == len(want_tasks) > 20
    for (_, task_id, stream, name, start, end, shapes, dtypes, attrs), row in zip(
        want_tasks, tasks.itertuples(), strict=True
    ):
        assert (row.task_id, row.stream_id, row.name) == (task_id, stream, name)
        assert (row.start_ns, row.end_ns) == (start, end)
        assert row.input_shapes == ";".join(",".join(map(str, s)) for s in shapes)
        assert row.output_dtypes == ";".join(dtypes)
        assert row.copy_kind == attrs.get("copy_kind", "")
        assert row.op_state == attrs.get("op_state", "")
    want_memory = [tuple(r[1:]) for r in emitted if r[0] == "memory"]
    memory = profile.memory
    columns = ["time_ns", "action", "address", "size", "allocated"]
    got = list(memory[columns].itertuples(index=False, name=None))
    assert got == want_memory and len(got) > 10
