"""Top-N ops by device time, host-op costs, and msprof's op_statistic table.

Device ops are the tasks of the analysed steps that occupy the device (kernels, copies,
memsets, collectives; event records and waits are not work). ``share_of_step`` is an op's total
device time over the analysed steps' total (host) step time; ``share_of_device`` over the total
device time of all ops.

Host ops: ``host_total_ns`` is the ops' spans (an op nested in another, as imported traces
record ``aten::addmm`` inside ``aten::linear``, counts in both); ``host_self_ns`` leaves out the
spans of the ops nested in each (summed over the table it counts every host nanosecond once).
The host table's ``share_of_step`` is of the self time, so that its rows add up: on one thread
they sum to at most 1 (the ops' share of the step), where shares of the spans would count a
nested op's time again in every op around it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import RankData, op_self_ns, share_of

WORK_KINDS = ("kernel", "memcpy", "memset", "collective")
STATS = ["count", "total_ns", "mean_ns", "min_ns", "max_ns"]
BY_TYPE_COLUMNS = ["rank", "op_type", "task_type", *STATS, "share_of_step", "share_of_device"]
BY_NAME_COLUMNS = [
    "rank",
    "name",
    "input_shapes",
    "input_dtypes",
    "op_type",
    "task_type",
    *STATS,
    "share_of_step",
]
HOST_COLUMNS = [
    "rank",
    "name",
    "count",
    "host_total_ns",
    "host_self_ns",
    "host_mean_ns",
    "host_max_ns",
    "launches",
    "launch_total_ns",
    "launch_mean_ns",
    "tasks",
    "device_total_ns",
    "share_of_step",
]
OP_STATISTIC_COLUMNS = ["rank", "op_type", "core_type", *STATS, "ratio"]


def work_tasks(data: RankData, columns: list[str] | None = None) -> pd.DataFrame:
    """The analysed tasks that are device work (only ``columns``, when given)."""
    tasks = data.tasks
    mask = tasks["kind"].isin(WORK_KINDS)
    return tasks[mask] if columns is None else tasks.loc[mask, columns]


def _stats(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = df.groupby(keys, sort=False, observed=True, dropna=False)["duration_ns"]
    out = g.agg(count="size", total_ns="sum", min_ns="min", max_ns="max").reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    return out.sort_values(["total_ns", *keys], ascending=[False] + [True] * len(keys))


def top_ops_by_type(data: RankData, n: int | None = 10) -> pd.DataFrame:
    """Op types (with the engine) by total device time."""
    work = work_tasks(data, ["op_type", "task_type", "duration_ns"])
    if work.empty:
        return pd.DataFrame(columns=BY_TYPE_COLUMNS)
    out = _stats(work, ["op_type", "task_type"])
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out["share_of_device"] = out["total_ns"] / max(1, int(work["duration_ns"].sum()))
    out.insert(0, "rank", data.rank)
    out = out[BY_TYPE_COLUMNS]
    return (out if n is None else out.head(n)).reset_index(drop=True)


def top_ops_by_name(data: RankData, n: int | None = 10) -> pd.DataFrame:
    """Ops by name and input shapes (and dtypes) by total device time."""
    keys = ["name", "input_shapes", "input_dtypes", "op_type", "task_type"]
    work = work_tasks(data, [*keys, "duration_ns"])
    if work.empty:
        return pd.DataFrame(columns=BY_NAME_COLUMNS)
    out = _stats(work, keys)
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out.insert(0, "rank", data.rank)
    out = out[BY_NAME_COLUMNS]
    return (out if n is None else out.head(n)).reset_index(drop=True)


def host_ops(data: RankData, n: int | None = 10) -> pd.DataFrame:
    """Host ops by host time: how long the op took on the host (its span, and its self time
    without the ops nested in it), its launches and device time; ``share_of_step`` is the
    self time's share of the steps' time (the rows of one thread sum to at most 1)."""
    host = data.host
    ops = data.host_ops
    if ops.empty:
        return pd.DataFrame(columns=HOST_COLUMNS)
    self_ns = op_self_ns(ops)
    ops = ops[["event_id", "name", "start_ns", "end_ns"]]
    ops = ops.assign(host_ns=ops["end_ns"] - ops["start_ns"], self_ns=self_ns)
    is_launch = ((host["kind"] == "launch") & (host["parent_id"] >= 0)).to_numpy()
    launch_op = host["parent_id"].to_numpy()[is_launch]
    launch_ns = (host["end_ns"] - host["start_ns"]).to_numpy()[is_launch]
    tasks = data.tasks
    linked = (tasks["host_op_id"] >= 0).to_numpy()
    task_op = tasks["host_op_id"].to_numpy()[linked]
    task_ns = tasks["duration_ns"].to_numpy()[linked]
    ids = pd.Index(ops["event_id"].to_numpy())
    if ids.is_unique:  # sums per op row: one hash of the op ids, no per-op tables
        size = len(ids)
        at = ids.get_indexer(launch_op)
        ok = at >= 0
        per_op = {
            "launches": np.bincount(at[ok], minlength=size),
            "launch_ns": np.bincount(at[ok], weights=launch_ns[ok], minlength=size),
        }
        at = ids.get_indexer(task_op)
        ok = at >= 0
        per_op["n_tasks"] = np.bincount(at[ok], minlength=size)
        per_op["device_ns"] = np.bincount(at[ok], weights=task_ns[ok], minlength=size)
    else:
        per_launch = pd.Series(launch_ns).groupby(launch_op).agg(["size", "sum"])
        per_task = pd.Series(task_ns).groupby(task_op).agg(["size", "sum"])
        per_op = {
            "launches": per_launch["size"].reindex(ids).fillna(0).to_numpy(),
            "launch_ns": per_launch["sum"].reindex(ids).fillna(0).to_numpy(),
            "n_tasks": per_task["size"].reindex(ids).fillna(0).to_numpy(),
            "device_ns": per_task["sum"].reindex(ids).fillna(0).to_numpy(),
        }
    ops = ops.assign(**per_op)
    g = ops.groupby("name", sort=False, observed=True)
    out = pd.DataFrame(
        {
            "count": g.size(),
            "host_total_ns": g["host_ns"].sum(),
            "host_self_ns": g["self_ns"].sum(),
            "host_max_ns": g["host_ns"].max(),
            "launches": g["launches"].sum().astype("int64"),
            "launch_total_ns": g["launch_ns"].sum().astype("int64"),
            "tasks": g["n_tasks"].sum().astype("int64"),
            "device_total_ns": g["device_ns"].sum().astype("int64"),
        }
    ).reset_index()
    out["host_mean_ns"] = out["host_total_ns"] / out["count"]
    out["launch_mean_ns"] = out["launch_total_ns"] / out["launches"].where(out["launches"] > 0)
    out["launch_mean_ns"] = out["launch_mean_ns"].fillna(0.0)
    out["share_of_step"] = share_of(out["host_self_ns"], data.step_time_ns)  # rows add up
    out.insert(0, "rank", data.rank)
    out = out.sort_values(["host_total_ns", "name"], ascending=[False, True])[HOST_COLUMNS]
    return (out if n is None else out.head(n)).reset_index(drop=True)


def op_statistic(data: RankData) -> pd.DataFrame:
    """msprof's op_statistic: per op type and core type, count and time, ratio of the total."""
    work = work_tasks(data, ["op_type", "task_type", "duration_ns"])
    if work.empty:
        return pd.DataFrame(columns=OP_STATISTIC_COLUMNS)
    out = _stats(work, ["op_type", "task_type"]).rename(columns={"task_type": "core_type"})
    out["ratio"] = out["total_ns"] / max(1, int(work["duration_ns"].sum()))
    out.insert(0, "rank", data.rank)
    return out[OP_STATISTIC_COLUMNS].reset_index(drop=True)
