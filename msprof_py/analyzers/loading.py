"""Data loading measured on the recording host, set against the modelled timeline.

With ``host_time="modeled"`` the timeline gives a data-loading range (the DataLoader
iterator's ``__next__``, ``msprof_py.annotate("data loading")``) no length: the host clock is
the model's, and loading runs no device op. The recorder measures each such range's real
wall time anyway and keeps it beside the timeline (the profile's ``measured_waits``), so the
timeline, its exports and the gate figures stay a function of the program alone.

:func:`waits` puts the two together, per data-loading range of the analysed steps:

* ``wall_ns``: the measured wait (nested data-loading ranges counted once: the outermost);
* ``backlog_ns``: the device work already submitted when the range began on the modelled
  host clock, still to run then (the latest end of the work launched before it, less the
  range's start; 0 when the device had drained, e.g. after a sync);
* ``idle_ns = max(0, wall_ns - backlog_ns)``: the device idle the wait causes. A host that
  waits ``wall_ns`` there submits every later launch that much later; the device first runs
  the backlog, then idles for the rest of the wait.

It is an estimate on the modelled timeline's terms with a wait measured on *this* host (a
different machine, or a loaded one, loads at another speed).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.ops import WORK_KINDS

COLUMNS = ["event_id", "name", "step", "start_ns", "wall_ns", "backlog_ns", "idle_ns"]


def _outermost(w: pd.DataFrame) -> pd.DataFrame:
    """The ranges no other data-loading range of the same step encloses (on the wall clock:
    a user's ``annotate("data loading")`` around ``next(loader)`` holds the loader's own)."""
    if len(w) < 2:
        return w
    w = w.sort_values(["wall_start_ns", "wall_ns"], ascending=[True, False], kind="stable")
    ends = (w["wall_start_ns"] + w["wall_ns"]).to_numpy()
    reach = np.maximum.accumulate(ends)
    inside = np.zeros(len(w), dtype=bool)
    inside[1:] = ends[1:] <= reach[:-1]
    return w[~inside]


def waits(data: RankData) -> pd.DataFrame:
    """The measured data-loading waits of the analysed steps (see the module docs); empty
    when the profile measured none."""
    measured = data.measured_waits
    if measured is None or measured.empty:
        return pd.DataFrame(columns=COLUMNS)
    w = measured[measured["step"].isin(data.steps["step"])]
    if w.empty:
        return pd.DataFrame(columns=COLUMNS)
    w = pd.concat([_outermost(g) for _, g in w.groupby("step", sort=True)], ignore_index=True)
    host = data.all_host.set_index("event_id")["start_ns"]
    start = host.reindex(w["event_id"].to_numpy()).to_numpy(dtype=np.float64)
    tasks = data.all_tasks
    work = tasks.loc[tasks["kind"].isin(WORK_KINDS), ["launch_ns", "end_ns"]]
    work = work.sort_values("launch_ns", kind="stable")
    launched = work["launch_ns"].to_numpy(dtype=np.float64)
    drained = np.maximum.accumulate(work["end_ns"].to_numpy(dtype=np.float64)) if len(work) else []
    before = np.searchsorted(launched, np.nan_to_num(start, nan=-np.inf), side="right") - 1
    last_end = np.where(before >= 0, np.asarray(drained)[np.clip(before, 0, None)], -np.inf)
    backlog = np.clip(np.nan_to_num(last_end - start, nan=0.0, neginf=0.0), 0, None)
    wall = w["wall_ns"].to_numpy(dtype=np.float64)
    return pd.DataFrame(
        {
            "event_id": w["event_id"].to_numpy(),
            "name": w["name"].astype(str).to_numpy(),
            "step": w["step"].to_numpy(),
            "start_ns": np.nan_to_num(start, nan=0.0),
            "wall_ns": wall,
            "backlog_ns": backlog,
            "idle_ns": np.clip(wall - backlog, 0, None),
        },
        columns=COLUMNS,
    )


def per_step(measured: pd.DataFrame, steps: pd.Series) -> pd.DataFrame:
    """``wall_ns``, ``backlog_ns`` and ``idle_ns`` summed per step, one row per step of
    ``steps`` (0 where a step waited for no batch)."""
    sums = measured.groupby("step", sort=True)[["wall_ns", "backlog_ns", "idle_ns"]].sum()
    return sums.reindex(pd.Index(steps.to_numpy(), name="step"), fill_value=0.0)


def worker_processes(names: pd.Series) -> bool | None:
    """Whether the loader ran worker processes (``num_workers > 0``), told by torch's
    iterator class in the range names; None when no DataLoader range says."""
    text = names.astype(str)
    if text.str.contains("_MultiProcessingDataLoaderIter", regex=False).any():
        return True
    if text.str.contains("_SingleProcessDataLoaderIter", regex=False).any():
        return False
    return None
