"""One torch_npu ``*_ascend_pt`` folder (its ``ASCEND_PROFILER_OUTPUT/``) read as profile tables.

The inverse of :mod:`msprof_py.exporters.ascend_pt`, for folders recorded on real hardware as
much as for our own exports:

* ``kernel_details.csv`` -> tasks (kernels; rows whose Accelerator Core is HCCL/COMMUNICATION or
  whose Type is ``hcom_*`` are collectives). Shapes lose torch_npu's literal quotes, CANN dtype
  names become torch's (``FLOAT`` -> ``float32``), ``N/A`` cells neutral values. PMU columns,
  where present, give the pipe times: ``aic_mac_time`` -> ``cube_ns``, ``aiv_vec_time`` ->
  ``vector_ns``, the larger of the cube's (``aic_mte2`` + ``aic_fixpipe``) and the vector's
  (``aiv_mte2`` + ``aiv_mte3``) memory pipes -> ``memory_ns``.
* ``trace_view.json`` (:mod:`msprof_py.importers.ascend_trace`) -> host events: ``cpu_op`` events
  are ops (a name with ``::``, or the source of a ``torch_to_npu`` flow) or annotations,
  ``ProfilerStep#N`` the steps, ``AscendCL@`` / ``HCCL@`` calls launches (they name a task by
  ``connection_id``), stream syncs and other API calls; the ``Ascend Hardware`` tasks that
  kernel_details does not hold (copies, memsets, event records/waits) become tasks, all of them
  when there is no kernel_details.csv. ``torch_to_npu`` flows give each task its host op.
  An op's ``parent_id`` is the op enclosing it on its thread (time nesting: ``aten::linear``
  around ``aten::addmm``), so its self time leaves out the ops nested in it; a launch, sync or
  API call no flow links is the shortest op holding its start.
* ``memory_record.csv`` (the ``PTA`` component) -> memory events, the block sizes and names
  from ``operator_memory.csv``.
* ``communication.json`` -> the collectives' buffer bytes and notify-wait time.
* ``profiler_info*.json`` -> rank, world size, device; ``PROF_*/device_*/info.json.*`` the
  core counts; ``profiler_metadata.json`` the environment.

Times are rebased: profile time 0 is ``collectionTimeBegin`` of profiler_info when it is a
plausible ns timestamp just before the first event, else the first event.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.device.spec import DeviceSpec, preset_names
from msprof_py.exporters.naming import CANN_DTYPES
from msprof_py.importers.ascend_files import CsvTable, read_csv, read_json
from msprof_py.importers.ascend_trace import STEP_PREFIX, TraceView, read_trace
from msprof_py.importers.nesting import enclosing, shortest_holding
from msprof_py.profile import ProfileError

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
KERNEL_REQUIRED = ("Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)")
MEMORY_REQUIRED = ("Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)")
OPERATOR_MEMORY_REQUIRED = ("Name", "Size(KB)", "Allocation Time(us)")
MB = 1024 * 1024
#: collectionTimeBegin is taken as time 0 when it is at most this before the first event
_BASE_SLACK_NS = 3600 * 10**9
_FOLDER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)_(?P<stamp>\d{17})_ascend_pt$")
_INFO_RANK = re.compile(r"^profiler_info_(\d+)\.json$")
#: torch dtype names for CANN's (the first torch name of each, as exports map them)
TORCH_DTYPES: dict[str, str] = {}
for _torch, _cann in CANN_DTYPES.items():
    TORCH_DTYPES.setdefault(_cann, _torch)
TORCH_DTYPES.update({"DT_FLOAT": "float32", "DT_FLOAT16": "float16", "BF16": "bfloat16"})
_COLLECTIVE_CORES = ("HCCL", "COMMUNICATION")
_COLLECTIVE_OPS = (
    ("reducescatter", "reducescatter"),
    ("reduce_scatter", "reducescatter"),
    ("allreduce", "allreduce"),
    ("all_reduce", "allreduce"),
    ("allgather", "allgather"),
    ("all_gather", "allgather"),
    ("broadcast", "broadcast"),
    ("alltoall", "alltoall"),
    ("send", "send"),
    ("receive", "receive"),
    ("recv", "receive"),
)
_COPY_KIND = {
    "host to device": "HOST_TO_DEVICE",
    "device to host": "DEVICE_TO_HOST",
    "device to device": "DEVICE_TO_DEVICE",
}
_COPY_SHORT = {"HOST_TO_DEVICE": "H2D", "DEVICE_TO_HOST": "D2H", "DEVICE_TO_DEVICE": "D2D"}
_COPY_OP_TYPE = {
    "HOST_TO_DEVICE": "MEMCPY_H2D",
    "DEVICE_TO_HOST": "MEMCPY_D2H",
    "DEVICE_TO_DEVICE": "MEMCPY_D2D",
}


# ---- the folder --------------------------------------------------------------------------


def is_rank_folder(path: Path) -> bool:
    """Whether ``path`` is one rank's torch_npu folder (it has ASCEND_PROFILER_OUTPUT/)."""
    return path.is_dir() and (path / OUTPUT_DIR).is_dir()


