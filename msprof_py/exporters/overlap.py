"""Overlap analysis and the per-step time breakdown, with msprof's and torch_npu's definitions.

msprof (``overlap_analysis_processor.cpp``) computes, over the whole device timeline:

* **Computing**: the union of compute-op tasks (kernels: AI Core, AI Vector, MIX, AI CPU);
* **Communication**: the union of communication ops (collectives);
* **Communication(Not Overlapped)**: Communication minus Computing;
* **Free**: the span from the first to the last task of any kind, minus both unions.

Intervals that touch are merged; empty ones are dropped. torch_npu's ``step_trace_time.csv``
then sums each kind per step: a section belongs to the first step whose device range holds its
start, the device range of a step running from the first device task launched in it to the
later of its last task's end and its host end. ``Overlapped`` = Communication - Not
Overlapped; ``Stage`` = the step's span over all sections minus ``Bubble`` (``hcom_receive``
time: none here, there are no point-to-point ops); ``Preparing`` = the first Computing or
Communication section minus the step's host start. Times here are integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals
from msprof_py.profile import Profile

COMPUTING = "Computing"
COMMUNICATION = "Communication"
COMM_NOT_OVERLAPPED = "Communication(Not Overlapped)"
FREE = "Free"
#: Overlap Analysis thread ids, in msprof's order
OVERLAP_TIDS = {COMPUTING: 0, COMMUNICATION: 1, COMM_NOT_OVERLAPPED: 2, FREE: 3}

STEP_TRACE_COLUMNS = [
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
]

Intervals = tuple[np.ndarray, np.ndarray]


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge intervals (touching ones too); returns sorted, disjoint (starts, ends)."""
    return intervals.merge(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))


def difference(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b`` (sorted, disjoint)."""
    return intervals.difference(a, b)


@dataclass(frozen=True)
class OverlapSections:
    """The four kinds of sections of one device timeline (ns)."""

    computing: Intervals
    communication: Intervals
    comm_not_overlapped: Intervals
    free: Intervals

    def frame(self) -> pd.DataFrame:
        """All sections as rows ``kind, start_ns, end_ns``, sorted by start."""
        parts = []
        for kind, (s, e) in (
            (COMPUTING, self.computing),
            (COMMUNICATION, self.communication),
            (COMM_NOT_OVERLAPPED, self.comm_not_overlapped),
            (FREE, self.free),
        ):
            parts.append(pd.DataFrame({"kind": kind, "start_ns": s, "end_ns": e}))
        df = pd.concat(parts, ignore_index=True)
        return df.sort_values(["start_ns", "kind"], kind="stable").reset_index(drop=True)


def overlap_sections(tasks: pd.DataFrame) -> OverlapSections:
    """Overlap analysis of one rank's tasks (module docs)."""
    start = tasks["start_ns"].to_numpy(dtype=np.int64)
    end = tasks["end_ns"].to_numpy(dtype=np.int64)
    kind = tasks["kind"].to_numpy(dtype=object)
    comp = union(start[kind == "kernel"], end[kind == "kernel"])
    comm = union(start[kind == "collective"], end[kind == "collective"])
    not_overlapped = difference(comm, comp)
    if len(start):
        span = (np.array([start.min()]), np.array([end.max()]))
        busy = union(np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))
        free = difference(span, busy) if span[1][0] > span[0][0] else union(start[:0], end[:0])
    else:
        free = union(start, end)
    return OverlapSections(comp, comm, not_overlapped, free)


def step_ranges(profile: Profile) -> pd.DataFrame:
    """Device range of each step: ``step, start_ns, end_ns, host_start_ns`` (module docs)."""
    steps = profile.steps.sort_values("step")
    if steps.empty:
        return pd.DataFrame(columns=["step", "start_ns", "end_ns", "host_start_ns"], dtype="int64")
    tasks = profile.tasks
    first = tasks.groupby("step")["start_ns"].min()
    last = tasks.groupby("step")["end_ns"].max()
    step_ids = steps["step"].to_numpy()
    host_start = steps["start_ns"].to_numpy(dtype=np.int64)
    host_end = steps["end_ns"].to_numpy(dtype=np.int64)
    dev_first = first.reindex(step_ids).to_numpy(dtype=float)
    dev_last = last.reindex(step_ids).to_numpy(dtype=float)
    start = np.where(np.isnan(dev_first), host_start, dev_first).astype(np.int64)
    end = np.maximum(np.nan_to_num(dev_last, nan=-1).astype(np.int64), host_end)
    return pd.DataFrame(
        {"step": step_ids, "start_ns": start, "end_ns": end, "host_start_ns": host_start}
    )


