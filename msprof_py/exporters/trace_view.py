"""``trace_view.json`` (torch_npu) and ``msprof_{ts}.json`` (CANN): Chrome traces as bare arrays.

Processes, as torch_npu and msprof lay them out (pids: the Python process uses the OS pid, the
CANN layers msprof's encoding ``(pid << 10) | (sort_index << 5) | device_id``, 31 = host):

* ``Python`` (sort 0, CPU): host ops and annotations as ``cpu_op`` X events with args
  ``Sequence number``, ``Fwd thread id``, ``Input Dims``, ``Input type``; steps as
  ``ProfilerStep#N``; measured application time as ``python_function`` events.
* ``CANN`` (7, CPU, host device 31): ``AscendCL@<api>`` spans of launches and host syncs
  (API names: :mod:`msprof_py.exporters.naming`), ``HCCL@Hccl<Op>`` for collectives, and a
  ``Node@launch`` per kernel launch (over the same host span: the profile does not split a
  launch call further).
* ``Ascend Hardware`` (14, ``NPU <dev>``): one thread ``Stream <id>`` per stream, every task
  with args ``Model Id``, ``Task Type``, ``Stream Id``, ``Physic Stream Id``, ``Task Id``,
  ``Batch Id``, ``Subtask Id``, ``connection_id`` (copies add ``size(B)``,
  ``bandwidth(GB/s)``, ``operation``).
* ``Communication`` (16): collectives on thread ``Group <group> Communication``.
* ``Overlap Analysis`` (31): tids 0-3 ``Computing``, ``Communication``,
  ``Communication(Not Overlapped)``, ``Free`` (:mod:`msprof_py.exporters.overlap`).

Flows: ``HostToDevice<id>`` (cat ``HostToDevice``) from each launch to its task, and in
trace_view ``torch_to_npu`` (cat ``async_npu``, ``s`` on the host op, ``f`` on the task, id =
the task's timestamp) from each host op to the tasks it launched. Timestamps are absolute µs
text (:mod:`msprof_py.exporters.runinfo`); durations JSON numbers in µs.

Host spans in the profile are half-open ``[start, end)``: on the modelled host clock the next
op starts at the very ns the previous one ends, and steps are back to back. Readers of
trace_view (msprof-analyze's op tree) treat an event's end as inclusive and would nest an op
that starts where another ends inside it, so ``Python`` X events are written as the closed
interval ``[start, end - 1 ns]``. Device tasks and every CSV keep exact durations.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from msprof_py.exporters import naming
from msprof_py.exporters.frames import ExportData
from msprof_py.exporters.overlap import OVERLAP_TIDS, sections_frame
from msprof_py.exporters.runinfo import HOST_DEVICE_ID, NO_MODEL_ID
from msprof_py.exporters.trace_events import (
    ArrayWriter,
    Text,
    concat,
    const,
    emit,
    jint,
    jquote,
    jstr,
    metadata,
    objects,
    thread_metadata,
    us_text,
)

PYTHON_SORT, CANN_SORT, HARDWARE_SORT, COMMUNICATION_SORT, OVERLAP_SORT = 0, 7, 14, 16, 31
#: name of the communication group of collectives over all ranks (HCCL's world group)
WORLD_GROUP = "hccl_world_group"
_COPY_OPERATION = {
    "HOST_TO_DEVICE": "host to device",
    "DEVICE_TO_HOST": "device to host",
    "DEVICE_TO_DEVICE": "device to device",
    "HOST_TO_HOST": "host to host",
}


class Pids:
    """The pids of one export's processes."""

    def __init__(self, data: ExportData) -> None:
        info = data.info
        self.python = info.pid
        self.cann = info.format_pid(CANN_SORT, HOST_DEVICE_ID)
        self.hardware = info.format_pid(HARDWARE_SORT)
        self.communication = info.format_pid(COMMUNICATION_SORT)
        self.overlap = info.format_pid(OVERLAP_SORT)
        self.npu_label = f"NPU {info.device_id}"


def _ts(data: ExportData, ns: pd.Series | np.ndarray) -> Text:
    return jquote(data.info.ts_text(np.asarray(ns)))


def _dur(ns: pd.Series | np.ndarray) -> Text:
    return us_text(np.asarray(ns))


def _span_dur(start: pd.Series, end: pd.Series) -> Text:
    """Durations of host spans written as closed intervals (see module docs)."""
    ns = (end - start).to_numpy(dtype=np.int64)
    return us_text(np.where(ns > 0, ns - 1, ns))