def rank_folders(path: Path) -> list[Path]:
    """The rank folders at ``path``: itself, or its subfolders (a run of several ranks)."""
    if is_rank_folder(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if is_rank_folder(p))


def _info(folder: Path) -> tuple[dict[str, Any], int | None]:
    """``profiler_info*.json`` of ``folder`` and the rank its name gives."""
    files = sorted(folder.glob("profiler_info*.json"))
    if not files:
        return {}, None
    found = _INFO_RANK.match(files[0].name)
    info = read_json(files[0], "profiler_info.json")
    if not isinstance(info, dict):
        raise ProfileError(f"{files[0]}: not a JSON object")
    return info, int(found.group(1)) if found else None


def _device_info(folder: Path) -> dict[str, Any]:
    """DeviceInfo of ``PROF_*/device_*/info.json.*`` (core counts, frequency), if any."""
    for path in sorted(folder.glob("PROF_*/device_*/info.json.*")):
        try:
            info = read_json(path, "info.json")
        except ProfileError:
            continue
        devices = info.get("DeviceInfo") if isinstance(info, dict) else None
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            return {"soc_version": info.get("soc_version", ""), **devices[0]}
    return {}


def device_preset(soc_version: str, named: str = "") -> str:
    """The preset a device is (its name, or a soc version a preset has), else ``unknown``."""
    presets = preset_names()
    if named in presets:
        return named
    if soc_version:
        for name in presets:
            if DeviceSpec.preset(name).soc_version.lower() == soc_version.lower():
                return name
        if soc_version.lower() in presets:
            return soc_version.lower()
    return "unknown"


def _meta(folder: Path, info: dict[str, Any], rank: int, base_ns: int) -> dict[str, Any]:
    dev = _device_info(folder)
    soc = str(info.get("soc_version") or dev.get("soc_version") or "")
    meta: dict[str, Any] = {
        "source_format": "ascend_pt",
        "source": str(folder),
        "status": "complete",
        "rank": rank,
        "world_size": whole_number(info.get("world_size"), 1) or 1,
        "device": device_preset(soc, str(info.get("device") or "")),
        "soc_version": soc,
        "run_dir": folder.name,
    }
    found = _FOLDER.match(folder.name)
    if found:
        meta["hostname"], meta["pid"] = found["host"], int(found["pid"])
    if base_ns > 0:
        start = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=base_ns // 1000)
        meta["start_time"] = start.isoformat(timespec="milliseconds")
    for key, field in (("ai_core_num", "ai_core_num"), ("aiv_num", "aiv_num")):
        if whole_number(dev.get(field), 0):
            meta[key] = whole_number(dev.get(field), 0)
    try:
        if dev.get("aic_frequency"):
            meta["aic_frequency_mhz"] = float(dev["aic_frequency"])
    except (TypeError, ValueError):
        pass
    for key in ("torch_npu_version", "cann_version", "torch_version"):
        if info.get(key):
            meta.setdefault("versions", {})[key.removesuffix("_version")] = str(info[key])
    return meta


def whole_number(value: Any, default: int) -> int:
    """``value`` as an integer (a CSV cell, a JSON field), or ``default`` when it is none."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _env(folder: Path) -> dict[str, str]:
    path = folder / "profiler_metadata.json"
    if not path.is_file():
        return {}
    content = read_json(path, "profiler_metadata.json")
    env = content.get("ENV_VARIABLES") if isinstance(content, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


# ---- tasks -------------------------------------------------------------------------------


def _torch_dtypes(values: pd.Series) -> pd.Series:
    def convert(text: str) -> str:
        if not text:
            return ""
        return ";".join(TORCH_DTYPES.get(d.strip(), d.strip().lower()) for d in text.split(";"))

    uniques = {v: convert(v) for v in pd.unique(values)}
    return values.map(uniques)


def collective_op(name: str) -> str:
    """``allreduce`` ... of a collective's name (``hcom_allReduce__844_2_1``), else ''."""
    low = name.lower()
    for needle, op in _COLLECTIVE_OPS:
        if needle in low:
            return op
    return ""