def assign_steps(starts: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Step of each section start (the first step range holding it), -1 for none."""
    starts = np.asarray(starts, dtype=np.int64)
    out = np.full(len(starts), -1, dtype=np.int64)
    if ranges.empty or not len(starts):
        return out
    r_start = ranges["start_ns"].to_numpy(dtype=np.int64)
    r_end = ranges["end_ns"].to_numpy(dtype=np.int64)
    r_step = ranges["step"].to_numpy(dtype=np.int64)
    if len(r_step) <= 64:
        # exact "first step wins": assign the last step first, earlier ones overwrite
        for i in range(len(r_step) - 1, -1, -1):
            out[(starts >= r_start[i]) & (starts < r_end[i])] = r_step[i]
        return out
    # many steps: binary search on the range starts (ranges rarely overlap; where they do,
    # the latest-starting range holding the point wins)
    order = np.argsort(r_start, kind="stable")
    idx = np.searchsorted(r_start[order], starts, side="right") - 1
    cand = order[np.clip(idx, 0, None)]
    ok = (idx >= 0) & (starts < r_end[cand])
    out[ok] = r_step[cand[ok]]
    return out


def step_breakdown(profile: Profile, sections: OverlapSections | None = None) -> pd.DataFrame:
    """The rows of ``step_trace_time.csv`` in ns: ``step`` (None without steps) + columns."""
    sections = overlap_sections(profile.tasks) if sections is None else sections
    frame = sections.frame()
    ranges = step_ranges(profile)
    if ranges.empty:
        frame["step"] = 0
        first_host = profile.host_events["start_ns"].min() if len(profile.host_events) else 0
        fwk_start = {0: int(first_host) if pd.notna(first_host) else 0}
        step_ids = [0] if len(frame) else []
    else:
        frame["step"] = assign_steps(frame["start_ns"].to_numpy(), ranges)
        frame = frame[frame["step"] >= 0]
        fwk_start = dict(
            zip(ranges["step"].tolist(), ranges["host_start_ns"].tolist(), strict=True)
        )
        step_ids = ranges["step"].tolist()
    frame = frame.assign(dur=frame["end_ns"] - frame["start_ns"])
    sums = frame.pivot_table(index="step", columns="kind", values="dur", aggfunc="sum")
    span = frame.groupby("step").agg(first=("start_ns", "min"), last=("end_ns", "max"))
    busy = frame[frame["kind"].isin([COMPUTING, COMMUNICATION])]
    first_task = busy.groupby("step")["start_ns"].min()
    rows = []
    for step in step_ids:

        def total(kind: str, step: int = step) -> int:
            if step not in sums.index or kind not in sums.columns:
                return 0
            value = sums.at[step, kind]
            return 0 if pd.isna(value) else int(value)

        comp, comm = total(COMPUTING), total(COMMUNICATION)
        not_ov, free = total(COMM_NOT_OVERLAPPED), total(FREE)
        bubble = 0
        e2e = int(span.at[step, "last"] - span.at[step, "first"]) if step in span.index else 0
        prepare = int(first_task[step] - fwk_start[step]) if step in first_task.index else 0
        rows.append(
            {
                "step": None if ranges.empty else int(step),
                "Computing": comp,
                "Communication(Not Overlapped)": not_ov,
                "Overlapped": comm - not_ov,
                "Communication": comm,
                "Free": free,
                "Stage": e2e - bubble,
                "Bubble": bubble,
                "Communication(Not Overlapped and Exclude Receive)": not_ov - bubble,
                "Preparing": prepare,
            }
        )
    return pd.DataFrame(rows, columns=["step", *STEP_TRACE_COLUMNS])
