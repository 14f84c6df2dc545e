"""Per side, the operator instances a comparison counts: one row per host op with its time.

On device, an op's time is the device time of the work tasks it launched (kernels, copies,
memsets, collectives: ``tasks.host_op_id``); tasks no host op launched count under their own
name. Without device work (a projection), an op's time is its host time, and the ops are
taken at the level an NPU run records them: the outermost op whose name the device side
launched work from (``aten::addmm``, not the ``aten::linear`` around it nor the
``aten::copy_`` inside it), and, outside those, the host's **leaf** ops (those that call no
other op on their thread).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers.modules import module_labels
from msprof_py.analyzers.ops import work_tasks
from msprof_py.compare.side import Side

RECORD_COLUMNS = ["op_id", "name", "input_shapes", "module", "module_path", "time_ns", "tasks"]


def _text(series: pd.Series) -> np.ndarray:
    return series.astype(object).fillna("").astype(str).to_numpy()


def _nesting_order(ops: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """``ops`` by thread, start and longest first (an enclosing op before what it calls):
    the order, and thread, start and end in it."""
    order = np.lexsort((-ops["end_ns"].to_numpy(), ops["start_ns"].to_numpy(), ops["thread"]))
    return (
        order,
        ops["thread"].to_numpy()[order],
        ops["start_ns"].to_numpy()[order],
        ops["end_ns"].to_numpy()[order],
    )


def leaf_mask(ops: pd.DataFrame) -> np.ndarray:
    """True for the host ops of ``ops`` that contain no other op of their thread."""
    if ops.empty:
        return np.zeros(0, dtype=bool)
    order, thread, start, end = _nesting_order(ops)
    nested_next = np.zeros(len(order), dtype=bool)
    nested_next[:-1] = (thread[1:] == thread[:-1]) & (start[1:] < end[:-1])
    leaf = np.empty(len(order), dtype=bool)
    leaf[order] = ~nested_next
    return leaf


def projection_mask(ops: pd.DataFrame, names: frozenset[str]) -> np.ndarray:
    """The host ops a projection counts: the outermost op named in ``names`` (the peer's
    device ops), and leaf ops inside no such op; every op once at most (no time counted
    twice)."""
    if not names:
        return leaf_mask(ops)
    if ops.empty:
        return np.zeros(0, dtype=bool)
    order, thread, start, end = _nesting_order(ops)
    named = np.isin(_text(ops["name"])[order], list(names))
    leaf = leaf_mask(ops)[order]
    keep = np.zeros(len(order), dtype=bool)
    stack: list[tuple[int, int, bool]] = []  # (thread, end, inside a named op)
    for i in range(len(order)):
        while stack and (stack[-1][0] != thread[i] or stack[-1][1] <= start[i]):
            stack.pop()
        inside = bool(stack) and stack[-1][2]
        keep[i] = not inside and (named[i] or leaf[i])
        stack.append((int(thread[i]), int(end[i]), inside or bool(named[i])))
    out = np.empty(len(order), dtype=bool)
    out[order] = keep
    return out


def device_op_names(side: Side) -> frozenset[str]:
    """The host op names ``side`` launched device work from."""
    rec = op_records(side)
    return frozenset(rec.loc[rec["op_id"] >= 0, "name"].astype(str))


def op_records(side: Side) -> pd.DataFrame:
    """The side's op instances (:data:`RECORD_COLUMNS`) over its compared steps."""
    cached = side.data.cache.get("compare_records")
    if cached is not None:
        return cached
    out = _device_records(side) if side.on_device else _host_records(side)
    side.data.cache["compare_records"] = out
    return out


def _frame(ops: pd.DataFrame, time_ns: np.ndarray, tasks: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op_id": ops["event_id"].to_numpy(dtype=np.int64),
            "name": _text(ops["name"]),
            "input_shapes": _text(ops["input_shapes"]),
            "module": _text(module_labels(ops)) if len(ops) else np.zeros(0, dtype=object),
            "module_path": _text(ops["module_path"]),
            "time_ns": np.asarray(time_ns, dtype=np.int64),
            "tasks": np.asarray(tasks, dtype=np.int64),
        },
        columns=RECORD_COLUMNS,
    )


def _host_records(side: Side) -> pd.DataFrame:
    ops = side.data.host_ops
    ops = ops[projection_mask(ops, side.peer_names)]
    host_ns = (ops["end_ns"] - ops["start_ns"]).clip(lower=0).to_numpy()
    return _frame(ops, host_ns, np.zeros(len(ops)))


def _device_records(side: Side) -> pd.DataFrame:
    data = side.data
    work = work_tasks(data, ["host_op_id", "name", "input_shapes", "duration_ns"])
    ops = data.all_host_ops
    linked = work["host_op_id"].to_numpy() >= 0
    per_op = work[linked].groupby("host_op_id", observed=True)["duration_ns"].agg(["sum", "size"])
    known = ops[ops["event_id"].isin(per_op.index)]
    sums = per_op.reindex(known["event_id"].to_numpy())
    frames = [_frame(known, sums["sum"].to_numpy(), sums["size"].to_numpy())]
    orphans = work[~linked | ~work["host_op_id"].isin(known["event_id"]).to_numpy()]
    if len(orphans):
        g = orphans.groupby(["name", "input_shapes"], observed=True, sort=False)
        agg = g["duration_ns"].agg(["sum", "size"]).reset_index()
        frames.append(
            pd.DataFrame(
                {
                    "op_id": -1,
                    "name": _text(agg["name"]),
                    "input_shapes": _text(agg["input_shapes"]),
                    "module": "",
                    "module_path": "",
                    "time_ns": agg["sum"].to_numpy(dtype=np.int64),
                    "tasks": agg["size"].to_numpy(dtype=np.int64),
                },
                columns=RECORD_COLUMNS,
            )
        )
    frames = [f for f in frames if len(f)] or frames[:1]
    return pd.concat(frames, ignore_index=True)
