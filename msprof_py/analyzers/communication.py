"""Communication: collectives' share of the step, overlap with compute, bandwidth; across ranks,
the slow rank and its cause.

Per collective call: the algorithm bandwidth is bytes per rank over the call's duration; the
bus bandwidth scales it by the data each rank actually sends (NCCL-tests convention:
all-reduce x 2(p-1)/p, all-gather and reduce-scatter x (p-1)/p, broadcast x 1). A collective's
time includes waiting for the other ranks to arrive, so a fast rank shows more communication.

Across ranks the slow rank is the one with the longest mean step; its cause is ``compute``
when its computing time is what exceeds the others' (they wait for it in the collectives),
``waiting`` when its own communication time is longer (it waits on something else: a link,
a late collective), else ``idle`` (host-side: dispatch, data loading, synchronisation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import timeline
from msprof_py.analyzers.context import COLLECTIVE, KERNEL, RankData
from msprof_py.analyzers.intervals import Coverage

COLLECTIVE_COLUMNS = [
    "rank",
    "collective",
    "algorithm",
    "world_size",
    "bytes",
    "count",
    "total_ns",
    "mean_ns",
    "max_ns",
    "algbw_gbps",
    "busbw_gbps",
    "hidden_ns",
    "share_of_step",
]
RANK_COLUMNS = [
    "rank",
    "steps",
    "mean_step_ns",
    "computing_ns",
    "communication_ns",
    "comm_not_overlapped_ns",
    "free_ns",
    "idle_ns",
    "deviation",
]
_BUS = {"allreduce": lambda p: 2 * (p - 1) / p, "allgather": lambda p: (p - 1) / p}
_BUS["reducescatter"] = _BUS["allgather"]


def collectives(data: RankData) -> pd.DataFrame:
    """Per collective, algorithm and size: calls, time, bandwidth and time hidden under compute."""
    t = data.tasks
    c = t[t["kind"] == COLLECTIVE]
    if c.empty:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    kernels = data.all_tasks.loc[data.all_tasks["kind"] == KERNEL, ["start_ns", "end_ns"]]
    cover = Coverage(kernels["start_ns"].to_numpy(), kernels["end_ns"].to_numpy())
    c = c.assign(hidden_ns=cover.within(c["start_ns"].to_numpy(), c["end_ns"].to_numpy()))
    keys = ["collective", "algorithm", "world_size", "bytes"]
    g = c.groupby(keys, sort=False, observed=True)
    out = g.agg(
        count=("duration_ns", "size"),
        total_ns=("duration_ns", "sum"),
        max_ns=("duration_ns", "max"),
        hidden_ns=("hidden_ns", "sum"),
    ).reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["algbw_gbps"] = out["bytes"] * out["count"] / out["total_ns"].where(out["total_ns"] > 0)
    p = out["world_size"].clip(lower=1).to_numpy(dtype=float)
    factor = np.array(
        [_BUS.get(k, lambda _p: 1.0)(w) for k, w in zip(out["collective"], p, strict=True)]
    )
    out["busbw_gbps"] = out["algbw_gbps"] * factor
    out["share_of_step"] = out["total_ns"] / data.step_time_ns if data.step_time_ns else 0.0
    out.insert(0, "rank", data.rank)
    out = out.sort_values("total_ns", ascending=False, kind="stable")
    return out[COLLECTIVE_COLUMNS].reset_index(drop=True)


def summary(data: RankData) -> dict[str, Any]:
    """Communication time, its share of the step, and how much of it overlaps compute."""
    bd = timeline.step_breakdown(data)
    comm = int(bd["communication_ns"].sum())
    not_ov = int(bd["comm_not_overlapped_ns"].sum())
    return {
        "rank": data.rank,
        "collectives": int((data.tasks["kind"] == COLLECTIVE).sum()),
        "communication_ns": comm,
        "communication_share": data.share(comm),
        "not_overlapped_ns": not_ov,
        "not_overlapped_share": data.share(not_ov),
        "overlapped_ns": comm - not_ov,
        "overlap_ratio": (comm - not_ov) / comm if comm else None,
    }


def ranks(per_rank: dict[int, RankData]) -> pd.DataFrame:
    """Per rank: mean step, computing, communication, free and idle time per step (ns), and
    the deviation of its mean step from the mean over the ranks."""
    rows = []
    for rank, data in per_rank.items():
        bd = timeline.step_breakdown(data)
        n = data.n_steps
        rows.append(
            {
                "rank": rank,
                "steps": len(data.steps),
                "mean_step_ns": data.mean_step_ns,
                "computing_ns": bd["computing_ns"].sum() / n,
                "communication_ns": bd["communication_ns"].sum() / n,
                "comm_not_overlapped_ns": bd["comm_not_overlapped_ns"].sum() / n,
                "free_ns": bd["free_ns"].sum() / n,
                "idle_ns": bd["idle_ns"].sum() / n,
            }
        )
    out = pd.DataFrame(rows, columns=RANK_COLUMNS[:-1])
    mean = out["mean_step_ns"].mean() if len(out) else 0.0
    out["deviation"] = (out["mean_step_ns"] - mean) / mean if mean else 0.0
    return out[RANK_COLUMNS]


def slow_rank(table: pd.DataFrame) -> dict[str, Any] | None:
    """The slowest rank, its excess over the mean step and its cause (None for < 2 ranks)."""
    if len(table) < 2:
        return None
    slow = table.loc[table["mean_step_ns"].idxmax()]
    others = table[table["rank"] != slow["rank"]]
    excess = {
        "compute": slow["computing_ns"] - others["computing_ns"].mean(),
        "waiting": slow["communication_ns"] - others["communication_ns"].mean(),
        "idle": slow["idle_ns"] - others["idle_ns"].mean(),
    }
    cause = max(excess, key=lambda k: excess[k])
    mean = table["mean_step_ns"].mean()
    return {
        "slow_rank": int(slow["rank"]),
        "slow_ns": float(slow["mean_step_ns"]),
        "mean_ns": float(mean),
        "excess_ns": float(slow["mean_step_ns"] - mean),
        "deviation": float(slow["deviation"]),
        "cause": cause,
        "excess_by_cause_ns": {k: float(v) for k, v in excess.items()},
    }
