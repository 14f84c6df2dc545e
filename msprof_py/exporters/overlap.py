"""The per-step time breakdown of ``step_trace_time.csv`` and the Overlap Analysis sections.

The definitions (msprof's ``overlap_analysis_processor.cpp`` and torch_npu's step_trace_time)
and their arithmetic live in :mod:`msprof_py.analyzers.timeline` (``sections``,
``step_sections``), which ``msprof analyze`` uses too; here they are applied to every recorded
step of a rank and laid out as the export files want them. A step's device range runs from
the first device task launched in it to the later of its last task's end and its host end;
without steps the whole run is one row with an empty step. Times are integer ns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals, timeline
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


def sections(tasks: pd.DataFrame) -> dict[str, intervals.Spans]:
    """The Computing, Communication, not-overlapped and Free sections of a rank's tasks."""
    return timeline.sections(tasks)


def sections_frame(sec: dict[str, intervals.Spans]) -> pd.DataFrame:
    """All sections as rows ``kind, start_ns, end_ns`` (msprof's names), sorted by start."""
    names = {
        COMPUTING: "computing",
        COMMUNICATION: "communication",
        COMM_NOT_OVERLAPPED: "not_overlapped",
        FREE: "free",
    }
    parts = [
        pd.DataFrame({"kind": kind, "start_ns": sec[key][0], "end_ns": sec[key][1]})
        for kind, key in names.items()
    ]
    df = pd.concat(parts, ignore_index=True)
    return df.sort_values(["start_ns", "kind"], kind="stable").reset_index(drop=True)


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


def step_breakdown(profile: Profile, sec: dict[str, intervals.Spans] | None = None) -> pd.DataFrame:
    """The rows of ``step_trace_time.csv`` in ns: ``step`` (None without steps) + columns."""
    sec = sections(profile.tasks) if sec is None else sec
    ranges = step_ranges(profile).sort_values("start_ns", kind="stable")
    if ranges.empty:
        every = np.concatenate([sec[k][0] for k in ("computing", "communication", "free")])
        if not every.size:
            return pd.DataFrame(columns=["step", *STEP_TRACE_COLUMNS])
        first_host = profile.host_events["start_ns"].min() if len(profile.host_events) else 0
        host = int(first_host) if pd.notna(first_host) else 0
        lo = np.array([every.min()], dtype=np.int64)
        hi = np.array([np.iinfo(np.int64).max], dtype=np.int64)
        host_start = np.array([host], dtype=np.int64)
        step_ids: list[int | None] = [None]
    else:
        lo = ranges["start_ns"].to_numpy(dtype=np.int64)
        hi = ranges["end_ns"].to_numpy(dtype=np.int64)
        host_start = ranges["host_start_ns"].to_numpy(dtype=np.int64)
        step_ids = [int(x) for x in ranges["step"]]
    sums = timeline.step_sections(sec, lo, hi, host_start)
    out = pd.DataFrame(
        {
            "step": pd.Series(step_ids, dtype=object),
            "Computing": sums["computing"],
            "Communication(Not Overlapped)": sums["not_overlapped"],
            "Overlapped": sums["overlapped"],
            "Communication": sums["communication"],
            "Free": sums["free"],
            "Stage": sums["stage"],
            "Bubble": 0,
            "Communication(Not Overlapped and Exclude Receive)": sums["not_overlapped"],
            "Preparing": sums["preparing"],
        }
    )
    if not ranges.empty:
        out = out.sort_values("step", kind="stable").reset_index(drop=True)
    return out
