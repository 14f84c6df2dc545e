"""Device memory: peaks, timeline, fragmentation, headroom and the largest batch that fits.

* **Peak allocated / reserved**: the caching allocator's statistics after each event.
* **Fragmentation at peak**: reserved minus allocated at the moment allocated peaks (memory the
  allocator holds but no tensor uses).
* **Headroom**: the device's usable memory (capacity minus the system reserve) minus the peak
  reserved.
* **Largest batch**: activation memory (peak allocated minus the persistent floor, the lowest
  allocated in the analysed steps: parameters, gradients, optimizer state) grows linearly
  with the batch; the batch may grow until peak allocated reaches ``limit`` (80 %) of usable
  memory. The current batch size is the leading dimension of the largest host-to-device
  copy of each step (the input batch), unless given.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import shapes
from msprof_py.analyzers.context import MEMCPY, RankData, per_rank

STEP_COLUMNS = [
    "rank",
    "step",
    "start_allocated",
    "peak_allocated",
    "peak_reserved",
    "activation_bytes",
]
TIMELINE_COLUMNS = ["rank", "time_ns", "allocated", "reserved"]
LIMIT = 0.8


def infer_batch_size(data: RankData) -> int | None:
    """Leading dim of the largest host-to-device copy in the analysed steps (the input batch)."""
    tasks = data.tasks
    h2d = tasks[(tasks["kind"] == MEMCPY) & (tasks["copy_kind"] == "HOST_TO_DEVICE")]
    if h2d.empty:
        return None
    biggest = h2d.sort_values("bytes", ascending=False, kind="stable").iloc[0]
    host = data.all_host
    op = host[(host["kind"] == "op") & (host["event_id"] == biggest["host_op_id"])]
    if op.empty:
        return None
    dim = int(shapes.first_dim(op["input_shapes"])[0])
    return dim if dim > 0 else None


def per_step(data: RankData) -> pd.DataFrame:
    """Allocated at the step's first event, peaks, and activation bytes (peak - start)."""
    mem = data.memory
    if mem.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    g = mem.sort_values("time_ns", kind="stable").groupby("step")
    out = pd.DataFrame(
        {
            "start_allocated": g["allocated"].first(),
            "peak_allocated": g["allocated"].max(),
            "peak_reserved": g["reserved"].max(),
        }
    ).reset_index()
    out["activation_bytes"] = out["peak_allocated"] - out["start_allocated"]
    out.insert(0, "rank", data.rank)
    return out[STEP_COLUMNS]


def timeline(data: RankData, points: int = 400) -> pd.DataFrame:
    """Allocated and reserved over the whole recording, at most ``points`` rows (max per bin)."""
    mem = data.all_memory
    if mem.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    t = mem["time_ns"].to_numpy(dtype=np.int64)
    lo, hi = int(t.min()), int(t.max())
    bins = np.minimum((t - lo) * points // max(1, hi - lo + 1), points - 1)
    frame = pd.DataFrame(
        {"bin": bins, "time_ns": t, "allocated": mem["allocated"], "reserved": mem["reserved"]}
    )
    out = frame.groupby("bin").agg(
        time_ns=("time_ns", "min"), allocated=("allocated", "max"), reserved=("reserved", "max")
    )
    out.insert(0, "rank", data.rank)
    return out[TIMELINE_COLUMNS].reset_index(drop=True)


@per_rank
def summary(data: RankData, batch_size: int | None = None, limit: float = LIMIT) -> dict[str, Any]:
    """Peaks, fragmentation, headroom and the batch-size extrapolation (bytes)."""
    mem_all = data.all_memory
    mem = data.memory if len(data.memory) else mem_all
    out: dict[str, Any] = {"rank": data.rank, "events": len(mem_all)}
    if mem.empty:
        return out | {"available": False}
    at_peak = mem.loc[mem["allocated"].idxmax()]
    capacity = data.spec.memory.usable_bytes if data.spec is not None else None
    floor = int(mem["allocated"].min())
    peak_alloc = int(mem["allocated"].max())
    activation = peak_alloc - floor
    inferred = infer_batch_size(data)
    batch = batch_size if batch_size is not None else inferred
    scale = max_batch = None
    if capacity is not None and activation > 0:
        scale = max(0.0, (limit * capacity - floor) / activation)
        if batch:
            max_batch = math.floor(batch * scale)
    peak_reserved = int(mem["reserved"].max())
    out |= {
        "available": True,
        "peak_allocated": int(mem_all["allocated"].max()),
        "peak_reserved": int(mem_all["reserved"].max()),
        "step_peak_allocated": peak_alloc,
        "step_peak_reserved": peak_reserved,
        "fragmentation_bytes": int(at_peak["reserved"] - at_peak["allocated"]),
        "capacity_bytes": capacity,
        "headroom_bytes": None if capacity is None else capacity - int(mem_all["reserved"].max()),
        "peak_share_of_capacity": (
            None if capacity is None else int(mem_all["reserved"].max()) / capacity
        ),
        "persistent_bytes": floor,
        "activation_bytes": activation,
        "batch_size": batch,
        "batch_size_source": (
            "given" if batch_size is not None else "inferred" if inferred else "unknown"
        ),
        "limit": limit,
        "max_batch_scale": scale,
        "max_batch_size": max_batch,
        "oom_events": int((mem_all["action"] == "oom").sum()),
    }
    return out
