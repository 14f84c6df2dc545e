"""The Ascend CSV tables: torch_npu ``ASCEND_PROFILER_OUTPUT``, CANN ``mindstudio_profiler_output``.

Each function returns a DataFrame whose columns are exactly the file's header; values come
from the profile (durations: the tasks' ``end - start`` in µs; absolute times: exact µs text).
Columns we cannot fill with real values are left out rather than faked: no ``HF32 Eligible``,
no ``Context ID``, no call stacks. The PMU columns (``aicore_time(us)``, ``aic_mac_ratio`` ...)
are the cost model's pipe times, not counters (:mod:`msprof_py.exporters.pmu`).

Choices worth knowing:

* op_summary and kernel_details hold compute kernels and collectives. Their block columns are
  ``Block Dim`` / ``Mix Block Dim`` (the names msprof-analyze's block-dim check reads; current
  CANN names them ``Block Num`` / ``Mix Block Num``). ``Mix Block Dim`` of a MIX_AIC task is
  its vector block count (2 AIV per AIC group), 0 otherwise.
* ``OP State`` is the kernel's compile state (:mod:`msprof_py.adapter.compile_cache`):
  ``dynamic`` for a prebuilt binary kernel tiled at run time (``jit_compile=False``, the A2/A3
  default), ``static`` for a kernel compiled online for its shapes (``jit_compile=True``) and
  for kernels of profiles recorded before the state was; collectives have ``N/A``.
* Shapes are written as torch_npu writes them, in literal double quotes (``"8,3;16"``).
* ``Step Id`` / ``Step`` is the profile's step the task's launch belongs to.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from msprof_py.analyzers.context import load_spec
from msprof_py.exporters import naming
from msprof_py.exporters.frames import ExportData
from msprof_py.exporters.overlap import STEP_TRACE_COLUMNS, step_breakdown
from msprof_py.exporters.pmu import PMU_HEADER, pmu_columns
from msprof_py.exporters.runinfo import NO_MODEL_ID, us
from msprof_py.exporters.trace_events import (
    SLICE_ROWS,
    Text,
    concat,
    jint,
    series,
    text,
    utf8_bytes,
)
from msprof_py.profile.atomic import create_atomically

MB = 1024 * 1024
KB = 1024

OP_SUMMARY_HEADER = [
    "Device_id",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Op Name",
    "OP Type",
    "OP State",
    "Task Type",
    "Task Start Time(us)",
    "Task Duration(us)",
    "Task Wait Time(us)",
    "Block Dim",
    "Mix Block Dim",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    *PMU_HEADER,
]
#: op_summary -> kernel_details renames (torch_npu ``_kernel_view_parser``)
KERNEL_DETAILS_RENAME = {
    "Op Name": "Name",
    "OP Type": "Type",
    "Task Type": "Accelerator Core",
    "Task Start Time(us)": "Start Time(us)",
    "Task Duration(us)": "Duration(us)",
    "Task Wait Time(us)": "Wait Time(us)",
}
OP_STATISTIC_HEADER = [
    "Device_id",
    "OP Type",
    "Core Type",
    "Count",
    "Total Time(us)",
    "Min Time(us)",
    "Avg Time(us)",
    "Max Time(us)",
    "Ratio(%)",
]
API_STATISTIC_HEADER = [
    "Device_id",
    "Level",
    "API Name",
    "Time(us)",
    "Count",
    "Avg(us)",
    "Min(us)",
    "Max(us)",
    "Variance",
]
TASK_TIME_HEADER = [
    "Device_id",
    "kernel_name",
    "kernel_type",
    "stream_id",
    "task_id",
    "task_time(us)",
    "task_start(us)",
    "task_stop(us)",
]
STEP_TRACE_HEADER = [
    "Device_id",
    "Iteration ID",
    "FP Start(us)",
    "BP End(us)",
    "Iteration End(us)",
    "Iteration Time(us)",
    "FP to BP Time(us)",
    "Iteration Refresh(us)",
    "Data Aug Bound(us)",
    "Model ID",
]
STEP_TRACE_TIME_HEADER = ["Device_id", "Step", *STEP_TRACE_COLUMNS]
OPERATOR_DETAILS_HEADER = [
    "Name",
    "Input Shapes",
    "Call Stack",
    "Host Self Duration(us)",
    "Host Total Duration(us)",
    "Device Self Duration(us)",
    "Device Total Duration(us)",
    "Device Self Duration With AICore(us)",
    "Device Total Duration With AICore(us)",
]
MEMORY_RECORD_HEADER = [
    "Component",
    "Timestamp(us)",
    "Total Allocated(MB)",
    "Total Reserved(MB)",
    "Total Active(MB)",
    "Stream Ptr",
    "Device Type",
]
OPERATOR_MEMORY_HEADER = [
    "Name",
    "Size(KB)",
    "Allocation Time(us)",
    "Release Time(us)",
    "Active Release Time(us)",
    "Duration(us)",
    "Active Duration(us)",
    "Allocation Total Allocated(MB)",
    "Allocation Total Reserved(MB)",
    "Allocation Total Active(MB)",
    "Release Total Allocated(MB)",
    "Release Total Reserved(MB)",
    "Release Total Active(MB)",
    "Stream Ptr",
    "Device Type",
]
NPU_MODULE_MEM_HEADER = ["Device_id", "Component", "Timestamp(us)", "Total Reserved(MB)", "Device"]
CANN_NPU_MODULE_MEM_HEADER = [
    "Device_id",
    "Component",
    "Timestamp(us)",
    "Total Reserved(KB)",
    "Device",
]


def _strings(values: pd.Series | np.ndarray) -> pa.Array:
    return pc.fill_null(text(values), "")


def _quoted(shapes: pd.Series, dtypes: pd.Series) -> pd.Series:
    """Shapes in literal double quotes, as torch_npu writes them (``""`` for one 0-d
    tensor); ``N/A`` when there is no tensor at all (no dtypes either)."""
    shape = _strings(shapes)
    none = pc.and_(pc.equal(shape, ""), pc.equal(_strings(dtypes), ""))
    return series(pc.if_else(none, "N/A", concat('"', shape, '"')))


def _or_na(values: pd.Series | np.ndarray) -> pd.Series:
    arr = _strings(values)
    return series(pc.if_else(pc.equal(arr, ""), "N/A", arr))


def _op_state(t: pd.DataFrame, kernel: np.ndarray) -> np.ndarray:
    """``dynamic`` / ``static`` for kernels (unknown reads as ``static``), ``N/A`` otherwise."""
    dynamic = (t["op_state"] == "dynamic").to_numpy(dtype=bool)
    return np.where(kernel, np.where(dynamic, "dynamic", "static"), "N/A")


def _round(values: np.ndarray | pd.Series, digits: int = 3) -> np.ndarray:
    return np.round(np.asarray(values, dtype=np.float64), digits)


# ---- kernels ------------------------------------------------------------------------------


def op_summary(data: ExportData) -> pd.DataFrame:
    """CANN ``op_summary`` rows: compute kernels and collectives, by start time."""
    return data.memo("op_summary", lambda: _op_summary(data))


def _op_summary(data: ExportData) -> pd.DataFrame:
    t = data.summary_tasks
    kernel = (t["kind"] == "kernel").to_numpy()
    mix = (t["task_type"] == "MIX_AIC").to_numpy()
    block = t["block_dim"].to_numpy(dtype=np.int64)
    frame = pd.DataFrame(
        {
            "Device_id": data.info.device_id,
            "Model ID": NO_MODEL_ID,
            "Task ID": t["task_id"].to_numpy(),
            "Stream ID": t["stream_id"].to_numpy(),
            "Op Name": t["kernel_name"],
            "OP Type": naming.collective_types(t),
            "OP State": _op_state(t, kernel),
            "Task Type": t["summary_type"].to_numpy(),
            "Task Start Time(us)": t["ts"],
            "Task Duration(us)": us(t["dur_ns"]),
            "Task Wait Time(us)": us(t["wait_ns"]),
            "Block Dim": block,
            "Mix Block Dim": np.where(mix, 2 * block, 0),
            "Input Shapes": _quoted(t["input_shapes"], t["input_dtypes"]),
            "Input Data Types": _or_na(naming.cann_dtypes(t["input_dtypes"])),
            "Input Formats": _or_na(t["input_formats"]),
            "Output Shapes": _quoted(t["output_shapes"], t["output_dtypes"]),
            "Output Data Types": _or_na(naming.cann_dtypes(t["output_dtypes"])),
            "Output Formats": _or_na(t["output_formats"]),
        },
        columns=OP_SUMMARY_HEADER[: -len(PMU_HEADER)],
    )
    spec = load_spec(data.info.meta)[0]
    pmu = pmu_columns(t, spec)
    return pd.concat([frame, pmu.set_axis(frame.index)], axis=1)


def kernel_details(data: ExportData) -> pd.DataFrame:
    """torch_npu ``kernel_details.csv``: op_summary renamed, ``Step Id`` first with steps."""
    frame = op_summary(data).rename(columns=KERNEL_DETAILS_RENAME)
    if data.has_steps:
        frame.insert(0, "Step Id", data.summary_tasks["step"].to_numpy())
    return frame


def op_statistic(data: ExportData) -> pd.DataFrame:
    """``op_statistic``: compute kernels by (op type, core type), largest total first."""
    t = data.summary_tasks
    k = t[t["kind"] == "kernel"]
    if k.empty:
        return pd.DataFrame(columns=OP_STATISTIC_HEADER)
    g = k.assign(dur=us(k["dur_ns"])).groupby(["op_type", "task_type"])["dur"]
    stats = g.agg(["count", "sum", "min", "mean", "max"]).reset_index()
    stats = stats.sort_values(["sum", "op_type"], ascending=[False, True], kind="stable")
    total = stats["sum"].sum()
    return pd.DataFrame(
        {
            "Device_id": data.info.device_id,
            "OP Type": stats["op_type"].to_numpy(),
            "Core Type": stats["task_type"].to_numpy(),
            "Count": stats["count"].to_numpy(),
            "Total Time(us)": _round(stats["sum"]),
            "Min Time(us)": _round(stats["min"]),
            "Avg Time(us)": _round(stats["mean"]),
            "Max Time(us)": _round(stats["max"]),
            "Ratio(%)": _round(100.0 * stats["sum"] / total if total else 0.0 * stats["sum"]),
        },
        columns=OP_STATISTIC_HEADER,
    )


def task_time(data: ExportData) -> pd.DataFrame:
    """CANN ``task_time``: every device task."""
    t = data.tasks
    return pd.DataFrame(
        {
            "Device_id": data.info.device_id,
            "kernel_name": t["kernel_name"],
            "kernel_type": t["hw_type"].to_numpy(),
            "stream_id": t["stream_id"].to_numpy(),
            "task_id": t["task_id"].to_numpy(),
            "task_time(us)": us(t["dur_ns"]),
            "task_start(us)": t["ts"],
            "task_stop(us)": data.info.ts_series(t["end_ns"].to_numpy()),
        },
        columns=TASK_TIME_HEADER,
    )


# ---- host APIs ----------------------------------------------------------------------------


def api_calls(data: ExportData) -> pd.DataFrame:
    """Every CANN API call of the run: ``level, api, dur_ns`` (launches, node launches, syncs)."""
    launches = data.launches
    level = naming.api_level(launches["api"].to_numpy(dtype=object))
    parts = [
        pd.DataFrame(
            {
                "level": np.where(level == "hccl", "communication", "acl"),
                "api": launches["api"].to_numpy(dtype=object),
                "dur_ns": (launches["end_ns"] - launches["start_ns"]).to_numpy(),
            }
        )
    ]
    kernel = launches[launches["task_kind"] == "kernel"]
    if len(kernel):
        parts.append(
            pd.DataFrame(
                {
                    "level": "node",
                    "api": "launch",
                    "dur_ns": (kernel["end_ns"] - kernel["start_ns"]).to_numpy(),
                }
            )
        )
    syncs = data.syncs
    if len(syncs):
        parts.append(
            pd.DataFrame(
                {
                    "level": "acl",
                    "api": syncs["api"].to_numpy(dtype=object),
                    "dur_ns": (syncs["end_ns"] - syncs["start_ns"]).to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def api_statistic(data: ExportData) -> pd.DataFrame:
    """``api_statistic``: host API calls by level and name, largest total first."""
    calls = api_calls(data)
    if calls.empty:
        return pd.DataFrame(columns=API_STATISTIC_HEADER)
    g = calls.assign(dur=us(calls["dur_ns"])).groupby(["level", "api"])["dur"]
    stats = g.agg(["sum", "count", "mean", "min", "max", "var"]).reset_index()
    stats["var"] = stats["var"].fillna(0.0)
    # population variance, as for a complete set of calls
    stats["var"] = stats["var"] * (stats["count"] - 1) / stats["count"]
    stats = stats.sort_values(["sum", "api"], ascending=[False, True], kind="stable")
    return pd.DataFrame(
        {
            "Device_id": "host",
            "Level": stats["level"].to_numpy(),
            "API Name": stats["api"].to_numpy(),
            "Time(us)": _round(stats["sum"]),
            "Count": stats["count"].to_numpy(),
            "Avg(us)": _round(stats["mean"]),
            "Min(us)": _round(stats["min"]),
            "Max(us)": _round(stats["max"]),
            "Variance": _round(stats["var"]),
        },
        columns=API_STATISTIC_HEADER,
    )


# ---- steps --------------------------------------------------------------------------------


def step_trace_time(data: ExportData) -> pd.DataFrame:
    """torch_npu ``step_trace_time.csv`` (µs; ``Step`` empty without steps)."""
    rows = step_breakdown(data.profile, data.sections)
    frame = pd.DataFrame({"Device_id": data.info.device_id}, index=rows.index)
    frame["Step"] = rows["step"].map(lambda s: "" if s is None or pd.isna(s) else int(s))
    for column in STEP_TRACE_COLUMNS:
        frame[column] = _round(us(rows[column].to_numpy(dtype=np.int64)))
    return frame[STEP_TRACE_TIME_HEADER]


def step_trace(data: ExportData) -> pd.DataFrame:
    """CANN ``step_trace``: one row per step (iteration ids from 1), with reduce pairs.

    FP Start is the step's first device task, BP End the end of the last kernel launched
    before the step's ``Optimizer.step`` annotation (the step's last kernel without one),
    Iteration End the step's last task end; Data Aug Bound (FP Start minus the previous
    Iteration End) is N/A for the first iteration. The ``Reduce Start(us)`` /
    ``Reduce Duration(us)`` pairs are the step's collectives (N/A where a step has fewer).
    """
    t = data.tasks
    if t.empty:
        return pd.DataFrame(columns=STEP_TRACE_HEADER)
    step_of = t["step"].to_numpy(dtype=np.int64) if data.has_steps else np.zeros(len(t), int)
    t = t.assign(step_of=step_of)
    t = t[t["step_of"] >= 0]
    by_step = t.groupby("step_of")
    fp_start = by_step["start_ns"].min()
    it_end = by_step["end_ns"].max()
    steps = fp_start.index.to_numpy()

    kernels = t[t["kind"] == "kernel"]
    bp_end = kernels.groupby("step_of")["end_ns"].max().reindex(steps)
    opt = _optimizer_starts(data, steps)
    if opt.notna().any():
        op_start = data.host_ops.set_index("event_id")["start_ns"]
        launched = kernels["host_op_id"].map(op_start)
        limit = kernels["step_of"].map(opt)
        before = kernels[(launched < limit).to_numpy()]
        bp_before = before.groupby("step_of")["end_ns"].max().reindex(steps)
        bp_end = bp_before.fillna(bp_end)
    bp_end = bp_end.fillna(it_end).to_numpy(dtype=np.int64)
    fp = fp_start.to_numpy(dtype=np.int64)
    end = it_end.to_numpy(dtype=np.int64)
    prev = np.concatenate([[fp[0]], end[:-1]])
    aug = [
        round((a - b) / 1000, 3) for a, b in zip(fp[1:].tolist(), end[:-1].tolist(), strict=True)
    ]
    frame = pd.DataFrame(
        {
            "Device_id": data.info.device_id,
            "Iteration ID": steps + 1 if data.has_steps else np.ones(len(steps), dtype=int),
            "FP Start(us)": data.info.ts_series(fp),
            "BP End(us)": data.info.ts_series(bp_end),
            "Iteration End(us)": data.info.ts_series(end),
            "Iteration Time(us)": _round(us(end - prev)),
            "FP to BP Time(us)": _round(us(bp_end - fp)),
            "Iteration Refresh(us)": _round(us(end - bp_end)),
            "Data Aug Bound(us)": ["N/A", *aug],
            "Model ID": NO_MODEL_ID,
        },
        columns=STEP_TRACE_HEADER,
    )
    coll = t[t["kind"] == "collective"]
    if coll.empty:
        return frame
    rank_in_step = coll.groupby("step_of").cumcount().to_numpy()
    row = pd.Index(steps).get_indexer(coll["step_of"])
    pairs = int(rank_in_step.max()) + 1
    starts = np.full((len(steps), pairs), "N/A", dtype=object)
    durs = np.full((len(steps), pairs), "N/A", dtype=object)
    starts[row, rank_in_step] = coll["ts"].to_numpy()
    durs[row, rank_in_step] = _round(us(coll["dur_ns"])).tolist()
    columns = [frame]
    for i in range(pairs):
        columns.append(pd.DataFrame({"Reduce Start(us)": starts[:, i]}))
        columns.append(pd.DataFrame({"Reduce Duration(us)": durs[:, i]}))
    return pd.concat(columns, axis=1)  # CANN repeats the pair names


def _optimizer_starts(data: ExportData, steps: np.ndarray) -> pd.Series:
    """Start of the first ``Optimizer.step#`` annotation inside each step's host span (by
    time: an annotation's own ``step`` column may already name the step it closes)."""
    ops = data.host_ops
    starts = np.sort(ops[ops["name"].str.startswith("Optimizer.step#")]["start_ns"].to_numpy())
    host = data.profile.steps.set_index("step").reindex(steps)
    out = pd.Series(np.nan, index=steps)
    if not len(starts) or host.empty:
        return out
    lo = host["start_ns"].to_numpy(dtype=float)
    hi = host["end_ns"].to_numpy(dtype=float)
    ok = ~np.isnan(lo)
    i = np.searchsorted(starts, np.nan_to_num(lo), side="left")
    found = ok & (i < len(starts))
    cand = starts[np.clip(i, 0, len(starts) - 1)]
    found &= cand <= hi
    out[found] = cand[found]
    return out


