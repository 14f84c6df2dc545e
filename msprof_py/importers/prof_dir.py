"""msprof's own output, a ``PROF_*`` folder, read as profile tables (importer ``msprof_prof``).

What ``msprof --application=... --output=DIR`` leaves on hardware, and the inverse of
:mod:`msprof_py.exporters.cann_prof`. From ``PROF_*/mindstudio_profiler_output/``:

* ``op_summary_*.csv`` -> the kernels and collectives, read as torch_npu's kernel_details
  (:func:`msprof_py.importers.ascend_pt.kernel_tasks`: shapes, CANN dtypes, ``N/A`` cells,
  PMU columns to ``cube_ns`` / ``vector_ns`` / ``memory_ns``).
* ``task_time_*.csv`` -> every other device task (copies, memsets, event records/waits, and
  whatever op_summary lacks), told apart from op_summary's rows by stream, task id and start.
  Copies take their bytes and direction from the trace's ``Ascend Hardware`` events.
* ``msprof_*.json`` (:mod:`msprof_py.importers.ascend_trace`) -> the CANN host calls
  (``AscendCL@`` / ``HCCL@`` launches, linked to their task by ``connection_id`` as the
  ``HostToDevice`` flows show them, stream syncs, other API calls); the device tasks when
  neither CSV is there. CANN's timeline has no framework layer: no ops, no Python.
* Steps: the trace's ``ProfilerStep#N`` marks when it has them, else the iterations of
  ``step_trace_*.csv`` (each task's ``step``: the iteration whose device range holds it),
  else none (the analysers then take the whole run as one step).
* ``device_*/info.json.*`` (else ``host/info.json*``) -> rank, device id, soc version (the
  device preset when a preset has it), core counts and clock.

Files msprof split (``op_summary_slice_0_{ts}.csv`` ...) are read in slice order. Times are
rebased to the first event.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.exporters.csv_tables import KERNEL_DETAILS_RENAME
from msprof_py.importers.ascend_files import CsvTable, read_csv, read_json
from msprof_py.importers.ascend_pt import (
    device_preset,
    fill_waits,
    hardware_tasks,
    kernel_tasks,
    link_tasks,
    ordered_tasks,
    rank_folders,
    step_of,
    step_rows,
    trace_host,
    whole_number,
)
from msprof_py.importers.ascend_trace import TraceView, read_trace
from msprof_py.profile import ProfileError

NAME = "msprof_prof"
OUTPUT_DIR = "mindstudio_profiler_output"
#: kernel_details' column names -> op_summary's
OP_SUMMARY_NAMES = {v: k for k, v in KERNEL_DETAILS_RENAME.items()}
OP_SUMMARY_REQUIRED = tuple(
    OP_SUMMARY_NAMES.get(c, c)
    for c in ("Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)")
)
TASK_TIME_REQUIRED = ("kernel_name", "kernel_type", "stream_id", "task_start(us)", "task_time(us)")
STEP_TRACE_REQUIRED = ("Iteration ID", "FP Start(us)", "Iteration End(us)")
_PART = re.compile(r"^(?P<stem>.+?)_(?:slice_(?P<slice>\d+)_)?(?P<ts>\d{14})\.(?:csv|json)$")


# ---- the folder --------------------------------------------------------------------------


def is_prof_folder(path: Path) -> bool:
    """Whether ``path`` is a ``PROF_*`` folder holding ``mindstudio_profiler_output/``."""
    return path.is_dir() and path.name.startswith("PROF_") and (path / OUTPUT_DIR).is_dir()


def prof_folders(path: Path) -> list[Path]:
    """The ``PROF_*`` folders at ``path``: itself, or its subfolders (one per device/rank). A
    torch_npu folder (ASCEND_PROFILER_OUTPUT/) is not one: the ascend_pt importer reads it."""
    path = Path(path)
    if not path.is_dir() or rank_folders(path):
        return []
    if is_prof_folder(path):
        return [path]
    return sorted(p for p in path.iterdir() if is_prof_folder(p))


def parts(out: Path, stem: str, ext: str) -> list[Path]:
    """The files of one kind in ``out`` (``op_summary_{ts}.csv``, or its slices in slice
    order); of several exports (different ``{ts}``) the latest."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for path in out.glob(f"{stem}_*.{ext}"):
        match = _PART.match(path.name)
        if match and match["stem"] == stem and path.is_file():
            found.setdefault(match["ts"], []).append((int(match["slice"] or 0), path))
    if not found:
        return []
    return [p for _, p in sorted(found[max(found)])]


