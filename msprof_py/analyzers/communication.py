"""Communication: collectives' share of the step, overlap with compute, bandwidth; across ranks,
the slow rank and its cause.

A rank's HCCL task begins when that rank is ready and first waits for its peers (the notify
wait, ``notify_wait_ns``), then transfers. Per collective call the algorithm bandwidth is bytes
per rank over the transfer time (the task minus its wait); the bus bandwidth scales it by the
data each rank actually sends (NCCL-tests convention: all-reduce x 2(p-1)/p, all-gather and
reduce-scatter x (p-1)/p, broadcast x 1). The wait is communication time on the timeline, so a
fast rank that waits for a straggler shows more (not overlapped) communication.

Across ranks: in synchronous data parallelism every rank's step takes as long as the slowest
rank's, so step times alone cannot tell which rank is slow. A rank's **own time** is its mean
step minus the time it waited for its peers (``wait_ns``); the slow rank is the one with the
longest own time, the one the others wait for, and its deviation is its own time over the mean
own time (without collectives, own time is the step time). Its cause is the largest of its
excesses over the other ranks per step: ``compute`` (computing time), ``communication``
(transfer time: a slow link) or ``idle`` (host-side: dispatch, data loading, synchronisation).
An ``idle`` cause is named (:func:`idle_cause`): the host-side cause of idle time the slow
rank has most in excess of the others (data loading, synchronisation, dispatch, other host
work) and within it what makes the host wait: the sync point (its kind, the op that made it
and its module: a ``loss.item()`` only that rank calls) or the host op whose dispatch time
exceeds the others' most.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import syncs, timeline
from msprof_py.analyzers.context import COLLECTIVE, KERNEL, RankData, share_of
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
    "wait_ns",
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
    "wait_ns",
    "own_ns",
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
        wait_ns=("notify_wait_ns", "sum"),
    ).reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    transit = out["total_ns"] - out["wait_ns"]
    out["algbw_gbps"] = out["bytes"] * out["count"] / transit.where(transit > 0)
    p = out["world_size"].clip(lower=1).to_numpy(dtype=float)
    factor = np.array(
        [_BUS.get(k, lambda _p: 1.0)(w) for k, w in zip(out["collective"], p, strict=True)]
    )
    out["busbw_gbps"] = out["algbw_gbps"] * factor
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
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
        coll = data.tasks["kind"] == COLLECTIVE
        wait = float(data.tasks.loc[coll, "notify_wait_ns"].sum()) / n
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
                "wait_ns": wait,
                "own_ns": data.mean_step_ns - wait,
            }
        )
    out = pd.DataFrame(rows, columns=[c for c in RANK_COLUMNS if c != "deviation"])
    mean = out["own_ns"].mean() if len(out) else 0.0
    out["deviation"] = (out["own_ns"] - mean) / mean if mean else 0.0
    return out[RANK_COLUMNS]


def slow_rank(
    table: pd.DataFrame, per_rank: dict[int, RankData] | None = None
) -> dict[str, Any] | None:
    """The rank the others wait for (longest own time), its excess over the mean own time and
    its cause (None for < 2 ranks); with ``per_rank``, an ``idle`` cause is named
    (``idle_cause``: :func:`idle_cause`)."""
    if len(table) < 2:
        return None
    slow = table.loc[table["own_ns"].idxmax()]
    others = table[table["rank"] != slow["rank"]]
    transit = table["communication_ns"] - table["wait_ns"]
    excess = {
        "compute": slow["computing_ns"] - others["computing_ns"].mean(),
        "communication": transit[slow.name] - transit[others.index].mean(),
        "idle": slow["idle_ns"] - others["idle_ns"].mean(),
    }
    cause = max(excess, key=lambda k: excess[k])
    mean = table["own_ns"].mean()
    named = idle_cause(per_rank, int(slow["rank"])) if per_rank and cause == "idle" else None
    return {
        "slow_rank": int(slow["rank"]),
        "slow_ns": float(slow["own_ns"]),
        "mean_ns": float(mean),
        "excess_ns": float(slow["own_ns"] - mean),
        "deviation": float(slow["deviation"]),
        "cause": cause,
        "excess_by_cause_ns": {k: float(v) for k, v in excess.items()},
        "others_wait_ns": float(others["wait_ns"].mean()),
        "idle_cause": named,
    }


#: host-side idle cause -> its column in the step breakdown
IDLE_PARTS = {
    "data loading": "idle_data_loading_ns",
    "synchronisation": "idle_sync_ns",
    "host-bound dispatch": "idle_dispatch_ns",
    "other host work": "idle_other_ns",
}


def _excess(mine: pd.Series, others: list[pd.Series]) -> pd.Series:
    """``mine`` less the mean of ``others`` (a missing key counts 0)."""
    keys = mine.index.union(pd.Index([k for o in others for k in o.index]))
    mean = sum(o.reindex(keys, fill_value=0.0) for o in others) / max(1, len(others))
    return (mine.reindex(keys, fill_value=0.0) - mean).sort_values(ascending=False)


def idle_cause(per_rank: dict[int, RankData], rank: int) -> dict[str, Any]:
    """What keeps ``rank``'s device idle more than the other ranks'.

    ``part``: the host-side idle cause with the largest excess per step (see
    :data:`IDLE_PARTS`), ``excess_ns`` per part. ``what``: the sync point (kind, op, module)
    whose blocked time per step exceeds the others' most, when that excess is at least half
    the idle excess: a host blocked in ``.item()`` loses its lead over the device, which then
    idles while the next step is dispatched (the idle shows as dispatch, its cause is the
    sync); else, for dispatch, the host op whose host time exceeds the others' most.
    ``per_step``: its count per step; ``what_excess_ns``: its time per step beyond the
    others'; ``text``: one line."""
    others = [d for r, d in per_rank.items() if r != rank]
    data = per_rank[rank]

    def idle(d: RankData) -> pd.Series:
        bd = timeline.step_breakdown(d)
        return pd.Series({k: bd[c].sum() / d.n_steps for k, c in IDLE_PARTS.items()})

    parts = _excess(idle(data), [idle(d) for d in others])
    part = str(parts.index[0])
    idle_excess = float(parts.clip(lower=0).sum())
    out: dict[str, Any] = {
        "part": part,
        "excess_ns": {k: float(v) for k, v in parts.items()},
        "what": None,
        "per_step": None,
        "what_excess_ns": None,
        "text": f"{part} {parts.iloc[0] / 1e3:+.1f} us per step",
    }
    key, per_step, extra = _top_excess(data, others, _sync_time)
    if key is not None and extra >= 0.5 * idle_excess:
        kind, op, module = key
        where = f"{op}" + (f" in {module}" if module else "")
        out.update(what=f"{kind} ({where})", per_step=per_step, what_excess_ns=extra)
        out["text"] = (
            f"the host waits in {out['what']} ({per_step:.1f} per step, {extra / 1e3:.1f} us "
            f"per step beyond the other ranks), so the device idles ({part} "
            f"{parts.iloc[0] / 1e3:+.1f} us per step)"
        )
        return out
    if part == "host-bound dispatch":
        key, per_step, extra = _top_excess(data, others, _op_time)
        if key is not None:
            out.update(what=f"host op {key[0]}", per_step=per_step, what_excess_ns=extra)
            out["text"] = (
                f"{part}: {out['what']} takes {extra / 1e3:.1f} us per step more on the "
                f"host than on the other ranks ({per_step:.1f} per step)"
            )
    return out


