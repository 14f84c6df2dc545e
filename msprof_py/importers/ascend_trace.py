"""``trace_view.json`` (torch_npu) / ``msprof_*.json`` (CANN) read into plain event frames.

The trace is a bare JSON array of Chrome events. Processes are told apart by their
``process_name`` metadata: ``Python`` (framework ops ``cat:"cpu_op"``, ``ProfilerStep#N``,
``python_function``), ``CANN`` (``AscendCL@<api>`` / ``HCCL@<api>`` host calls, their
``connection_id`` naming the device task they submitted), ``Ascend Hardware`` (the device
tasks, one thread per stream), ``Communication`` (collectives with ``alg_type``). Flows
``torch_to_npu`` (cat ``async_npu``) link a framework op (``s``) to a task (``f``) by thread and
timestamp. Times are integer ns on the file's own clock (absolute, not yet rebased).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from msprof_py.importers.ascend_files import ns_value, read_json
from msprof_py.profile import ProfileError

PYTHON, CANN, HARDWARE, COMMUNICATION = "Python", "CANN", "Ascend Hardware", "Communication"
STEP_PREFIX = "ProfilerStep#"


@dataclass
class TraceView:
    """The events of one trace that the importer uses (times: absolute ns)."""

    path: Path
    #: cpu_op X events of the Python process: name, start, dur, tid, sequence, shapes, dtypes
    cpu_ops: pd.DataFrame
    #: python_function X events: name, start, dur, tid
    python: pd.DataFrame
    #: CANN host calls: name (without the layer prefix), layer, start, dur, tid,
    #: connection_id, stream_id
    cann: pd.DataFrame
    #: device tasks: name, start, dur, stream, task_type, connection_id, size, operation
    hardware: pd.DataFrame
    #: torch_to_npu flows: s_tid, s_ts (the op), f_tid, f_ts (the task)
    flows: pd.DataFrame
    #: collective name -> algorithm (Communication process ``alg_type``)
    algorithms: dict[str, str]

    def times(self) -> list[int]:
        """The earliest start of each frame (for the time base)."""
        out = []
        for frame in (self.cpu_ops, self.python, self.cann, self.hardware):
            if len(frame):
                out.append(int(frame["start"].min()))
        return out


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        try:
            return int(float(str(value)))
        except (TypeError, ValueError):
            return default


def _dims(value: Any) -> str:
    """torch_npu ``Input Dims`` / ``Input type`` as the profile's ``"2,3;4"`` text."""
    if value is None:
        return ""
    if isinstance(value, list):
        parts = []
        for item in value:
            if isinstance(item, list):
                parts.append(",".join(str(v) for v in item))
            else:
                parts.append(str(item))
        return ";".join(parts)
    return ";".join(p.strip() for p in str(value).replace("\r\n", "\n").split(";\n")).strip()


def read_trace(path: Path) -> TraceView:
    """The events of the trace at ``path`` (see module docs); damaged content is a one-line
    :class:`ProfileError` naming the event."""
    msprof = path.name.startswith("msprof")
    what = "msprof timeline (msprof_*.json)" if msprof else "trace_view.json"
    events = read_json(path, what)
    if isinstance(events, dict) and isinstance(events.get("traceEvents"), list):
        events = events["traceEvents"]
    if not isinstance(events, list):
        raise ProfileError(f"{path}: a trace is a JSON array of events, this is not one")
    names: dict[Any, str] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            names[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
    cpu_ops: list[tuple] = []
    python: list[tuple] = []
    cann: list[tuple] = []
    hardware: list[tuple] = []
    algorithms: dict[str, str] = {}
    starts: dict[str, tuple] = {}
    ends: dict[str, tuple] = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise ProfileError(f"{path} event {i}: not a JSON object")
        ph = e.get("ph")
        if ph not in ("X", "s", "f"):
            continue
        where = f"{path} event {i} ({str(e.get('name', ''))[:40]!r})"
        if "ts" not in e:
            raise ProfileError(f"{where}: no 'ts'")
        ts = ns_value(e["ts"], f"{where} 'ts'")
        if ph in ("s", "f"):
            if e.get("cat") == "async_npu" or e.get("name") == "torch_to_npu":
                key = str(e.get("id"))
                (starts if ph == "s" else ends)[key] = (_int(e.get("tid")), ts)
            continue
        dur = ns_value(e.get("dur", 0), f"{where} 'dur'")
        if dur < 0:
            raise ProfileError(f"{where}: negative 'dur'")
        process = names.get(e.get("pid"), "")
        name = str(e.get("name", ""))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        tid = _int(e.get("tid"), 0)
        if process == PYTHON or (not process and e.get("cat") == "cpu_op"):
            if e.get("cat") == "python_function":
                python.append((name, ts, dur, tid))
            elif e.get("cat") in ("cpu_op", None):
                cpu_ops.append(
                    (
                        name,
                        ts,
                        dur,
                        tid,
                        _int(args.get("Sequence number"), -1),
                        _dims(args.get("Input Dims")),
                        _dims(args.get("Input type")),
                    )
                )
        elif process == CANN:
            layer, _, api = name.partition("@")
            if layer in ("AscendCL", "HCCL") and api:
                cann.append(
                    (
                        api,
                        layer,
                        ts,
                        dur,
                        tid,
                        _int(args.get("connection_id"), -1),
                        _int(args.get("Stream Id"), -1),
                    )
                )
        elif process == HARDWARE:
            hardware.append(
                (
                    name,
                    ts,
                    dur,
                    _int(args.get("Stream Id", tid), tid),
                    str(args.get("Task Type", "")),
                    _int(args.get("connection_id", args.get("Task Id")), -1),
                    _int(args.get("size(B)"), 0),
                    str(args.get("operation", "")),
                )
            )
        elif process == COMMUNICATION and args.get("alg_type"):
            algorithms[name] = str(args["alg_type"])
    flows = [(*starts[k], *ends[k]) for k in starts if k in ends]
    return TraceView(
        path,
        pd.DataFrame(
            cpu_ops, columns=["name", "start", "dur", "tid", "sequence", "shapes", "dtypes"]
        ),
        pd.DataFrame(python, columns=["name", "start", "dur", "tid"]),
        pd.DataFrame(
            cann,
            columns=["name", "layer", "start", "dur", "tid", "connection_id", "stream_id"],
        ),
        pd.DataFrame(
            hardware,
            columns=[
                "name",
                "start",
                "dur",
                "stream",
                "task_type",
                "connection_id",
                "size",
                "operation",
            ],
        ),
        pd.DataFrame(flows, columns=["s_tid", "s_ts", "f_tid", "f_ts"]),
        algorithms,
    )
