"""The profile schema: one definition of every table, and neutral rows for hand-built profiles."""

from __future__ import annotations

import pyarrow as pa

from msprof_py.profile.schema import NO_ID, TABLES, default_row


def test_default_rows_fit_their_schema() -> None:
    for name, table in TABLES.items():
        row = default_row(name)
        assert list(row) == table.names
        arrow = pa.Table.from_pylist([row], schema=table.schema)  # types must fit
        assert arrow.num_rows == 1


def test_default_row_values() -> None:
    task = default_row("tasks")
    assert task["host_op_id"] == NO_ID and task["step"] == NO_ID and task["task_id"] == NO_ID
    assert task["stream_id"] == 0 and task["flops"] == 0.0 and task["pinned"] is False
    assert task["name"] == ""
    assert default_row("host_events")["sequence"] == NO_ID