# ---- operators ----------------------------------------------------------------------------


def operator_details(data: ExportData) -> pd.DataFrame:
    """torch_npu ``operator_details.csv``: one row per host op and annotation.

    Host ops are leaves (the recorder keeps no nested ops), so an op's self time is its whole
    time and its device time is the time of the tasks it launched. An annotation's self time
    is its span minus the host ops inside it, its device total the tasks of those ops.
    """
    ops = data.host_ops
    if ops.empty:
        return pd.DataFrame(columns=OPERATOR_DETAILS_HEADER)
    t = data.tasks
    launched = t[t["host_op_id"] >= 0]
    ai_core = launched["task_type"].isin(naming.AI_CORE_TASK_TYPES).to_numpy()
    dev = launched.assign(dur=launched["dur_ns"], ai=np.where(ai_core, launched["dur_ns"], 0))
    per_op = dev.groupby("host_op_id")[["dur", "ai"]].sum()
    is_op = (ops["kind"] == "op").to_numpy()
    host_total = (ops["end_ns"] - ops["start_ns"]).to_numpy(dtype=np.int64)
    dev_self = ops["event_id"].map(per_op["dur"]).fillna(0).to_numpy(dtype=np.int64)
    ai_self = ops["event_id"].map(per_op["ai"]).fillna(0).to_numpy(dtype=np.int64)
    dev_self = np.where(is_op, dev_self, 0)
    ai_self = np.where(is_op, ai_self, 0)
    host_self = host_total.copy()
    dev_total, ai_total = dev_self.copy(), ai_self.copy()
    ann_idx = np.flatnonzero(~is_op)
    if len(ann_idx):
        leaf = ops[is_op]
        order = np.argsort(leaf["start_ns"].to_numpy(), kind="stable")
        l_start = leaf["start_ns"].to_numpy(dtype=np.int64)[order]
        l_end = leaf["end_ns"].to_numpy(dtype=np.int64)[order]
        l_thread = leaf["thread"].to_numpy()[order]
        l_host = np.concatenate([[0], np.cumsum(l_end - l_start)])
        l_dev = np.concatenate([[0], np.cumsum(dev_self[is_op][order])])
        l_ai = np.concatenate([[0], np.cumsum(ai_self[is_op][order])])
        a_start = ops["start_ns"].to_numpy(dtype=np.int64)[ann_idx]
        a_end = ops["end_ns"].to_numpy(dtype=np.int64)[ann_idx]
        lo = np.searchsorted(l_start, a_start, side="left")
        hi = np.searchsorted(l_start, a_end, side="right")
        for j, i in enumerate(ann_idx.tolist()):
            sel = slice(lo[j], hi[j])
            inside = (l_end[sel] <= a_end[j]) & (l_thread[sel] == ops["thread"].iat[i])
            if inside.all():
                child_host = l_host[hi[j]] - l_host[lo[j]]
                dev_total[i] = l_dev[hi[j]] - l_dev[lo[j]]
                ai_total[i] = l_ai[hi[j]] - l_ai[lo[j]]
            else:
                idx = np.arange(lo[j], hi[j])[inside]
                child_host = int((l_end[idx] - l_start[idx]).sum())
                dev_total[i] = int(np.diff(l_dev)[idx].sum())
                ai_total[i] = int(np.diff(l_ai)[idx].sum())
            host_self[i] = host_total[i] - child_host
    return pd.DataFrame(
        {
            "Name": ops["name"].to_numpy(),
            "Input Shapes": ops["input_shapes"].fillna("").to_numpy(),
            "Call Stack": naming.call_stacks(ops),
            "Host Self Duration(us)": us(host_self),
            "Host Total Duration(us)": us(host_total),
            "Device Self Duration(us)": us(dev_self),
            "Device Total Duration(us)": us(dev_total),
            "Device Self Duration With AICore(us)": us(ai_self),
            "Device Total Duration With AICore(us)": us(ai_total),
        },
        columns=OPERATOR_DETAILS_HEADER,
    )