def kernel_tasks(kd: CsvTable, names: dict[str, str] | None = None) -> pd.DataFrame:
    """The tasks of kernel_details.csv (absolute times). ``names``: the file's header names
    of kernel_details' columns where they differ (CANN's op_summary: ``Task Start Time(us)``
    for ``Start Time(us)`` ...)."""
    names = names or {}

    def c(column: str) -> str:
        return names.get(column, column)

    start = kd.ns(c("Start Time(us)"))
    dur = kd.ns(c("Duration(us)"))
    if (dur < 0).any():
        row = int(np.flatnonzero(dur < 0)[0]) + 2
        raise ProfileError(f"{kd.path} row {row} column {c('Duration(us)')!r}: negative duration")
    core = kd.text(c("Accelerator Core"))
    op_type = kd.text(c("Type"))
    name = kd.text(c("Name"))
    coll = core.str.upper().isin(_COLLECTIVE_CORES) | op_type.str.lower().str.startswith("hcom")
    coll = coll.to_numpy()
    block = kd.integer("Block Dim" if kd.has("Block Dim") else "Block Num")
    frame = pd.DataFrame(
        {
            "kind": np.where(coll, "collective", "kernel"),
            "task_type": np.where(coll, "HCCL", core.to_numpy(dtype=object)),
            "name": np.where(coll, op_type.to_numpy(dtype=object), name.to_numpy(dtype=object)),
            "kernel_name": name.to_numpy(dtype=object),
            "op_type": op_type.to_numpy(dtype=object),
            "stream_id": kd.integer("Stream ID"),
            "block_dim": block,
            "start_ns": start,
            "end_ns": start + dur,
            "wait_ns": kd.ns(c("Wait Time(us)")),
            "input_shapes": kd.text("Input Shapes"),
            "input_dtypes": _torch_dtypes(kd.text("Input Data Types")),
            "input_formats": kd.text("Input Formats"),
            "output_shapes": kd.text("Output Shapes"),
            "output_dtypes": _torch_dtypes(kd.text("Output Data Types")),
            "output_formats": kd.text("Output Formats"),
            "op_state": kd.text("OP State").str.lower(),
            "step": kd.integer("Step Id", -1) if kd.has("Step Id") else -1,
            "cube_ns": kd.ns("aic_mac_time(us)"),
            "vector_ns": kd.ns("aiv_vec_time(us)"),
            "memory_ns": np.maximum(
                kd.ns("aic_mte2_time(us)") + kd.ns("aic_fixpipe_time(us)"),
                kd.ns("aiv_mte2_time(us)") + kd.ns("aiv_mte3_time(us)"),
            ),
            "order": np.arange(len(start)),
        }
    )
    frame["collective"] = [
        collective_op(n) if c else "" for n, c in zip(frame["name"], coll, strict=True)
    ]
    frame.loc[~frame["op_state"].isin(["dynamic", "static"]), "op_state"] = ""
    return frame


def _hardware_kind(name: str, task_type: str) -> str:
    upper, ttype = name.upper(), task_type.upper()
    if "MEMCPY" in upper or "MEMCPY" in ttype or ("DMA" in ttype and "MEMSET" not in upper):
        return "memcpy"
    if "MEMSET" in upper:
        return "memset"
    if "EVENT_RECORD" in upper or "EVENT_RECORD" in ttype:
        return "event_record"
    if "EVENT_WAIT" in upper or "EVENT_WAIT" in ttype:
        return "event_wait"
    if ttype in _COLLECTIVE_CORES or upper.startswith("HCOM"):
        return "collective"
    return "kernel"


def _hardware_tasks(tv: TraceView, with_kernels: bool) -> pd.DataFrame:
    """Tasks from the Ascend Hardware events: copies, memsets and event tasks (and kernels and
    collectives when ``with_kernels``: no kernel_details.csv)."""
    return hardware_tasks(tv.hardware, with_kernels)


def hardware_tasks(hw: pd.DataFrame, with_kernels: bool) -> pd.DataFrame:
    """Tasks from device task rows (:attr:`TraceView.hardware`'s columns: name, start, dur,
    stream, task_type, size, operation): copies, memsets and event tasks, and kernels and
    collectives when ``with_kernels``."""
    if hw.empty:
        return pd.DataFrame()
    kind = np.array(
        [_hardware_kind(n, t) for n, t in zip(hw["name"], hw["task_type"], strict=True)],
        dtype=object,
    )
    keep = np.isin(kind, ["kernel", "collective"], invert=True) | with_kernels
    hw, kind = hw[keep], kind[keep]
    copy_kind = hw["operation"].map(_COPY_KIND).fillna("").to_numpy(dtype=object)
    copy_kind = np.where(kind == "memcpy", copy_kind, "")
    op_type = np.array([_COPY_OP_TYPE.get(c, "") for c in copy_kind], dtype=object)
    op_type = np.where(kind == "memcpy", np.where(op_type == "", "MEMCPY", op_type), hw["name"])
    task_type = np.where(np.isin(kind, ["kernel"]), hw["task_type"], "DMA")
    task_type = np.where(np.isin(kind, ["event_record", "event_wait"]), "EVENT", task_type)
    task_type = np.where(kind == "collective", "HCCL", task_type)
    names = hw["name"].to_numpy(dtype=object)
    return pd.DataFrame(
        {
            "kind": kind,
            "task_type": task_type,
            "name": names,
            "kernel_name": names,
            "op_type": op_type,
            "stream_id": hw["stream"].to_numpy(),
            "start_ns": hw["start"].to_numpy(dtype=np.int64),
            "end_ns": (hw["start"] + hw["dur"]).to_numpy(dtype=np.int64),
            "bytes": np.where(kind == "memcpy", hw["size"].to_numpy(dtype=np.int64), 0),
            "copy_kind": copy_kind,
            "collective": [
                collective_op(n) if k == "collective" else ""
                for n, k in zip(names, kind, strict=True)
            ],
            "step": -1,
            "order": 10**12 + np.arange(len(hw)),
        }
    )