def _info(folder: Path) -> dict[str, Any]:
    """``info.json`` of the device (else the host): rank_id, devices, soc_version, DeviceInfo."""
    for pattern in ("device_*/info.json.*", "host/info.json*"):
        for path in sorted(folder.glob(pattern)):
            info = read_json(path, "info.json")
            if not isinstance(info, dict):
                raise ProfileError(f"{path}: not a JSON object")
            return info
    return {}


def _meta(folder: Path, info: dict[str, Any], rank: int) -> dict[str, Any]:
    devices = info.get("DeviceInfo")
    dev = (
        devices[0] if isinstance(devices, list) and devices and isinstance(devices[0], dict) else {}
    )
    soc = str(info.get("soc_version") or "")
    meta: dict[str, Any] = {
        "source_format": NAME,
        "source": str(folder),
        "status": "complete",
        "rank": rank,
        "world_size": 1,
        "device": device_preset(soc),
        "soc_version": soc,
        "run_dir": folder.name,
        "device_id": whole_number(dev.get("id", info.get("devices")), 0),
    }
    if info.get("hostname"):
        meta["hostname"] = str(info["hostname"])
    if whole_number(info.get("pid"), 0):
        meta["pid"] = whole_number(info.get("pid"), 0)
    for key in ("ai_core_num", "aiv_num"):
        if whole_number(dev.get(key), 0):
            meta[key] = whole_number(dev.get(key), 0)
    try:
        if dev.get("aic_frequency"):
            meta["aic_frequency_mhz"] = float(dev["aic_frequency"])
    except (TypeError, ValueError):
        pass
    return meta


# ---- tasks -------------------------------------------------------------------------------


def _task_time_rows(tt: CsvTable) -> pd.DataFrame:
    """task_time rows as device task rows (:attr:`TraceView.hardware`'s columns) + task id."""
    start = tt.ns("task_start(us)")
    dur = tt.ns("task_time(us)")
    if (dur < 0).any():
        row = int(np.flatnonzero(dur < 0)[0]) + 2
        raise ProfileError(f"{tt.path} row {row} column 'task_time(us)': negative duration")
    return pd.DataFrame(
        {
            "name": tt.text("kernel_name").to_numpy(dtype=object),
            "start": start,
            "dur": dur,
            "stream": tt.integer("stream_id"),
            "task_type": tt.text("kernel_type").to_numpy(dtype=object),
            "connection_id": -1,
            "size": 0,
            "operation": "",
            "task": tt.integer("task_id", -1),
        }
    )


def _other_tasks(
    task_time: list[CsvTable], tv: TraceView | None, summary: pd.DataFrame | None
) -> pd.DataFrame:
    """The device tasks op_summary does not hold: task_time's rows not in op_summary (by
    stream, task id and start), their copies' bytes and direction from the trace; without
    task_time, the trace's device events (kernels too when there is no op_summary)."""
    if not task_time:
        if tv is None:
            return pd.DataFrame()
        return hardware_tasks(tv.hardware, with_kernels=summary is None)
    rows = pd.concat([_task_time_rows(t) for t in task_time], ignore_index=True)
    if summary is not None and len(summary):
        known = set(zip(summary["stream_id"], summary["task_no"], summary["start_ns"], strict=True))
        key = zip(rows["stream"], rows["task"], rows["start"], strict=True)
        rows = rows[[k not in known for k in key]].reset_index(drop=True)
    if tv is not None and len(tv.hardware) and len(rows):
        hw = tv.hardware.drop_duplicates(["stream", "start"]).set_index(["stream", "start"])
        at = pd.MultiIndex.from_arrays([rows["stream"], rows["start"]])
        rows["size"] = hw["size"].reindex(at).fillna(0).astype(np.int64).to_numpy()
        rows["operation"] = hw["operation"].reindex(at).fillna("").to_numpy(dtype=object)
        rows["connection_id"] = hw["connection_id"].reindex(at).fillna(-1).to_numpy()
    return hardware_tasks(rows, with_kernels=True)


def _summary_tasks(op_summary: list[CsvTable]) -> pd.DataFrame | None:
    if not op_summary:
        return None
    frames = []
    for table in op_summary:
        frame = kernel_tasks(table, OP_SUMMARY_NAMES)
        frame["task_no"] = table.integer("Task ID", -1)
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out["order"] = np.arange(len(out))
    return out


def _iterations(step_trace: list[CsvTable]) -> pd.DataFrame:
    """step_trace's iterations as device ranges: step (Iteration ID - 1), start_ns, end_ns."""
    frames = [
        pd.DataFrame(
            {
                "step": t.integer("Iteration ID") - 1,
                "start_ns": t.ns("FP Start(us)"),
                "end_ns": t.ns("Iteration End(us)"),
            }
        )
        for t in step_trace
    ]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["step", "start_ns", "end_ns"])
    return pd.concat(frames, ignore_index=True).drop_duplicates("step")