# ---- memory -------------------------------------------------------------------------------


def _device_type(data: ExportData) -> str:
    return f"NPU:{data.info.device_id}"


def memory_record(data: ExportData) -> pd.DataFrame:
    """torch_npu ``memory_record.csv``: the allocator's totals after every event (``PTA``)."""
    m = data.profile.memory.sort_values("time_ns", kind="stable")
    m = m[m["action"] != "oom"]
    return pd.DataFrame(
        {
            "Component": "PTA",
            "Timestamp(us)": data.info.ts_series(m["time_ns"].to_numpy()),
            "Total Allocated(MB)": _mb(m["allocated"]),
            "Total Reserved(MB)": _mb(m["reserved"]),
            "Total Active(MB)": _mb(m["active"]),
            "Stream Ptr": m["stream_id"].to_numpy(),
            "Device Type": _device_type(data),
        },
        columns=MEMORY_RECORD_HEADER,
    )


def _mb(values: pd.Series | np.ndarray) -> np.ndarray:
    return np.round(np.asarray(values, dtype=np.float64) / MB, 6)


def operator_memory(data: ExportData) -> pd.DataFrame:
    """torch_npu ``operator_memory.csv``: each block, its malloc paired with the next free at
    the same address (a block never freed has empty release columns)."""
    m = data.profile.memory.reset_index(drop=True)
    m = m.assign(order=np.arange(len(m))).sort_values(["time_ns", "order"], kind="stable")
    mallocs = m[m["action"] == "malloc"].copy()
    frees = m[m["action"] == "free"].copy()
    if mallocs.empty:
        return pd.DataFrame(columns=OPERATOR_MEMORY_HEADER)
    mallocs["k"] = mallocs.groupby("address").cumcount()
    frees["k"] = frees.groupby("address").cumcount()
    cols = ["address", "k", "time_ns", "allocated", "reserved", "active"]
    pairs = mallocs.merge(frees[cols], on=["address", "k"], how="left", suffixes=("", "_rel"))
    released = pairs["time_ns_rel"].notna().to_numpy()
    rel_ns = pairs["time_ns_rel"].fillna(0).to_numpy(dtype=np.int64)
    alloc_ns = pairs["time_ns"].to_numpy(dtype=np.int64)
    rel_text = data.info.ts_series(rel_ns).where(released, "")
    duration = np.where(released, us(rel_ns - alloc_ns), np.nan)

    def release(column: str) -> np.ndarray:
        return np.where(released, _mb(pairs[column].fillna(0)), np.nan)

    return pd.DataFrame(
        {
            "Name": pairs["tag"].to_numpy(),
            "Size(KB)": np.round(pairs["size"].to_numpy(dtype=np.float64) / KB, 3),
            "Allocation Time(us)": data.info.ts_series(alloc_ns),
            "Release Time(us)": rel_text,
            "Active Release Time(us)": rel_text,
            "Duration(us)": duration,
            "Active Duration(us)": duration,
            "Allocation Total Allocated(MB)": _mb(pairs["allocated"]),
            "Allocation Total Reserved(MB)": _mb(pairs["reserved"]),
            "Allocation Total Active(MB)": _mb(pairs["active"]),
            "Release Total Allocated(MB)": release("allocated_rel"),
            "Release Total Reserved(MB)": release("reserved_rel"),
            "Release Total Active(MB)": release("active_rel"),
            "Stream Ptr": pairs["stream_id"].to_numpy(),
            "Device Type": _device_type(data),
        },
        columns=OPERATOR_MEMORY_HEADER,
    )


