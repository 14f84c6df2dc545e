"""A Chrome / Perfetto trace of a stored profile (``chrome://tracing``, ui.perfetto.dev).

``{"traceEvents": [...], "displayTimeUnit": "ns"}`` with numeric timestamps in µs relative to
the profile's time origin (0 = start of the simulated device). Per rank, three processes:

* ``Host``: one thread per host thread; ops, annotations, launches, syncs and measured
  application time as X events (``cat`` = the host event kind), and a ``Steps`` thread with
  one ``Step N`` slice per step;
* ``Device``: one thread per stream (``Stream N``), every task as an X event with its kind,
  task type, op type, block dim, shapes, bytes and FLOPs in ``args``;
* ``Memory``: the allocator's allocated / reserved / active MB as counter events.

Flow arrows (``cat`` ``launch``) lead from each host op to the tasks it launched. With several
ranks, process names carry the rank and pids are ``3 * rank + 1..3``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_py.exporters.trace_events import (
    Text,
    const,
    jint,
    jnum,
    jstr,
    metadata,
    objects,
    thread_metadata,
    write_array,
)
from msprof_py.exporters.window import StepWindow, select_steps
from msprof_py.profile import Profile
from msprof_py.profile.atomic import create_atomically

MB = 1024 * 1024
STEPS_TID = 0


def _us(ns: pd.Series | np.ndarray) -> Text:
    return jnum(np.asarray(ns, dtype=np.float64) / 1000.0)


def _rank_chunks(profile: Profile, rank: int, label: str) -> list[Text]:
    host_pid, device_pid, memory_pid = 3 * rank + 1, 3 * rank + 2, 3 * rank + 3
    h = profile.host_events.sort_values(["start_ns", "event_id"], kind="stable")
    t = profile.tasks.sort_values(["start_ns", "task_id"], kind="stable")
    m = profile.memory.sort_values("time_ns", kind="stable")
    steps = profile.steps.sort_values("step")

    threads = sorted(set(h["thread"].tolist()))
    tid_of = {thread: i + 1 for i, thread in enumerate(threads)}
    recorded = profile.thread_names(rank)

    def thread_label(thread: int) -> str:
        if thread == 0:
            return "Runtime"
        name = recorded.get(int(thread))
        return f"{name} ({thread})" if name else f"Thread {thread}"

    names = [(tid_of[th], thread_label(th), tid_of[th]) for th in threads]
    chunks = [
        metadata(host_pid, f"Host{label}", None, host_pid),
        thread_metadata(host_pid, [(STEPS_TID, "Steps", 0), *names]),
    ]
    if len(steps):
        chunks.append(
            objects(
                {
                    "ph": const("X"),
                    "cat": const("step"),
                    "name": jstr("Step " + steps["step"].astype(str)),
                    "pid": str(host_pid),
                    "tid": str(STEPS_TID),
                    "ts": _us(steps["start_ns"]),
                    "dur": _us(steps["end_ns"] - steps["start_ns"]),
                    "args": objects({"source": jstr(steps["source"])}, len(steps)),
                },
                len(steps),
            )
        )
    if len(h):
        tid = h["thread"].map(tid_of)
        chunks.append(
            objects(
                {
                    "ph": const("X"),
                    "cat": jstr(h["kind"]),
                    "name": jstr(h["name"]),
                    "pid": str(host_pid),
                    "tid": jint(tid),
                    "ts": _us(h["start_ns"]),
                    "dur": _us(h["end_ns"] - h["start_ns"]),
                    "args": objects(
                        {
                            "event_id": jint(h["event_id"]),
                            "step": jint(h["step"]),
                            "stream": jint(h["stream_id"]),
                            "task_id": jint(h["task_id"]),
                            "input_shapes": jstr(h["input_shapes"].fillna("")),
                            "input_dtypes": jstr(h["input_dtypes"].fillna("")),
                            "module": jstr(h["module"].fillna("")),
                        },
                        len(h),
                    ),
                },
                len(h),
            )
        )

    streams = sorted(set(t["stream_id"].tolist()))
    chunks.append(metadata(device_pid, f"Device{label}", None, device_pid))
    chunks.append(thread_metadata(device_pid, [(s, f"Stream {s}", s) for s in streams]))
    if len(t):
        chunks.append(
            objects(
                {
                    "ph": const("X"),
                    "cat": jstr(t["kind"]),
                    "name": jstr(t["name"]),
                    "pid": str(device_pid),
                    "tid": jint(t["stream_id"]),
                    "ts": _us(t["start_ns"]),
                    "dur": _us(t["end_ns"] - t["start_ns"]),
                    "args": objects(
                        {
                            "task_id": jint(t["task_id"]),
                            "task_type": jstr(t["task_type"]),
                            "op_type": jstr(t["op_type"]),
                            "block_dim": jint(t["block_dim"]),
                            "wait_us": _us(t["wait_ns"]),
                            "launch_us": _us(t["launch_ns"]),
                            "flops": jnum(t["flops"]),
                            "bytes": jint(t["bytes"]),
                            "input_shapes": jstr(t["input_shapes"].fillna("")),
                            "input_dtypes": jstr(t["input_dtypes"].fillna("")),
                            "input_formats": jstr(t["input_formats"].fillna("")),
                            "output_shapes": jstr(t["output_shapes"].fillna("")),
                            "step": jint(t["step"]),
                        },
                        len(t),
                    ),
                },
                len(t),
            )
        )

    if len(m):
        chunks.append(metadata(memory_pid, f"Memory{label}", None, memory_pid))
        chunks.append(
            objects(
                {
                    "ph": const("C"),
                    "name": const("Device memory (MB)"),
                    "pid": str(memory_pid),
                    "tid": const(0),
                    "ts": _us(m["time_ns"]),
                    "args": objects(
                        {
                            "allocated": jnum(m["allocated"] / MB),
                            "reserved": jnum(m["reserved"] / MB),
                            "active": jnum(m["active"] / MB),
                        },
                        len(m),
                    ),
                },
                len(m),
            )
        )

    ops = h[h["kind"] == "op"][["event_id", "thread", "start_ns"]]
    linked = t[t["host_op_id"] >= 0][["task_id", "host_op_id", "stream_id", "start_ns"]]
    linked = linked.merge(ops, left_on="host_op_id", right_on="event_id", suffixes=("", "_op"))
    if len(linked):
        n = len(linked)
        flow_id = jint((np.int64(rank) << np.int64(40)) | linked["task_id"].to_numpy(np.int64))
        common = {"cat": const("launch"), "name": const("launch")}
        chunks.append(
            objects(
                {
                    "ph": const("s"),
                    **common,
                    "id": flow_id,
                    "pid": str(host_pid),
                    "tid": jint(linked["thread"].map(tid_of)),
                    "ts": _us(linked["start_ns_op"]),
                },
                n,
            )
        )
        chunks.append(
            objects(
                {
                    "ph": const("f"),
                    "bp": const("e"),
                    **common,
                    "id": flow_id,
                    "pid": str(device_pid),
                    "tid": jint(linked["stream_id"]),
                    "ts": _us(linked["start_ns"]),
                },
                n,
            )
        )
    return chunks


def write_chrome_trace(
    profile: Profile,
    path: str | Path,
    rank: int | None = None,
    *,
    overwrite: bool = False,
    steps: StepWindow | None = None,
) -> Path:
    """Write a Chrome/Perfetto trace of ``profile`` (all ranks, or only ``rank``) to ``path``.

    A path ending in ``.gz`` is written gzip-compressed (Perfetto and chrome://tracing open
    ``.json.gz`` as is). ``steps``: only those steps (:class:`StepWindow`). Refuses to
    overwrite an existing file (``FileExistsError``) unless ``overwrite``; the file appears
    whole or not at all. Returns the path.
    """
    path = Path(path)
    profile = select_steps(profile, steps)
    ranks = profile.ranks if rank is None else [rank]
    chunks: list[Text] = []
    for r in ranks:
        label = f" (rank {r})" if len(profile.ranks) > 1 else ""
        chunks.extend(_rank_chunks(profile.for_rank(r), r, label))
    with create_atomically(path, "xb", overwrite=overwrite) as raw:
        if path.suffix == ".gz":  # fixed header (no time stamp): the same trace, the same bytes
            out = gzip.GzipFile(
                filename=path.stem, mode="wb", fileobj=raw, mtime=0, compresslevel=3
            )
        else:
            out = raw
        out.write(b'{"displayTimeUnit": "ns", "traceEvents": ')
        write_array(out, chunks)
        out.write(b"}\n")
        if out is not raw:
            out.close()  # the gzip trailer; ``raw`` stays open for create_atomically
    return path
