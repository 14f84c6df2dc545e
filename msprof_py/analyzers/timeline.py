"""Step breakdown with Ascend's step_trace_time definitions, and the device's idle time by cause.

Over the rank's whole device timeline (as msprof's overlap analysis):

* **Computing**: union of kernel tasks (AI Core, AI Vector, MIX, AI CPU);
* **Communication**: union of collective tasks;
* **Communication (not overlapped)**: Communication minus Computing; **Overlapped** the rest;
* **Free**: the rest of the step: no kernel and no collective runs.

Each step is its device window (:func:`msprof_py.analyzers.context.device_windows`: from the
end of the previous step's device work to the end of its own last task); the windows never
overlap, and every section is cut at the window edges, so for every step
``computing + comm_not_overlapped + free == step_ns`` and the device busy time
(``computing + comm_not_overlapped``) is at most the step time. **Stage** is the span of the
step's tasks inside its window, **Preparing** its first busy start minus the step's host
start (at least 0; torch_npu's ``step_trace_time.csv`` definitions; ``Bubble`` is always 0
here: there are no receive ops). ``host_step_ns`` is the step's host range (its step marks).

**Free time by cause** partitions ``free_ns``: the part where a copy or memset runs but
nothing computes is ``copies`` (``idle_copy_ns``); the rest is idle time (``idle_ns``: no task
at all) in gaps, each with one host-side cause. The host-side window of a gap runs from the
host launch of the task that ran before it to the host launch of the task that ends it
(launches are on the host clock; the device lags behind them when the host runs ahead). What
the host did in that window gives the gap its cause, the first that applies:

1. ``data loading``: DataLoader annotations cover at least half of the window;
2. ``synchronisation``: host syncs (synchronize, ``.item()``, a blocking copy) cover at least
   half of the window: nothing was queued behind the wait;
3. ``host-bound dispatch``: host ops and launches cover at least half of the window, or it is
   no longer than one op's dispatch (stage 1 + stage 2 of the spec): the device waits for the
   host to issue the next kernel;
4. ``other host work``: anything else (Python between calls, nothing recorded).

So ``idle_data_loading_ns + idle_sync_ns + idle_dispatch_ns + idle_other_ns + idle_copy_ns ==
free_ns`` in every step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals
from msprof_py.analyzers.context import COLLECTIVE, KERNEL, RankData, share_of
from msprof_py.analyzers.ops import WORK_KINDS
from msprof_py.analyzers.syncs import QUEUE_FULL
from msprof_py.profile import schema

DATA_LOADING = schema.DATA_LOADING  # data-loading ranges (their wall time: measured_waits)
#: the host-side causes of idle gaps, then the device-side cause of copy-only free time
CAUSES = ("data loading", "synchronisation", "host-bound dispatch", "other host work")
COPIES = "copies"
BREAKDOWN_COLUMNS = [
    "rank",
    "step",
    "step_ns",
    "host_step_ns",
    "computing_ns",
    "communication_ns",
    "comm_not_overlapped_ns",
    "overlapped_ns",
    "free_ns",
    "stage_ns",
    "bubble_ns",
    "preparing_ns",
    "device_busy_ns",
    "utilisation",
    "idle_ns",
    "idle_data_loading_ns",
    "idle_sync_ns",
    "idle_dispatch_ns",
    "idle_other_ns",
    "idle_copy_ns",
]
GAP_COLUMNS = ["rank", "step", "start_ns", "end_ns", "duration_ns", "cause"]
CAUSE_COLUMNS = ["rank", "cause", "gaps", "total_ns", "per_step_ns", "share_of_step"]


#: cause -> its column in the step breakdown
IDLE_COLUMNS = dict(zip((*CAUSES, COPIES), BREAKDOWN_COLUMNS[-5:], strict=True))


def _spans(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return df["start_ns"].to_numpy(dtype=np.int64), df["end_ns"].to_numpy(dtype=np.int64)


def sections(tasks: pd.DataFrame) -> dict[str, intervals.Spans]:
    """Computing, Communication, not-overlapped and Free sections of a device timeline."""
    kernel = (tasks["kind"] == KERNEL).to_numpy()
    collective = (tasks["kind"] == COLLECTIVE).to_numpy()
    s, e = _spans(tasks)
    comp = intervals.merge(s[kernel], e[kernel])
    comm = intervals.merge(s[collective], e[collective])
    not_ov = intervals.difference(comm, comp)
    if s.size:
        busy = (np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))
        free = intervals.difference((np.array([s.min()]), np.array([e.max()])), busy)
    else:
        free = (s[:0], e[:0])
    return {"computing": comp, "communication": comm, "not_overlapped": not_ov, "free": free}


def step_sections(
    sec: dict[str, intervals.Spans], lo: np.ndarray, hi: np.ndarray, host_start: np.ndarray
) -> dict[str, np.ndarray]:
    """Per step range ``[lo, hi)`` (sorted by ``lo``): the step_trace_time sums (ns).

    Each section goes to the first range holding its start. Returns ``computing``,
    ``communication``, ``not_overlapped``, ``overlapped``, ``free``, ``stage`` (the span of the
    step's sections) and ``preparing`` (first Computing/Communication start - ``host_start``).
    Both ``msprof analyze`` and the step_trace_time export use it.
    """
    n = lo.size
    out: dict[str, np.ndarray] = {}
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    busy_first = first.copy()
    for kind in ("computing", "communication", "not_overlapped", "free"):
        s, e = sec[kind]
        which = intervals.assign_first(s, lo, hi)
        ok = which >= 0
        out[kind] = np.bincount(which[ok], weights=(e - s)[ok], minlength=n).astype(np.int64)
        if kind == "not_overlapped":
            continue
        starts = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(starts, which[ok], s[ok])
        np.maximum.at(last, which[ok], e[ok])
        first = np.minimum(first, starts)
        if kind != "free":
            busy_first = np.minimum(busy_first, starts)
    out["overlapped"] = out["communication"] - out["not_overlapped"]
    out["stage"] = np.where(last >= first, last - first, 0)
    has_busy = busy_first < np.iinfo(np.int64).max
    out["preparing"] = np.where(has_busy, busy_first - np.asarray(host_start, np.int64), 0)
    return out


def windows(data: RankData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The analysed steps' device windows ``lo, hi`` sorted by start (they never overlap),
    and the position in ``data.steps`` of each."""
    steps = data.steps
    lo = steps["dev_start_ns"].to_numpy(dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    hi = np.maximum(steps["dev_end_ns"].to_numpy(dtype=np.int64), lo)
    return lo[order], hi[order], steps.index.to_numpy()[order]


def _busy(sec: dict[str, intervals.Spans]) -> intervals.Spans:
    """Computing or Communication: the device is busy."""
    comp, comm = sec["computing"], sec["communication"]
    return intervals.merge(np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))


def _in_windows(spans: intervals.Spans, lo: np.ndarray, hi: np.ndarray) -> intervals.Spans:
    """``spans`` cut at the window edges, only what lies inside a window."""
    keep = hi > lo
    return intervals.intersect(*intervals.merge(*spans), lo[keep], hi[keep])


def _first_last(
    spans: intervals.Spans, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window: the first start and last end of the (sorted, disjoint) ``spans`` inside
    it, and whether any lies inside."""
    s, e = spans
    if s.size == 0:
        none = np.zeros(lo.size, dtype=bool)
        return lo.copy(), lo.copy(), none
    first = np.searchsorted(e, lo, side="right")  # first span ending after lo
    last = np.searchsorted(s, hi, side="left") - 1  # last span starting before hi
    any_ = (first <= last) & (first < s.size) & (last >= 0)
    f = np.clip(first, 0, s.size - 1)
    la = np.clip(last, 0, s.size - 1)
    start = np.where(any_, np.maximum(s[f], lo), lo)
    end = np.where(any_, np.minimum(e[la], hi), lo)
    return start, end, any_


def _launch_times(data: RankData, task_ids: np.ndarray, fallback: np.ndarray) -> tuple:
    """Host (start, end) of the launch of each task, the task's ``launch_ns`` when unrecorded."""
    cached = data.cache.get("launch_table")
    if cached is None:
        host = data.all_host
        mask = ((host["kind"] == "launch") & (host["task_id"] >= 0)).to_numpy()
        ids = host["task_id"].to_numpy()[mask]
        size = (
            int(
                max(
                    ids.max(initial=-1),
                    data.all_tasks["task_id"].max() if len(data.all_tasks) else -1,
                )
            )
            + 1
        )
        table = np.full((2, max(size, 1)), -1, dtype=np.int64)
        # task ids are dense per rank: a lookup table; the first launch of a task wins
        table[0, ids[::-1]] = host["start_ns"].to_numpy()[mask][::-1]
        table[1, ids[::-1]] = host["end_ns"].to_numpy()[mask][::-1]
        cached = data.cache["launch_table"] = table
    table = cached
    inside = (task_ids >= 0) & (task_ids < table.shape[1])
    safe = np.where(inside, task_ids, 0)
    start = np.where(inside, table[0, safe], -1)
    end = np.where(inside, table[1, safe], -1)
    start = np.where(start < 0, fallback, start).astype(np.int64)
    end = np.where(end < 0, fallback, end).astype(np.int64)
    return start, end


def _dispatch_ns(data: RankData) -> int:
    if data.spec is None:
        return 20_000
    return data.spec.dispatch.stage1_ns + data.spec.dispatch.stage2_ns


def idle_gaps(data: RankData) -> pd.DataFrame:
    """The device's free time inside the analysed steps as gaps: idle gaps (no task runs)
    with their host-side cause, and the spans where only copies run (cause ``copies``)."""
    cached = data.cache.get("gaps")
    if cached is not None:
        return cached
    lo, hi, order = windows(data)
    every = data.all_tasks
    work = every.loc[every["kind"].isin(WORK_KINDS), ["task_id", "launch_ns", "start_ns", "end_ns"]]
    g_s, g_e = _in_windows(intervals.difference((lo, hi), _spans(work)), lo, hi)
    free = _in_windows(intervals.difference((lo, hi), _busy(sections(every))), lo, hi)
    # free, a copy running: not idle (cut at the window edges again: the difference merges
    # spans that touch across two steps' windows)
    c_s, c_e = _in_windows(intervals.difference(free, (g_s, g_e)), lo, hi)
    step_idx = intervals.assign(g_s, lo, hi)
    ok = step_idx >= 0
    g_s, g_e, step_idx = g_s[ok], g_e[ok], step_idx[ok]
    # the task before each gap (latest end <= gap start) and the one ending it
    w_s, w_e = _spans(work)
    by_end, by_start = np.argsort(w_e, kind="stable"), np.argsort(w_s, kind="stable")
    ends, starts = w_e[by_end], w_s[by_start]
    prev = np.clip(np.searchsorted(ends, g_s, side="right") - 1, 0, None)
    nxt = np.clip(np.searchsorted(starts, g_e, side="left"), 0, max(0, starts.size - 1))
    if starts.size:
        ids, launched = work["task_id"].to_numpy(), work["launch_ns"].to_numpy()
        _, w_lo = _launch_times(data, ids[by_end[prev]], launched[by_end[prev]])
        w_hi, _ = _launch_times(data, ids[by_start[nxt]], launched[by_start[nxt]])
        has_next = np.searchsorted(starts, g_e, side="left") < starts.size
        w_hi = np.where(has_next, w_hi, g_e)  # a trailing gap: up to the step's end
        has_prev = np.searchsorted(ends, g_s, side="right") > 0
        w_lo = np.where(has_prev, np.minimum(w_lo, w_hi), g_s)
        w_hi = np.maximum(w_hi, w_lo)
    else:
        w_lo, w_hi = g_s, g_e
    del work, w_s, w_e, by_end, by_start, ends, starts  # as large as the tasks: let them go
    window = w_hi - w_lo
    host = data.all_host
    hk = host["kind"]
    spans = ["start_ns", "end_ns"]
    annotations = host.loc[hk == "annotation", ["name", *spans]]
    loading = annotations[
        annotations["name"].str.contains(DATA_LOADING).fillna(False).to_numpy(bool)
    ]
    # the waits for room in a full queue are the host running ahead, not a sync that starves
    syncs = host.loc[(hk == "sync") & ~host["name"].isin(QUEUE_FULL), spans]
    dispatch = intervals.Coverage(*_spans(host.loc[hk.isin(("op", "launch")), spans]))
    cause = np.full(g_s.size, CAUSES[3], dtype=object)
    busy_dispatch = dispatch.within(w_lo, w_hi)
    cause[(busy_dispatch * 2 >= window) | (window <= _dispatch_ns(data))] = CAUSES[2]
    cause[intervals.Coverage(*_spans(syncs)).within(w_lo, w_hi) * 2 > window] = CAUSES[1]
    cause[intervals.Coverage(*_spans(loading)).within(w_lo, w_hi) * 2 > window] = CAUSES[0]
    c_idx = intervals.assign(c_s, lo, hi)
    c_ok = c_idx >= 0
    c_s, c_e, c_idx = c_s[c_ok], c_e[c_ok], c_idx[c_ok]
    steps = data.steps.loc[order, "step"].to_numpy()
    all_idx = np.concatenate([step_idx, c_idx])
    out = pd.DataFrame(
        {
            "rank": data.rank,
            "step": steps[all_idx] if all_idx.size else np.zeros(0, dtype=np.int64),
            "start_ns": np.concatenate([g_s, c_s]),
            "end_ns": np.concatenate([g_e, c_e]),
            "duration_ns": np.concatenate([g_e - g_s, c_e - c_s]),
            "cause": np.concatenate([cause, np.full(c_s.size, COPIES, dtype=object)]),
        },
        columns=GAP_COLUMNS,
    )
    out = out.sort_values("start_ns", kind="stable").reset_index(drop=True)
    data.cache["gaps"] = out
    data.cache.pop("launch_table", None)  # read for the gaps only
    return out


def idle_by_cause(data: RankData) -> pd.DataFrame:
    """Free time per cause (the host causes of idle gaps, then ``copies``): gaps, total, per
    step and share of the step time. The totals add up to the steps' free time."""
    gaps = idle_gaps(data)
    causes = [*CAUSES, COPIES]
    g = gaps.groupby("cause")["duration_ns"].agg(["size", "sum"]).reindex(causes)
    g = g.fillna(0)
    out = pd.DataFrame(
        {
            "rank": data.rank,
            "cause": causes,
            "gaps": g["size"].astype("int64").to_numpy(),
            "total_ns": g["sum"].astype("int64").to_numpy(),
        }
    )
    out["per_step_ns"] = out["total_ns"] / data.n_steps
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    return out[CAUSE_COLUMNS]


def step_breakdown(data: RankData) -> pd.DataFrame:
    """Per analysed step: the step_trace_time columns, device busy time and free time by
    cause (ns), all within the step's device window (module docs: they add up)."""
    cached = data.cache.get("breakdown")
    if cached is not None:
        return cached
    lo, hi, order = windows(data)
    sec = sections(data.all_tasks)
    steps = data.steps.loc[order]
    comp = intervals.Coverage(*sec["computing"]).within(lo, hi)
    comm = intervals.Coverage(*sec["communication"]).within(lo, hi)
    not_ov = intervals.Coverage(*sec["not_overlapped"]).within(lo, hi)
    step_ns = hi - lo
    busy = comp + not_ov
    first, _, any_busy = _first_last(_busy(sec), lo, hi)
    s_all, e_all, _ = _first_last(intervals.merge(*_spans(data.all_tasks)), lo, hi)
    host_start = steps["start_ns"].to_numpy(dtype=np.int64)
    out = pd.DataFrame(
        {
            "rank": data.rank,
            "step": steps["step"].to_numpy(),
            "step_ns": step_ns,
            "host_step_ns": steps["host_ns"].to_numpy(),
            "computing_ns": comp,
            "communication_ns": comm,
            "comm_not_overlapped_ns": not_ov,
            "overlapped_ns": comm - not_ov,
            "free_ns": step_ns - busy,
            "stage_ns": np.where(any_busy, e_all - s_all, 0),
            "bubble_ns": 0,
            "preparing_ns": np.where(any_busy, np.clip(first - host_start, 0, None), 0),
            "device_busy_ns": busy,
        }
    )
    out["utilisation"] = np.clip(busy / np.where(step_ns > 0, step_ns, 1), 0.0, 1.0) * (step_ns > 0)
    gaps = idle_gaps(data)
    pivot = gaps.pivot_table(index="step", columns="cause", values="duration_ns", aggfunc="sum")
    for cause, column in IDLE_COLUMNS.items():
        col = pivot[cause] if cause in pivot.columns else pd.Series(dtype=float)
        out[column] = col.reindex(out["step"]).fillna(0).astype("int64").to_numpy()
    out["idle_ns"] = out[[IDLE_COLUMNS[c] for c in CAUSES]].sum(axis=1).astype("int64")
    out = out[BREAKDOWN_COLUMNS].sort_values("step").reset_index(drop=True)
    data.cache["breakdown"] = out
    return out
