"""Device records to raw-profile columns, a whole chunk at a time.

The recorder keeps each task and memory event as the record the device emitted, with the host
op and step it belongs to, and the writer turns a chunk of them into columns when it flushes
(:meth:`~msprof_py.profile.writer.RawWriter.convert_at_flush`): one list comprehension per
column instead of a Python tuple, enum look-ups and text joins per record while the profiled
program waits. A training loop repeats the same shapes, and the adapter hands the device the
same tuple objects for them, so the text of a shape or dtype tuple is rendered once per object
in a chunk (keyed by identity: every record of the chunk, and so every tuple, is alive while
it is converted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from msprof_py.device.records import MemoryAction, MemoryRecord, TaskKind, TaskRecord, TaskType

__all__ = [
    "MemoryEntry",
    "TaskEntry",
    "attr_fields",
    "memory_columns",
    "shape_text",
    "task_columns",
]

#: what the recorder keeps per task: the record, the host op that launched it, the step
TaskEntry = tuple[TaskRecord, int, int]
#: what the recorder keeps per allocator event: the record and the step
MemoryEntry = tuple[MemoryRecord, int]

_KIND_TEXT = {kind: kind.value for kind in TaskKind}
_TYPE_TEXT = {task_type: task_type.value for task_type in TaskType}
_ACTION_TEXT = {action: action.value for action in MemoryAction}

#: the attribute columns of a task without attributes (most kernels)
_NO_ATTRS = ("", False, "", "", 0, 0, "")


def shape_text(shapes: Sequence[Sequence[int]]) -> str:
    """Shapes as torch_npu writes them: ``"2,3;4"``."""
    return ";".join(",".join(str(d) for d in shape) for shape in shapes)


def _joined(names: Sequence[str]) -> str:
    return ";".join(names)


def attr_fields(attrs: dict[str, object] | None) -> tuple[str, bool, str, str, int, int, str]:
    """The attribute columns of a task row: copy kind, pinned, collective, algorithm, world
    size, notify wait, op state."""
    if not attrs:
        return _NO_ATTRS
    return (
        str(attrs.get("copy_kind", "")),
        bool(attrs.get("pinned", False)),
        str(attrs.get("collective", "")),
        str(attrs.get("algorithm", "")),
        int(attrs.get("world_size", 0)),
        int(attrs.get("notify_wait_ns", 0)),
        str(attrs.get("op_state", "")),
    )


def _by_identity(values: list[Any], render: Callable[[Any], Any]) -> list[Any]:
    """``[render(v) for v in values]``, rendering each distinct object once (``values`` holds
    every object while this runs, so no id is reused meanwhile)."""
    done: dict[int, Any] = {}
    out = []
    append = out.append
    for value in values:
        key = id(value)
        text = done.get(key)
        if text is None:
            text = done[key] = render(value)
        append(text)
    return out


def task_columns(entries: list[TaskEntry]) -> list[list]:
    """The ``tasks`` table's columns (schema order) for a chunk of recorded tasks."""
    records = [entry[0] for entry in entries]
    attrs = list(zip(*_by_identity([r.attrs for r in records], attr_fields), strict=True))
    if not attrs:
        attrs = [[] for _ in _NO_ATTRS]
    return [
        [r.task_id for r in records],
        [r.stream_id for r in records],
        [_KIND_TEXT[r.kind] for r in records],
        [_TYPE_TEXT[r.task_type] for r in records],
        [r.name for r in records],
        [r.op_type for r in records],
        [r.block_dim for r in records],
        [r.launch_ns for r in records],
        [r.start_ns for r in records],
        [r.end_ns for r in records],
        [r.wait_ns for r in records],
        [r.flops for r in records],
        [r.bytes for r in records],
        _by_identity([r.input_shapes for r in records], shape_text),
        _by_identity([r.input_dtypes for r in records], _joined),
        _by_identity([r.input_formats for r in records], _joined),
        _by_identity([r.output_shapes for r in records], shape_text),
        _by_identity([r.output_dtypes for r in records], _joined),
        _by_identity([r.output_formats for r in records], _joined),
        *(list(column) for column in attrs),
        [r.cube_ns for r in records],
        [r.vector_ns for r in records],
        [r.memory_ns for r in records],
        [entry[1] for entry in entries],
        [entry[2] for entry in entries],
    ]


def memory_columns(entries: list[MemoryEntry]) -> list[list]:
    """The ``memory`` table's columns (schema order) for a chunk of allocator events."""
    records = [entry[0] for entry in entries]
    return [
        [r.time_ns for r in records],
        [_ACTION_TEXT[r.action] for r in records],
        [r.address for r in records],
        [r.size for r in records],
        [r.allocated for r in records],
        [r.reserved for r in records],
        [r.active for r in records],
        [r.stream_id for r in records],
        [r.tag for r in records],
        [entry[1] for entry in entries],
    ]
