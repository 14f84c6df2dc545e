"""Synchronisation points: where the host blocked on the device, and for how long.

Every host ``sync`` span is one point. Its kind comes from the op that made it (the span's
parent) and the span's name:

* ``synchronize``: an explicit ``torch.npu.synchronize()`` / stream or event synchronize
  (CANN's ``aclrtSynchronize*``; in imported CUDA traces ``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, ``cudaEventSynchronize`` and the driver's ``cu*Synchronize``);
* ``.item()``: a value read back (``aten::_local_scalar_dense``: the sync's name or its op);
* ``pageable copy``: a copy from or to pageable host memory, which blocks until it is done;
* ``blocking copy``: another copy the host waits for (``.cpu()``, ``non_blocking=False``; in
  CUDA traces also a synchronous ``cudaMemcpy`` call, which returns when its copy is done);
* ``queue full``: the host ran ahead of the device and waited for room in a full stream or
  task queue (back-pressure, not a sync the script asked for: a loop without any sync that
  keeps the device busy shows these);
* ``other``: anything else.

A device-side wait (``aclrtStreamWaitEvent``, ``cudaStreamWaitEvent``: one stream waits for
another's event) does not block the host: it is no sync point.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import MEMCPY, RankData, share_of
from msprof_py.analyzers.modules import module_labels

KINDS = ("synchronize", ".item()", "pageable copy", "blocking copy", "other", "queue full")
#: the runtime's names of the waits for room in a full queue
QUEUE_FULL = ("stream queue full", "task queue full")
#: explicit synchronisations: CANN's, the CUDA runtime's and the CUDA driver's
EXPLICIT = re.compile(
    r"^(?:aclrtSynchronize|cuda(?:Stream|Device|Event|Thread|Ctx)Synchronize"
    r"|cu(?:Stream|Event|Ctx)Synchronize)"
)
#: synchronous copies of the CUDA runtime and driver (not ``...Async``): the host waits
BLOCKING_COPY = re.compile(r"^(?:cudaMemcpy|cuMemcpy)(?!.*Async)")
#: device-side waits: a stream waits for an event, the host does not
DEVICE_WAIT = re.compile(r"StreamWaitEvent|StreamWaitValue")
#: ops that read one value back (``Tensor.item()``)
VALUE_READ_OPS = re.compile(r"_local_scalar_dense|^aten::item$")
SUMMARY_COLUMNS = [
    "rank",
    "kind",
    "name",
    "count",
    "total_ns",
    "mean_ns",
    "max_ns",
    "per_step_ns",
    "share_of_step",
]
POINT_COLUMNS = ["rank", "step", "kind", "name", "op", "module", "start_ns", "duration_ns"]


def points(data: RankData) -> pd.DataFrame:
    """Every host sync of the analysed steps with its kind, the op and module that made it."""
    cached = data.cache.get("sync_points")
    if cached is not None:
        return cached
    host = data.host
    syncs = host[host["kind"] == "sync"]
    syncs = syncs[~syncs["name"].astype(str).str.contains(DEVICE_WAIT).to_numpy(bool)]
    ops = data.all_host_ops.set_index("event_id")
    parent = syncs["parent_id"].to_numpy()
    op_name = ops["name"].reindex(parent).astype(object).fillna("").to_numpy()
    module = module_labels(ops).reindex(parent).fillna("").to_numpy()
    every = data.all_tasks
    copies = every.loc[every["kind"] == MEMCPY, ["host_op_id", "pinned"]]
    copies = copies.drop_duplicates("host_op_id").set_index("host_op_id")
    has_copy = np.isin(parent, copies.index.to_numpy())
    pinned = copies["pinned"].reindex(parent).fillna(True).astype(bool).to_numpy()
    name = syncs["name"].astype(object).astype(str)
    kind = np.full(len(syncs), KINDS[4], dtype=object)
    kind[name.str.contains(BLOCKING_COPY).to_numpy(bool)] = KINDS[3]
    kind[has_copy] = KINDS[3]
    kind[has_copy & ~pinned] = KINDS[2]
    item = (name.str.contains("item()", regex=False) | name.str.contains("local_scalar")).to_numpy()
    by_op = pd.Series(op_name, dtype=object).astype(str).str.contains(VALUE_READ_OPS)
    item = item | by_op.to_numpy(bool)
    kind[item] = KINDS[1]
    explicit = name.str.contains(EXPLICIT).to_numpy(bool)
    kind[explicit & ~has_copy & ~item] = KINDS[0]
    kind[name.isin(QUEUE_FULL).to_numpy()] = KINDS[5]
    out = pd.DataFrame(
        {
            "rank": data.rank,
            "step": syncs["step"].to_numpy(),
            "kind": kind,
            "name": name.to_numpy(),
            "op": op_name,
            "module": module,
            "start_ns": syncs["start_ns"].to_numpy(),
            "duration_ns": (syncs["end_ns"] - syncs["start_ns"]).to_numpy(),
        },
        columns=POINT_COLUMNS,
    )
    data.cache["sync_points"] = out
    return out


def script_points(data: RankData) -> pd.DataFrame:
    """The sync points the script made (every point but the ``queue full`` waits)."""
    pts = points(data)
    return pts[pts["kind"] != KINDS[5]]


def value_read_copy_ns(data: RankData) -> float:
    """Device time (ns, total over the analysed steps) of the copies that ``.item()`` value
    reads made: each read queues a small device-to-host copy of its own, which goes away with
    the read when it is deferred."""
    host = data.host
    syncs = host[host["kind"] == "sync"]
    ops = data.all_host_ops.set_index("event_id")["name"]
    by_op = ops.reindex(syncs["parent_id"].to_numpy()).astype(object).fillna("").astype(str)
    reads = syncs[
        syncs["name"].astype(str).str.contains("item()", regex=False).to_numpy(bool)
        | by_op.str.contains(VALUE_READ_OPS).to_numpy(bool)
    ]
    tasks = data.tasks
    copies = tasks[(tasks["kind"] == MEMCPY) & tasks["host_op_id"].isin(reads["parent_id"])]
    return float((copies["end_ns"] - copies["start_ns"]).clip(lower=0).sum())


def summary(data: RankData) -> pd.DataFrame:
    """Sync time per kind and name: count, total, mean, max, per step, share of the step."""
    pts = points(data)
    if pts.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    g = pts.groupby(["kind", "name"], sort=False, observed=True)["duration_ns"]
    out = g.agg(count="size", total_ns="sum", max_ns="max").reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["per_step_ns"] = out["total_ns"] / data.n_steps
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out.insert(0, "rank", data.rank)
    out = out.sort_values(["total_ns", "name"], ascending=[False, True])
    return out[SUMMARY_COLUMNS].reset_index(drop=True)


def top_points(data: RankData, n: int = 10) -> pd.DataFrame:
    """The longest sync points."""
    pts = points(data)
    return (
        pts.sort_values("duration_ns", ascending=False, kind="stable")
        .head(n)
        .reset_index(drop=True)
    )