def trace_host(tv: TraceView | None) -> pd.DataFrame:
    """The trace's host events (empty without a trace)."""
    if tv is None:
        return pd.DataFrame()
    return host_event_rows(tv, set(zip(tv.flows["s_tid"], tv.flows["s_ts"], strict=True)))


def ordered_tasks(tasks: pd.DataFrame) -> pd.DataFrame:
    """``tasks`` in start order, numbered (``task_id``), with the columns some sources lack
    at their neutral values (bytes, notify wait, launch time, copy kind, collective ...)."""
    tasks = tasks.sort_values(["start_ns", "order"], kind="stable").reset_index(drop=True)
    tasks["task_id"] = np.arange(len(tasks), dtype=np.int64)
    for column in ("bytes", "notify_wait_ns", "launch_ns"):
        if column not in tasks:
            tasks[column] = 0
    tasks["bytes"] = tasks["bytes"].fillna(0).astype(np.int64)
    for column in ("copy_kind", "collective", "algorithm"):
        tasks[column] = tasks[column].fillna("") if column in tasks else ""
    return tasks


def fill_waits(tasks: pd.DataFrame) -> None:
    """``wait_ns`` of the tasks no file gives it (trace tasks): the gap since the previous task
    on the stream ended (in place)."""
    if "wait_ns" not in tasks:
        tasks["wait_ns"] = np.nan
    order = tasks.sort_values(["stream_id", "start_ns", "order"], kind="stable")
    prev_end = order.groupby("stream_id")["end_ns"].shift()
    gap = (order["start_ns"] - prev_end).clip(lower=0).fillna(0)
    missing = order["wait_ns"].isna()
    tasks.loc[order.index[missing.to_numpy()], "wait_ns"] = gap[missing].to_numpy()
    tasks["wait_ns"] = tasks["wait_ns"].astype(np.int64)


# ---- host events -------------------------------------------------------------------------


def _python_end(start: pd.Series, dur: pd.Series) -> np.ndarray:
    """Ends of Python spans: our exports write ``[start, end - 1 ns]`` (closed intervals);
    a real trace's 1 ns more is below its resolution."""
    d = dur.to_numpy(dtype=np.int64)
    return start.to_numpy(dtype=np.int64) + np.where(d > 0, d + 1, d)


def step_rows(tv: TraceView | None) -> pd.DataFrame:
    """The steps table from the trace's ``ProfilerStep#N`` ranges (empty without them)."""
    if tv is None or tv.cpu_ops.empty:
        return pd.DataFrame()
    ops = tv.cpu_ops
    marks = ops[ops["name"].str.startswith(STEP_PREFIX)]
    if marks.empty:
        return pd.DataFrame()
    number = pd.to_numeric(marks["name"].str[len(STEP_PREFIX) :], errors="coerce")
    marks = marks[number.notna().to_numpy()]
    steps = pd.DataFrame(
        {
            "step": number.dropna().astype(np.int64).to_numpy(),
            "start_ns": marks["start"].to_numpy(dtype=np.int64),
            "end_ns": _python_end(marks["start"], marks["dur"]),
            "source": "torch_npu.profiler",
        }
    ).sort_values("step", kind="stable")
    steps = steps.drop_duplicates("step").reset_index(drop=True)
    # a last step without the Optimizer.step every other step holds: the tail after the last
    # step mark (as our own exports write it), not a training step
    opt = ops[ops["name"].str.startswith("Optimizer.step#")]["start"].to_numpy(dtype=np.int64)
    if len(steps) >= 2 and len(opt):
        holds = [
            bool(((opt >= s) & (opt < e)).any())
            for s, e in zip(steps["start_ns"], steps["end_ns"], strict=True)
        ]
        if all(holds[:-1]) and not holds[-1]:
            steps.loc[len(steps) - 1, "source"] = "end of run"
    return steps