def _reserved_changes(data: ExportData) -> pd.DataFrame:
    """Allocator events where the reserved total changed (segments taken or returned)."""
    m = data.profile.memory.sort_values("time_ns", kind="stable")
    m = m[m["action"] != "oom"]
    changed = m["reserved"].ne(m["reserved"].shift())
    return m[changed.to_numpy()]


def npu_module_mem(data: ExportData, *, cann: bool = False) -> pd.DataFrame:
    """``npu_module_mem``: the application's (``APP``) reserved device memory over time, in
    MB (torch_npu) or KB (CANN, ``cann=True``)."""
    m = _reserved_changes(data)
    reserved = m["reserved"].to_numpy(dtype=np.float64)
    header = CANN_NPU_MODULE_MEM_HEADER if cann else NPU_MODULE_MEM_HEADER
    return pd.DataFrame(
        {
            "Device_id": data.info.device_id,
            "Component": "APP",
            "Timestamp(us)": data.info.ts_series(m["time_ns"].to_numpy()),
            header[3]: np.round(reserved / (KB if cann else MB), 6),
            "Device": _device_type(data),
        },
        columns=header,
    )


def _csv_field(values: pd.Series) -> Text:
    """One column as CSV text: numbers as Arrow formats them, NaN/None empty, strings quoted
    where needed (as Python's csv module does with QUOTE_MINIMAL)."""
    if pd.api.types.is_bool_dtype(values.dtype):
        return text(np.where(values.to_numpy(dtype=bool), "True", "False"))
    if pd.api.types.is_integer_dtype(values.dtype):
        return jint(values)
    if pd.api.types.is_float_dtype(values.dtype):
        arr = pa.array(values.to_numpy(dtype=np.float64), from_pandas=True)
        return pc.fill_null(pc.cast(arr, pa.string()), "")
    if values.dtype == object:
        arr = pa.array(values.where(values.notna(), "").astype(str).to_numpy(dtype=object))
    else:
        arr = pc.fill_null(text(values), "")
    arr = _neutralised(arr)
    special = pc.match_substring_regex(arr, r'[,"\r\n]')
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(arr, '"', '""'), '"', "")
    return pc.if_else(special, quoted, arr)