def _thread_sort(tids: list[int]) -> list[tuple[int, str, int]]:
    return [(tid, f"Thread {tid}", i) for i, tid in enumerate(sorted(tids))]


# ---- Python process ---------------------------------------------------------------------


def python_events(data: ExportData, pids: Pids) -> Iterator[Text]:
    """The ``Python`` process: steps, host ops and annotations, application time."""
    ops = data.host_ops
    main = data.main_thread
    steps = data.profile.steps.sort_values("step")
    h = data.profile.host_events
    py = h[h["kind"] == "python"]
    threads = set(ops["thread"].tolist()) | {main}
    threads.discard(0)
    yield metadata(pids.python, "Python", "CPU", PYTHON_SORT)
    yield thread_metadata(pids.python, _thread_sort(sorted(threads)))
    x, pid = const("X"), str(pids.python)
    if len(steps):
        yield objects(
            {
                "ph": x,
                "name": jstr("ProfilerStep#" + steps["step"].astype(str)),
                "pid": pid,
                "tid": str(main),
                "ts": _ts(data, steps["start_ns"]),
                "dur": _span_dur(steps["start_ns"], steps["end_ns"]),
                "cat": const("cpu_op"),
                "args": const({"Sequence number": -1, "Fwd thread id": 0}),
            },
            len(steps),
        )
    if len(ops):
        yield objects(
            {
                "ph": x,
                "name": jstr(ops["name"]),
                "pid": pid,
                "tid": jint(ops["thread"].where(ops["thread"] != 0, main)),
                "ts": _ts(data, ops["start_ns"]),
                "dur": _span_dur(ops["start_ns"], ops["end_ns"]),
                "cat": const("cpu_op"),
                "args": _op_args(ops),
            },
            len(ops),
        )
    if len(py):
        yield objects(
            {
                "ph": x,
                "name": jstr(py["name"]),
                "pid": pid,
                "tid": str(main),
                "ts": _ts(data, py["start_ns"]),
                "dur": _span_dur(py["start_ns"], py["end_ns"]),
                "cat": const("python_function"),
                "args": const({}),
            },
            len(py),
        )


def _op_args(ops: pd.DataFrame) -> Text:
    """``args`` of host ops, as torch_npu writes them (``;`` followed by CRLF in shapes)."""
    shapes = ops["input_shapes"].fillna("").astype(str)
    dtypes = ops["input_dtypes"].fillna("").astype(str)
    seq = jint(ops["sequence"])
    plain = concat('{"Sequence number":', seq, ',"Fwd thread id":0}')
    dims = jstr(shapes.str.replace(";", ";\r\n", regex=False))
    types = jstr(dtypes.str.replace(";", ";\r\n", regex=False))
    full = concat(
        '{"Sequence number":',
        seq,
        ',"Fwd thread id":0,"Input Dims":',
        dims,
        ',"Input type":',
        types,
        "}",
    )
    args = pc.if_else(pa.array((shapes != "").to_numpy()), full, plain)
    stacks = naming.call_stacks(ops)
    has_stack = stacks != ""
    if not has_stack.any():
        return args
    # '{... }' -> '{...,"Call stack":"..."}' where the op has a stack
    with_stack = concat(pc.utf8_slice_codeunits(args, 0, -1), ',"Call stack":', jstr(stacks), "}")
    return pc.if_else(pa.array(has_stack), with_stack, args)


def torch_to_npu_flows(data: ExportData, pids: Pids) -> Iterator[Text]:
    """``torch_to_npu`` flows from each host op to the tasks it launched."""
    ops = data.host_ops
    ops = ops[ops["kind"] == "op"][["event_id", "thread", "start_ns"]]
    tasks = data.tasks[data.tasks["host_op_id"] >= 0][["host_op_id", "stream_id", "ts"]]
    linked = tasks.merge(ops, left_on="host_op_id", right_on="event_id", how="inner")
    if linked.empty:
        return
    n = len(linked)
    task_ts = jquote(linked["ts"])
    tid = linked["thread"].where(linked["thread"] != 0, data.main_thread)
    common = {"bp": const("e"), "name": const("torch_to_npu"), "cat": const("async_npu")}
    yield objects(
        {
            "ph": const("s"),
            **common,
            "id": task_ts,
            "pid": str(pids.python),
            "tid": jint(tid),
            "ts": _ts(data, linked["start_ns"]),
        },
        n,
    )
    yield objects(
        {
            "ph": const("f"),
            **common,
            "id": task_ts,
            "pid": str(pids.hardware),
            "tid": jint(linked["stream_id"]),
            "ts": task_ts,
        },
        n,
    )


