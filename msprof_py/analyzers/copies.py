"""Copy analysis: per direction counts, bytes, time and bandwidth; hidden vs exposed copy time.

* **Achieved bandwidth** is bytes over the copies' summed device time; the **peak** is the link
  a copy crosses: the host link's pinned bandwidth for H2D and D2H, half the HBM bandwidth for
  D2D (a device copy reads and writes HBM).
* **Copy ratio** is the time any copy runs (union) over the step time.
* A copy is **hidden** while a kernel or collective runs beside it, **exposed** otherwise.
* **Pageable** copies come from pageable host memory: slower, and they block the host.
* **Small copies** move fewer than ``small_bytes`` bytes each; many per step is a "storm".
* **Value reads** (``value_read``) are the 8-byte copies behind ``.item()``: counted here, and
  left to the synchronisation analysis by the exposed-copies rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals
from msprof_py.analyzers.context import COLLECTIVE, KERNEL, MEMCPY, RankData, per_rank, share_of

DIRECTIONS = {
    "HOST_TO_DEVICE": "H2D",
    "DEVICE_TO_HOST": "D2H",
    "DEVICE_TO_DEVICE": "D2D",
    "HOST_TO_HOST": "H2H",
}
SMALL_BYTES = 64 * 1024
DIRECTION_COLUMNS = [
    "rank",
    "direction",
    "count",
    "bytes",
    "total_ns",
    "achieved_gbps",
    "peak_gbps",
    "efficiency",
    "hidden_ns",
    "exposed_ns",
    "pageable_count",
    "pageable_ns",
    "small_count",
    "share_of_step",
]


def copy_tasks(data: RankData) -> pd.DataFrame:
    """The analysed memcpy tasks with a ``direction`` and ``hidden_ns`` (time beside compute)."""
    cached = data.cache.get("copies")
    if cached is not None:
        return cached
    tasks = data.tasks
    copies = tasks[tasks["kind"] == MEMCPY]
    every = data.all_tasks
    compute = every.loc[every["kind"].isin((KERNEL, COLLECTIVE)), ["start_ns", "end_ns"]]
    cover = intervals.Coverage(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy())
    hidden = cover.within(copies["start_ns"].to_numpy(), copies["end_ns"].to_numpy())
    direction = copies["copy_kind"].astype(object).map(DIRECTIONS).fillna("other")
    value = copies["name"].str.contains("(value)", regex=False).fillna(False).to_numpy(bool)
    copies = copies.assign(direction=direction.to_numpy(), hidden_ns=hidden, value_read=value)
    data.cache["copies"] = copies
    return copies


def peak_bandwidth(data: RankData, direction: str) -> float:
    """Peak bytes/s of the link a copy in ``direction`` crosses (NaN without a spec)."""
    spec = data.spec
    if spec is None:
        return float("nan")
    if direction == "D2D":
        return spec.memory.hbm_bandwidth / 2
    if direction in ("H2D", "D2H"):
        return spec.host_link.pinned_bandwidth
    return spec.host_link.pageable_bandwidth


def by_direction(data: RankData, small_bytes: int = SMALL_BYTES) -> pd.DataFrame:
    """Per copy direction: counts, bytes, time, bandwidth vs peak, hidden/exposed, pageable."""
    copies = copy_tasks(data)
    if copies.empty:
        return pd.DataFrame(columns=DIRECTION_COLUMNS)
    pageable = ~copies["pinned"].astype(bool) & copies["direction"].isin(("H2D", "D2H"))
    copies = copies.assign(
        pageable=pageable,
        pageable_ns=copies["duration_ns"].where(pageable, 0),
        small=copies["bytes"] < small_bytes,
    )
    g = copies.groupby("direction", sort=True, observed=True)
    out = pd.DataFrame(
        {
            "count": g.size(),
            "bytes": g["bytes"].sum(),
            "total_ns": g["duration_ns"].sum(),
            "hidden_ns": g["hidden_ns"].sum(),
            "pageable_count": g["pageable"].sum(),
            "pageable_ns": g["pageable_ns"].sum(),
            "small_count": g["small"].sum(),
        }
    ).reset_index()
    out["exposed_ns"] = out["total_ns"] - out["hidden_ns"]
    out["achieved_gbps"] = out["bytes"] / out["total_ns"].where(out["total_ns"] > 0)
    out["peak_gbps"] = [peak_bandwidth(data, d) / 1e9 for d in out["direction"]]
    out["efficiency"] = out["achieved_gbps"] / out["peak_gbps"]
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out.insert(0, "rank", data.rank)
    out = out.astype({"pageable_count": "int64", "small_count": "int64", "pageable_ns": "int64"})
    return out[DIRECTION_COLUMNS]


def host_blocked_ns(data: RankData) -> int:
    """Host time blocked in syncs made by copy ops (blocking or pageable copies)."""
    host = data.host
    syncs = host[(host["kind"] == "sync") & (host["parent_id"] >= 0)]
    copy_ops = copy_tasks(data)["host_op_id"]
    blocked = syncs[syncs["parent_id"].isin(copy_ops)]
    return int((blocked["end_ns"] - blocked["start_ns"]).sum())


@per_rank
def summary(
    data: RankData, small_bytes: int = SMALL_BYTES, value_reads: bool = True
) -> dict[str, Any]:
    """Copy ratio, hidden and exposed time, pageable and small copies (totals and per step);
    ``value_reads=False`` leaves out the ``.item()`` read-backs."""
    copies = copy_tasks(data)
    if not value_reads:
        copies = copies[~copies["value_read"]]
    # copy time inside the analysed step windows (a copy may run on past its step's window)
    cover = intervals.Coverage(copies["start_ns"].to_numpy(), copies["end_ns"].to_numpy())
    steps = data.steps
    if len(steps):
        lo = steps["dev_start_ns"].to_numpy(dtype="int64")
        hi = steps["dev_end_ns"].to_numpy(dtype="int64")
        busy = int(cover.within(lo, hi).sum())
    else:
        busy = cover.total
    hidden = int(copies["hidden_ns"].sum())
    total = int(copies["duration_ns"].sum())
    pageable = copies[~copies["pinned"].astype(bool) & copies["direction"].isin(("H2D", "D2H"))]
    small = copies[copies["bytes"] < small_bytes]
    step = data.step_time_ns
    return {
        "rank": data.rank,
        "copies": len(copies),
        "bytes": int(copies["bytes"].sum()),
        "copy_ns": busy,
        "copy_ratio": busy / step if step else 0.0,
        "hidden_ns": hidden,
        "exposed_ns": total - hidden,
        # copies that overlap each other are exposed once: at most the copy time in the steps
        "exposed_ratio": min(total - hidden, busy) / step if step else 0.0,
        "exposed_per_step_ns": (total - hidden) / data.n_steps,
        "pageable_count": len(pageable),
        "pageable_ns": int(pageable["duration_ns"].sum()),
        "host_blocked_ns": host_blocked_ns(data),
        "small_bytes": small_bytes,
        "small_count": len(small),
        "small_per_step": len(small) / data.n_steps,
        "small_ns": int(small["duration_ns"].sum()),
    }


def exposed_per_step(data: RankData, value_reads: bool = True) -> pd.DataFrame:
    """Exposed copy time and compute time per analysed step (for the what-if estimate)."""
    copies = copy_tasks(data)
    if not value_reads:
        copies = copies[~copies["value_read"]]
    tasks = data.tasks
    compute = tasks[tasks["kind"].isin((KERNEL, COLLECTIVE))]
    c = copies.assign(exposed=copies["duration_ns"] - copies["hidden_ns"])
    out = pd.DataFrame({"step": data.steps["step"].to_numpy()})
    out["exposed_ns"] = c.groupby("step")["exposed"].sum().reindex(out["step"]).fillna(0).to_numpy()
    out["compute_ns"] = (
        compute.groupby("step")["duration_ns"].sum().reindex(out["step"]).fillna(0).to_numpy()
    )
    return out.astype(np.int64)