def _neutralised(arr: pa.Array) -> pa.Array:
    """String cells made safe for spreadsheets (:func:`naming.neutral_cell`), vectorised."""
    arr = pc.replace_substring(arr, "\0", "")
    starts = pc.match_substring_regex(arr, r"^[=+\-@\t\r]")
    number = pc.match_substring_regex(arr, naming.PLAIN_NUMBER)
    risky = pc.and_(starts, pc.invert(number))
    return pc.if_else(risky, pc.binary_join_element_wise("'", arr, ""), arr)


def write_csv_table(frame: pd.DataFrame, stream: IO[bytes]) -> None:
    """Write ``frame`` (header included) as CSV with ``\\n`` line ends, column-wise in Arrow
    (pandas' ``to_csv`` is several times slower on millions of rows)."""
    head = io.StringIO()
    csv.writer(head, lineterminator="\n").writerow([str(c) for c in frame.columns])
    stream.write(head.getvalue().encode("utf-8"))
    for lo in range(0, len(frame), SLICE_ROWS):
        part = frame.iloc[lo : lo + SLICE_ROWS]
        columns = [_csv_field(part.iloc[:, i]) for i in range(part.shape[1])]
        rows = pc.binary_join_element_wise(*columns, ",")
        stream.write(utf8_bytes(pc.binary_join_element_wise(rows, "\n", "")))


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Write a table as CSV (never over an existing file)."""
    with create_atomically(path, "xb") as f:
        write_csv_table(frame, f)