# ---- CANN layers --------------------------------------------------------------------------


def cann_events(data: ExportData, pids: Pids) -> Iterator[Text]:
    """The ``CANN`` process: API spans of launches and syncs, ``Node@launch``, and the
    ``HostToDevice`` flows from launches to their tasks."""
    launches = data.launches
    syncs = data.syncs
    threads = set(launches["thread"].tolist()) | set(syncs["thread"].tolist())
    if not threads:
        return
    yield metadata(pids.cann, "CANN", "CPU", CANN_SORT)
    yield thread_metadata(pids.cann, _thread_sort(sorted(threads)))
    x, pid = const("X"), str(pids.cann)
    if len(launches):
        n = len(launches)
        api = launches["api"].to_numpy(dtype=object)
        level = naming.api_level(api)
        ts = _ts(data, launches["start_ns"])
        dur = _dur(launches["end_ns"] - launches["start_ns"])
        tid = jint(launches["thread"])
        conn = jint(launches["task_id"])
        prefixed = pd.Series(np.where(level == "hccl", "HCCL@", "AscendCL@"), dtype=object) + api
        yield objects(
            {
                "ph": x,
                "name": jstr(prefixed),
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": concat(
                    '{"Thread Id":', tid, ',"level":', jstr(level), ',"connection_id":', conn, "}"
                ),
            },
            n,
        )
        kernel = (launches["task_kind"] == "kernel").to_numpy()
        if kernel.any():
            k = pa.array(kernel)
            k_tid = tid.filter(k)
            yield objects(
                {
                    "ph": x,
                    "name": const("Node@launch"),
                    "pid": pid,
                    "tid": k_tid,
                    "ts": ts.filter(k),
                    "dur": dur.filter(k),
                    "args": concat(
                        '{"Thread Id":',
                        k_tid,
                        ',"level":"node","item_id":',
                        jstr(launches["name"][kernel]),
                        ',"connection_id":',
                        conn.filter(k),
                        "}",
                    ),
                },
                int(kernel.sum()),
            )
        flow_id = jquote(conn)
        flow_name = concat('"HostToDevice', conn, '"')
        common = {"cat": const("HostToDevice"), "bp": const("e")}
        yield objects(
            {
                "ph": const("s"),
                "name": flow_name,
                **common,
                "id": flow_id,
                "pid": pid,
                "tid": tid,
                "ts": ts,
            },
            n,
        )
        yield objects(
            {
                "ph": const("f"),
                "name": flow_name,
                **common,
                "id": flow_id,
                "pid": str(pids.hardware),
                "tid": jint(launches["task_stream"]),
                "ts": jquote(launches["task_ts"]),
            },
            n,
        )
    if len(syncs):
        s_tid = jint(syncs["thread"])
        yield objects(
            {
                "ph": x,
                "name": jstr("AscendCL@" + syncs["api"].astype(str)),
                "pid": pid,
                "tid": s_tid,
                "ts": _ts(data, syncs["start_ns"]),
                "dur": _dur(syncs["end_ns"] - syncs["start_ns"]),
                "args": concat(
                    '{"Thread Id":',
                    s_tid,
                    ',"level":"acl","Stream Id":',
                    jint(syncs["stream_id"]),
                    "}",
                ),
            },
            len(syncs),
        )