def _sync_time(d: RankData) -> tuple[pd.Series, pd.Series]:
    """Blocked time and count per step of the script's sync points, per (kind, op, module)."""
    pts = syncs.script_points(d)
    keys = [pts["kind"].astype(str), pts["op"].astype(str), pts["module"].astype(str)]
    g = pts.groupby(keys, sort=False)["duration_ns"]
    return g.sum() / d.n_steps, g.size() / d.n_steps


def _op_time(d: RankData) -> tuple[pd.Series, pd.Series]:
    """Host time and count per step of the host ops, per name."""
    ops = d.host_ops
    dur = ops["end_ns"] - ops["start_ns"]
    g = dur.groupby([ops["name"].astype(str)], sort=False)
    return g.sum() / d.n_steps, g.size() / d.n_steps


def _top_excess(
    data: RankData, others: list[RankData], measure: Any
) -> tuple[tuple[str, ...] | None, float, float]:
    """The key whose per-step time on ``data`` exceeds the others' mean most, its count per
    step on ``data`` and the excess (None when nothing exceeds)."""
    time, count = measure(data)
    if time.empty:
        return None, 0.0, 0.0
    excess = _excess(time, [measure(d)[0] for d in others])
    key = excess.index[0]
    if excess.iloc[0] <= 0:
        return None, 0.0, 0.0
    key_t = key if isinstance(key, tuple) else (key,)
    return key_t, float(count.get(key, 0.0)), float(excess.iloc[0])