def step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose host range holds each time (-1 outside every step)."""
    out = np.full(len(times), -1, dtype=np.int64)
    if steps.empty or not len(times):
        return out
    order = steps.sort_values("start_ns")
    lo = order["start_ns"].to_numpy(dtype=np.int64)
    hi = order["end_ns"].to_numpy(dtype=np.int64)
    i = np.searchsorted(lo, times, side="right") - 1
    ok = (i >= 0) & (times < hi[np.clip(i, 0, None)])
    out[ok] = order["step"].to_numpy(dtype=np.int64)[i[ok]]
    return out


def host_event_rows(tv: TraceView, flow_sources: set[tuple[int, int]]) -> pd.DataFrame:
    """Host events of the trace (absolute times), ordered by start, enclosing spans first."""
    frames = []
    ops = tv.cpu_ops[~tv.cpu_ops["name"].str.startswith(STEP_PREFIX)]
    if len(ops):
        # a flow starts at its op's start: of spans starting there, the innermost is the op
        innermost = (
            ops.assign(order=np.arange(len(ops)))
            .sort_values(["dur", "order"], kind="stable")
            .drop_duplicates(["tid", "start"])["order"]
            .to_numpy()
        )
        linked = np.zeros(len(ops), dtype=bool)
        for i in innermost:
            linked[i] = (int(ops["tid"].iat[i]), int(ops["start"].iat[i])) in flow_sources
        named = ops["name"].str.contains("::", regex=False).to_numpy()
        # torch_npu's annotations are "<what>#<which>" (Optimizer.step#SGD.step ...)
        marked = ops["name"].str.contains("#", regex=False).to_numpy()
        is_op = named | (linked & ~marked)
        frames.append(
            pd.DataFrame(
                {
                    "kind": np.where(is_op, "op", "annotation"),
                    "name": ops["name"].to_numpy(dtype=object),
                    "start_ns": ops["start"].to_numpy(dtype=np.int64),
                    "end_ns": _python_end(ops["start"], ops["dur"]),
                    "thread": ops["tid"].to_numpy(dtype=np.int64),
                    "sequence": ops["sequence"].to_numpy(dtype=np.int64),
                    "input_shapes": ops["shapes"].to_numpy(dtype=object),
                    "input_dtypes": ops["dtypes"].to_numpy(dtype=object),
                    "connection_id": -1,
                    "stream_id": -1,
                }
            )
        )
    if len(tv.python):
        py = tv.python
        frames.append(
            pd.DataFrame(
                {
                    "kind": "python",
                    "name": py["name"].to_numpy(dtype=object),
                    "start_ns": py["start"].to_numpy(dtype=np.int64),
                    "end_ns": _python_end(py["start"], py["dur"]),
                    "thread": py["tid"].to_numpy(dtype=np.int64),
                    "connection_id": -1,
                    "stream_id": -1,
                }
            )
        )
    if len(tv.cann):
        c = tv.cann
        launch = (c["connection_id"] >= 0).to_numpy()
        sync = c["name"].str.startswith("aclrtSynchronize").to_numpy()
        frames.append(
            pd.DataFrame(
                {
                    "kind": np.where(launch, "launch", np.where(sync, "sync", "api")),
                    "name": c["name"].to_numpy(dtype=object),
                    "start_ns": c["start"].to_numpy(dtype=np.int64),
                    "end_ns": (c["start"] + c["dur"]).to_numpy(dtype=np.int64),
                    "thread": c["tid"].to_numpy(dtype=np.int64),
                    "connection_id": c["connection_id"].to_numpy(dtype=np.int64),
                    "stream_id": c["stream_id"].to_numpy(dtype=np.int64),
                }
            )
        )
    if not frames:
        return pd.DataFrame()
    host = pd.concat(frames, ignore_index=True)
    host = host.sort_values(
        ["start_ns", "end_ns"], ascending=[True, False], kind="stable"
    ).reset_index(drop=True)
    host["event_id"] = np.arange(len(host), dtype=np.int64)
    host["parent_id"] = nest_ops(host)
    return host


def nest_ops(host: pd.DataFrame) -> np.ndarray:
    """``parent_id`` of each host event: of an op, the op enclosing it on its thread (the
    time nesting of :func:`~msprof_py.importers.nesting.enclosing`: ``aten::linear`` around
    ``aten::addmm``), else -1."""
    parent = np.full(len(host), -1, dtype=np.int64)
    is_op = (host["kind"] == "op").to_numpy()
    if not is_op.any():
        return parent
    ops = host[is_op]
    at = enclosing(ops["thread"].to_numpy(), ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy())
    ids = ops["event_id"].to_numpy(dtype=np.int64)
    parent[is_op] = np.where(at >= 0, ids[np.clip(at, 0, None)], -1)
    return parent


def link_tasks(tasks: pd.DataFrame, host: pd.DataFrame, tv: TraceView) -> None:
    """Set tasks' ``host_op_id``/``launch_ns`` and launches' ``task_id``/``parent_id`` (in
    place) from the torch_to_npu flows and the launches' connection ids."""
    tasks["host_op_id"] = -1
    if host.empty:
        return
    by_start = {
        (int(s), int(t)): i
        for i, (s, t) in enumerate(zip(tasks["stream_id"], tasks["start_ns"], strict=True))
    }
    by_time: dict[int, int] = {}
    for i, t in enumerate(tasks["start_ns"].tolist()):
        by_time.setdefault(int(t), i)
    ops = host[host["kind"] == "op"]
    # an op is known by (thread, start): of ops starting together the innermost (shortest)
    # that takes any time (a view op of no duration at the start of the op launches nothing)
    op_at: dict[tuple[int, int], int] = {}
    length = ops["end_ns"] - ops["start_ns"]
    shortest = ops.assign(timed=length > 0, back=-length).sort_values(
        ["timed", "back"], kind="stable"
    )
    for eid, thread, start in zip(
        shortest["event_id"], shortest["thread"], shortest["start_ns"], strict=True
    ):
        op_at[(int(thread), int(start))] = int(eid)
    host_op = tasks["host_op_id"].to_numpy(dtype=np.int64).copy()
    for s_tid, s_ts, f_tid, f_ts in tv.flows.itertuples(index=False):
        i = by_start.get((int(f_tid), int(f_ts)), by_time.get(int(f_ts)))
        eid = op_at.get((int(s_tid), int(s_ts)))
        if i is not None and eid is not None:
            host_op[i] = eid
    tasks["host_op_id"] = host_op
    # launches -> tasks: the hardware event with the launch's connection_id
    hw = tv.hardware
    conn_task: dict[int, int] = {}
    for conn, stream, start in zip(hw["connection_id"], hw["stream"], hw["start"], strict=True):
        i = by_start.get((int(stream), int(start)), by_time.get(int(start)))
        if i is not None and conn >= 0:
            conn_task.setdefault(int(conn), i)
    launch_ns = tasks["start_ns"].to_numpy(dtype=np.int64).copy()
    launched = np.zeros(len(tasks), dtype=bool)
    task_id = np.full(len(host), -1, dtype=np.int64)
    parent = (
        host["parent_id"].to_numpy(dtype=np.int64).copy()
        if "parent_id" in host
        else np.full(len(host), -1, dtype=np.int64)
    )
    stream = host["stream_id"].to_numpy(dtype=np.int64).copy()
    kinds = host["kind"].to_numpy(dtype=object)
    ids = tasks["task_id"].to_numpy(dtype=np.int64)
    for j in np.flatnonzero(kinds == "launch"):
        i = conn_task.get(int(host["connection_id"].iat[j]))
        if i is None:
            host.iat[j, host.columns.get_loc("kind")] = "api"
            continue
        task_id[j] = ids[i]
        stream[j] = int(tasks["stream_id"].iat[i])
        end = int(host["end_ns"].iat[j])
        if not launched[i]:
            launch_ns[i] = min(end, int(tasks["start_ns"].iat[i]))
            launched[i] = True
        parent[j] = host_op[i]
    # calls no task names: the shortest op holding their start on their thread
    calls = np.flatnonzero((parent < 0) & np.isin(kinds, ["launch", "sync", "api"]))
    if len(calls) and len(ops):
        at = shortest_holding(
            ops["thread"].to_numpy(),
            ops["start_ns"].to_numpy(),
            ops["end_ns"].to_numpy(),
            host["thread"].to_numpy()[calls],
            host["start_ns"].to_numpy()[calls],
        )
        op_ids = ops["event_id"].to_numpy(dtype=np.int64)
        parent[calls] = np.where(at >= 0, op_ids[np.clip(at, 0, None)], -1)
    host["task_id"] = task_id
    host["parent_id"] = parent
    host["stream_id"] = stream
    # tasks no launch names: launched when their op ended (or as they started)
    op_end = ops.set_index("event_id")["end_ns"]
    unlaunched = ~launched & (host_op >= 0)
    if unlaunched.any():
        ends = pd.Series(host_op[unlaunched]).map(op_end).to_numpy(dtype=np.int64)
        launch_ns[unlaunched] = np.minimum(ends, launch_ns[unlaunched])
    tasks["launch_ns"] = launch_ns