def hardware_events(data: ExportData, pids: Pids) -> Iterator[Text]:
    """The ``Ascend Hardware`` process: every task, one thread per stream."""
    t = data.tasks
    if t.empty:
        return
    streams = sorted(set(t["stream_id"].tolist()))
    yield metadata(pids.hardware, "Ascend Hardware", pids.npu_label, HARDWARE_SORT)
    yield thread_metadata(pids.hardware, [(s, f"Stream {s}", s) for s in streams])
    stream = jint(t["stream_id"])
    task_id = jint(t["task_id"])
    copy = (t["kind"] == "memcpy").to_numpy()
    dur_ns = t["dur_ns"].to_numpy(dtype=np.float64)
    nbytes = t["bytes"].to_numpy(dtype=np.float64)
    bandwidth = np.divide(nbytes, dur_ns, out=np.zeros_like(dur_ns), where=dur_ns > 0)  # GB/s
    copy_args = concat(
        ',"size(B)":',
        jint(t["bytes"]),
        ',"bandwidth(GB/s)":',
        pc.cast(pa.array(np.round(bandwidth, 6)), pa.string()),
        ',"operation":',
        jstr(t["copy_kind"].map(_COPY_OPERATION).fillna("other")),
    )
    extra = pc.if_else(pa.array(copy), copy_args, "")
    args = concat(
        '{"Model Id":',
        str(NO_MODEL_ID),
        ',"Task Type":',
        jstr(t["hw_type"]),
        ',"Stream Id":',
        stream,
        ',"Physic Stream Id":',
        stream,
        ',"Task Id":',
        task_id,
        ',"Batch Id":0,"Subtask Id":',
        str(NO_MODEL_ID),
        ',"connection_id":',
        task_id,
        extra,
        "}",
    )
    yield objects(
        {
            "ph": const("X"),
            "name": jstr(t["kernel_name"]),
            "pid": str(pids.hardware),
            "tid": stream,
            "ts": jquote(t["ts"]),
            "dur": _dur(t["dur_ns"]),
            "args": args,
        },
        len(t),
    )


def communication_events(data: ExportData, pids: Pids) -> Iterator[Text]:
    """The ``Communication`` process: collectives of the world group (none: no process)."""
    t = data.tasks
    c = t[t["kind"] == "collective"]
    if c.empty:
        return
    tid = 0
    yield metadata(pids.communication, "Communication", pids.npu_label, COMMUNICATION_SORT)
    yield thread_metadata(pids.communication, [(tid, f"Group {WORLD_GROUP} Communication", 0)])
    yield objects(
        {
            "ph": const("X"),
            "name": jstr(c["kernel_name"]),
            "pid": str(pids.communication),
            "tid": str(tid),
            "ts": jquote(c["ts"]),
            "dur": _dur(c["dur_ns"]),
            "args": objects(
                {
                    "connection_id": jint(c["task_id"]),
                    "model id": const(NO_MODEL_ID),
                    "alg_type": jstr(c["algorithm"]),
                    "Stream Id": jint(c["stream_id"]),
                    "Task Id": jint(c["task_id"]),
                },
                len(c),
            ),
        },
        len(c),
    )


def overlap_events(data: ExportData, pids: Pids) -> Iterator[Text]:
    """The ``Overlap Analysis`` process."""
    frame = sections_frame(data.sections)
    if frame.empty:
        return
    yield metadata(pids.overlap, "Overlap Analysis", pids.npu_label, OVERLAP_SORT)
    yield thread_metadata(pids.overlap, [(tid, name, tid) for name, tid in OVERLAP_TIDS.items()])
    yield objects(
        {
            "ph": const("X"),
            "name": jstr(frame["kind"]),
            "pid": str(pids.overlap),
            "tid": jint(frame["kind"].map(OVERLAP_TIDS)),
            "ts": _ts(data, frame["start_ns"]),
            "dur": _dur(frame["end_ns"] - frame["start_ns"]),
        },
        len(frame),
    )


def cann_layer_events(data: ExportData, pids: Pids) -> Iterator[Text]:
    """Everything msprof's own timeline holds (CANN, hardware, communication, overlap)."""
    yield from cann_events(data, pids)
    yield from hardware_events(data, pids)
    yield from communication_events(data, pids)
    yield from overlap_events(data, pids)


def write_timelines(
    data: ExportData, trace_view: Path | None = None, msprof: Path | None = None
) -> None:
    """Write ``trace_view.json`` and/or CANN's ``msprof_{ts}.json`` (bare JSON arrays; the
    CANN layers are built once for both). Existing files are never overwritten."""
    pids = Pids(data)
    files = []
    try:
        tv = ms = None
        if trace_view is not None:
            files.append(open(trace_view, "xb"))  # noqa: SIM115 - closed in finally
            tv = ArrayWriter(files[-1])
        if msprof is not None:
            files.append(open(msprof, "xb"))  # noqa: SIM115 - closed in finally
            ms = ArrayWriter(files[-1])
        both = [w for w in (tv, ms) if w is not None]
        if tv is not None:
            for events in python_events(data, pids):
                emit([tv], events)
        for events in cann_layer_events(data, pids):
            emit(both, events)
        if tv is not None:
            for events in torch_to_npu_flows(data, pids):
                emit([tv], events)
        for writer in both:
            writer.close()
    finally:
        for f in files:
            f.close()