def _read_traces(paths: list[Path]) -> TraceView | None:
    """The msprof_*.json slices as one trace."""
    views = [read_trace(p) for p in paths]
    if not views:
        return None
    if len(views) == 1:
        return views[0]
    algorithms: dict[str, str] = {}
    for v in views:
        algorithms.update(v.algorithms)

    def joined(attr: str) -> pd.DataFrame:
        return pd.concat([getattr(v, attr) for v in views], ignore_index=True)

    return TraceView(
        views[0].path,
        joined("cpu_ops"),
        joined("python"),
        joined("cann"),
        joined("hardware"),
        joined("flows"),
        algorithms,
    )


# ---- one folder --------------------------------------------------------------------------


def read_prof(folder: Path) -> tuple[int, dict[str, Any], dict[str, pd.DataFrame], list[str]]:
    """One ``PROF_*`` folder: its rank, meta, tables and warnings (see module docs)."""
    out = folder / OUTPUT_DIR
    info = _info(folder)
    op_summary = [
        read_csv(p, OP_SUMMARY_REQUIRED, "op_summary") for p in parts(out, "op_summary", "csv")
    ]
    task_time = [
        read_csv(p, TASK_TIME_REQUIRED, "task_time") for p in parts(out, "task_time", "csv")
    ]
    step_trace = [
        read_csv(p, STEP_TRACE_REQUIRED, "step_trace") for p in parts(out, "step_trace", "csv")
    ]
    tv = _read_traces(parts(out, "msprof", "json"))
    if not op_summary and not task_time and tv is None:
        raise ProfileError(f"{out}: no op_summary_*.csv, task_time_*.csv or msprof_*.json here")
    notes: list[str] = []
    truncated = [t for t in (*op_summary, *task_time, *step_trace) if t.truncated]
    for t in truncated:
        notes += t.notes

    summary = _summary_tasks(op_summary)
    pieces = [summary] if summary is not None else []
    pieces.append(_other_tasks(task_time, tv, summary))
    pieces = [p for p in pieces if p is not None and len(p)]
    tasks = pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame()
    if len(tasks):
        tasks = tasks.drop(columns=["task_no"], errors="ignore")
        tasks["order"] = np.arange(len(tasks))
        fill_waits(tasks)

    firsts = tv.times() if tv is not None else []
    if len(tasks):
        firsts.append(int(tasks["start_ns"].min()))
    base = min(firsts) if firsts else 0

    steps = step_rows(tv)
    host = trace_host(tv)
    if len(tasks):
        tasks = ordered_tasks(tasks)
        tasks["step"] = -1
        if tv is not None:
            link_tasks(tasks, host, tv)
            if tv.algorithms:
                tasks["algorithm"] = tasks["kernel_name"].map(tv.algorithms).fillna("")
        else:
            tasks["launch_ns"] = tasks["start_ns"]
            tasks["host_op_id"] = -1
        tasks["world_size"] = np.where(tasks["kind"] == "collective", 1, 0)
        if len(steps):
            tasks["step"] = step_of(tasks["launch_ns"].to_numpy(dtype=np.int64), steps)
        else:
            iterations = _iterations(step_trace)
            tasks["step"] = step_of(tasks["start_ns"].to_numpy(dtype=np.int64), iterations)
    if len(host):
        if len(steps):
            host["step"] = step_of(host["start_ns"].to_numpy(dtype=np.int64), steps)
        elif len(tasks):  # a launch is in its task's step
            of_task = host["task_id"].map(tasks.set_index("task_id")["step"])
            host["step"] = of_task.fillna(-1).astype(np.int64)

    for frame, columns in (
        (tasks, ("start_ns", "end_ns", "launch_ns")),
        (host, ("start_ns", "end_ns")),
        (steps, ("start_ns", "end_ns")),
    ):
        if len(frame):
            for column in columns:
                frame[column] = frame[column].astype(np.int64) - base
    rank = whole_number(info.get("rank_id"), -1)
    meta = _meta(folder, info, 0)
    if rank < 0:
        rank = meta["device_id"] if meta["device_id"] >= 0 else 0
    meta["rank"] = rank
    ends = [int(f[c].max()) for f, c in ((tasks, "end_ns"), (host, "end_ns")) if len(f)]
    meta["device_end_ns"] = int(tasks["end_ns"].max()) if len(tasks) else 0
    meta["host_end_ns"] = max(ends, default=0)
    if truncated:
        meta["status"] = "partial"
    tables = {"tasks": tasks, "host_events": host, "steps": steps}
    return rank, meta, tables, notes