def _rename_tasks(tasks: pd.DataFrame, host: pd.DataFrame) -> None:
    """A kernel named after its op's CANN call (``aclnn<Type>``, as our exports name the
    kernels a framework op launched) takes the op's name (``aten::mm``); copies their op's."""
    if host.empty:
        return
    names = host.set_index("event_id")["name"]
    op_name = tasks["host_op_id"].map(names).fillna("").astype(str)
    framework = op_name.str.contains("::", regex=False)
    aclnn = tasks["kernel_name"] == "aclnn" + tasks["op_type"].astype(str)
    kernel = framework & aclnn & (tasks["kind"] == "kernel")
    tasks.loc[kernel, "name"] = op_name[kernel]
    # copies as the recorder names them: "<op> (H2D)"; a read-back of one value (.item():
    # aten::_local_scalar_dense, 8 bytes or less to the host) "Tensor.item() (<op>) (value)"
    copy = ((op_name != "") & (tasks["kind"] == "memcpy")).to_numpy()
    if copy.any():
        short = tasks["copy_kind"].map(_COPY_SHORT).fillna("copy")
        value = (
            op_name.str.contains("_local_scalar_dense", regex=False)
            & (tasks["copy_kind"] == "DEVICE_TO_HOST")
            & (tasks["bytes"] <= 8)
        )
        named = np.where(
            value, "Tensor.item() (" + op_name + ") (value)", op_name + " (" + short + ")"
        )
        tasks.loc[copy, "name"] = pd.Series(named, index=tasks.index)[copy]
    memset = ((op_name != "") & (tasks["kind"] == "memset")).to_numpy()
    tasks.loc[memset, "name"] = op_name[memset]


# ---- memory ------------------------------------------------------------------------------


def _memory(mr: CsvTable, om: CsvTable | None) -> pd.DataFrame:
    """Allocator events: each memory_record row (PTA) and what changed at it."""
    component = mr.text("Component", "PTA")
    keep = (
        (component == "PTA").to_numpy()
        if (component == "PTA").any()
        else np.ones(len(component), bool)
    )
    time = mr.ns("Timestamp(us)")[keep]
    allocated = np.round(mr.number("Total Allocated(MB)")[keep] * MB).astype(np.int64)
    reserved = np.round(mr.number("Total Reserved(MB)")[keep] * MB).astype(np.int64)
    active = np.round(mr.number("Total Active(MB)")[keep] * MB).astype(np.int64)
    stream = mr.integer("Stream Ptr")[keep] if mr.has("Stream Ptr") else 0
    d_alloc = np.diff(allocated, prepend=0)
    d_res = np.diff(reserved, prepend=0)
    action = np.where(
        d_alloc > 0,
        "malloc",
        np.where(d_alloc < 0, "free", np.where(d_res < 0, "segment_free", "segment_alloc")),
    ).astype(object)
    size = np.where(d_alloc != 0, np.abs(d_alloc), np.abs(d_res))
    frame = pd.DataFrame(
        {
            "time_ns": time,
            "action": action,
            "size": size,
            "allocated": allocated,
            "reserved": reserved,
            "active": active,
            "stream_id": stream,
            "tag": "",
        }
    )
    if om is not None and len(om.frame):
        _blocks(frame, om)
    return frame


def _blocks(frame: pd.DataFrame, om: CsvTable) -> None:
    """Exact sizes and names of mallocs/frees from operator_memory.csv (matched by time and
    the allocated total after them)."""
    name = om.text("Name")
    size = np.round(om.number("Size(KB)") * 1024).astype(np.int64)
    alloc_t = om.ns("Allocation Time(us)")
    alloc_total = np.round(om.number("Allocation Total Allocated(MB)") * MB).astype(np.int64)
    released = om.text("Release Time(us)") != ""
    rel_t = om.ns("Release Time(us)")
    rel_total = np.round(om.number("Release Total Allocated(MB)") * MB).astype(np.int64)
    keys = {}
    for t, a, n, s in zip(alloc_t, alloc_total, name, size, strict=True):
        keys.setdefault(("malloc", int(t), int(a)), (n, s))
    for t, a, n, s, r in zip(rel_t, rel_total, name, size, released, strict=True):
        if r:
            keys.setdefault(("free", int(t), int(a)), (n, s))
    tags = frame["tag"].to_numpy(dtype=object).copy()
    sizes = frame["size"].to_numpy(dtype=np.int64).copy()
    for i, (act, t, a) in enumerate(
        zip(frame["action"], frame["time_ns"], frame["allocated"], strict=True)
    ):
        got = keys.get((act, int(t), int(a)))
        if got is not None:
            tags[i], sizes[i] = got
    frame["tag"], frame["size"] = tags, sizes


# ---- communication -----------------------------------------------------------------------


def _bus_factor(op: str, p: int) -> float:
    if p <= 1:
        return 0.0
    if op == "allreduce":
        return 2 * (p - 1) / p
    if op in ("allgather", "reducescatter"):
        return (p - 1) / p
    return 1.0


def _communication(path: Path, tasks: pd.DataFrame, world: int) -> None:
    """Buffer bytes and notify wait of the collectives from communication.json (in place)."""
    content = read_json(path, "communication.json")
    if not isinstance(content, dict):
        raise ProfileError(f"{path}: not a JSON object")
    per_op: dict[str, tuple[float, float]] = {}
    for step in content.values():
        if not isinstance(step, dict):
            continue
        for group in (step.get("collective"), step.get("p2p")):
            if not isinstance(group, dict):
                continue
            for key, op in group.items():
                if key == "Total Op Info" or not isinstance(op, dict):
                    continue
                time = op.get("Communication Time Info") or {}
                band = op.get("Communication Bandwidth Info") or {}
                sizes = [
                    _float(v.get("Transit Size(MB)"))
                    for k, v in band.items()
                    if isinstance(v, dict) and k in ("RDMA", "HCCS", "PCIE", "SIO")
                ]
                per_op[key.split("@", 1)[0]] = (
                    max(sizes, default=0.0),
                    _float(time.get("Wait Time(ms)")),
                )
    if not per_op:
        return
    coll = tasks["kind"] == "collective"
    for i in np.flatnonzero(coll.to_numpy()):
        got = per_op.get(str(tasks["kernel_name"].iat[i]))
        if got is None:
            continue
        factor = _bus_factor(str(tasks["collective"].iat[i]), world)
        size_mb, wait_ms = got
        if factor > 0:
            tasks.iat[i, tasks.columns.get_loc("bytes")] = round(size_mb * MB / factor)
        tasks.iat[i, tasks.columns.get_loc("notify_wait_ns")] = round(wait_ms * 1e6)


def _float(value: Any) -> float:
    try:
        out = float(str(value))
    except (TypeError, ValueError):
        return 0.0
    return out if np.isfinite(out) else 0.0


# ---- one rank ----------------------------------------------------------------------------


def read_rank(folder: Path) -> tuple[int, dict[str, Any], dict[str, pd.DataFrame], list[str]]:
    """One rank folder: its rank, meta, tables and warnings (see module docs)."""
    out = folder / OUTPUT_DIR
    info, named_rank = _info(folder)
    notes: list[str] = []
    kd_path, tv_path = out / "kernel_details.csv", out / "trace_view.json"
    if not kd_path.is_file() and not tv_path.is_file():
        raise ProfileError(f"{out}: neither kernel_details.csv nor trace_view.json is here")
    kd = read_csv(kd_path, KERNEL_REQUIRED, "kernel_details") if kd_path.is_file() else None
    tv = read_trace(tv_path) if tv_path.is_file() else None
    mr = om = None
    if (out / "memory_record.csv").is_file():
        mr = read_csv(out / "memory_record.csv", MEMORY_REQUIRED, "memory_record")
        if (out / "operator_memory.csv").is_file():
            om = read_csv(out / "operator_memory.csv", OPERATOR_MEMORY_REQUIRED, "operator_memory")
    truncated = [t for t in (kd, mr, om) if t is not None and t.truncated]
    for t in truncated:
        notes += t.notes

    pieces = []
    if kd is not None:
        pieces.append(kernel_tasks(kd))
    if tv is not None:
        pieces.append(_hardware_tasks(tv, with_kernels=kd is None))
    pieces = [p for p in pieces if len(p)]
    tasks = pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame()
    if len(tasks):
        fill_waits(tasks)

    firsts = tv.times() if tv is not None else []
    if len(tasks):
        firsts.append(int(tasks["start_ns"].min()))
    if mr is not None and len(mr.frame):
        firsts.append(int(mr.ns("Timestamp(us)").min()))
    first = min(firsts) if firsts else 0
    begin = whole_number((info.get("start_info") or {}).get("collectionTimeBegin"), -1)
    base = begin if 0 <= first - begin <= _BASE_SLACK_NS else first

    tables: dict[str, pd.DataFrame] = {}
    steps = step_rows(tv)
    host = trace_host(tv)
    if len(tasks):
        tasks = ordered_tasks(tasks)
        tasks["step"] = tasks["step"].fillna(-1).astype(np.int64)
        if tv is not None:
            link_tasks(tasks, host, tv)
            _rename_tasks(tasks, host)
            if tv.algorithms:
                tasks["algorithm"] = tasks["kernel_name"].map(tv.algorithms).fillna("")
        else:
            tasks["launch_ns"] = tasks["start_ns"]
            tasks["host_op_id"] = -1
        world = whole_number(info.get("world_size"), 1) or 1
        tasks["world_size"] = np.where(tasks["kind"] == "collective", world, 0)
        if (out / "communication.json").is_file():
            _communication(out / "communication.json", tasks, world)
    # step of tasks kernel_details gives none: their op's, else by launch time
    if len(host):
        host["step"] = step_of(host["start_ns"].to_numpy(dtype=np.int64), steps)
    if len(tasks) and (tasks["step"] < 0).any() and len(steps):
        no_step = (tasks["step"] < 0).to_numpy()
        by_op = tasks["host_op_id"].map(host.set_index("event_id")["step"]) if len(host) else None
        guess = step_of(tasks["launch_ns"].to_numpy(dtype=np.int64), steps)
        if by_op is not None:
            guess = np.where(by_op.notna(), by_op.fillna(-1).to_numpy(dtype=np.int64), guess)
        tasks.loc[no_step, "step"] = guess[no_step]
    memory = _memory(mr, om) if mr is not None else pd.DataFrame()
    if len(memory):
        memory["step"] = step_of(memory["time_ns"].to_numpy(dtype=np.int64), steps)

    for frame, columns in (
        (tasks, ("start_ns", "end_ns", "launch_ns")),
        (host, ("start_ns", "end_ns")),
        (steps, ("start_ns", "end_ns")),
        (memory, ("time_ns",)),
    ):
        if len(frame):
            for column in columns:
                frame[column] = frame[column].astype(np.int64) - base
    if len(memory):
        memory["time_ns"] = memory["time_ns"].clip(lower=0)
        memory.loc[memory["step"] >= 0, "step"] = memory["step"]
    tables = {"tasks": tasks, "host_events": host, "steps": steps, "memory": memory}
    rank = named_rank if named_rank is not None else whole_number(info.get("rank_id"), 0)
    if rank < 0:
        rank = 0
    meta = _meta(folder, info, rank, base)
    meta["env"] = _env(folder)
    ends = [int(f[c].max()) for f, c in ((tasks, "end_ns"), (host, "end_ns")) if len(f)]
    meta["device_end_ns"] = int(tasks["end_ns"].max()) if len(tasks) else 0
    meta["host_end_ns"] = max(ends, default=0)
    if truncated:
        meta["status"] = "partial"
    return rank, meta, tables, notes
