"""The tables one export works from: one rank's profile with the Ascend names added once.

Every writer of an export (trace_view, CSVs, the CANN folder) needs the same derived columns:
kernel names, task types, absolute timestamps, the overlap sections. :class:`ExportData`
computes each once, on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers.intervals import Spans
from msprof_py.exporters import naming
from msprof_py.exporters.overlap import sections, step_ranges
from msprof_py.exporters.runinfo import RunInfo
from msprof_py.profile import Profile


class ExportData:
    """One rank's profile prepared for the Ascend exporters."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.info = RunInfo.from_profile(profile)
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()`` once per export (tables several files share)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def has_steps(self) -> bool:
        """True when the run recorded steps."""
        return not self.profile.steps.empty

    @cached_property
    def tasks(self) -> pd.DataFrame:
        """Device tasks by start time, with ``kernel_name``, ``hw_type``, ``summary_type``,
        ``api``, ``coll_seq``, ``dur_ns`` and ``ts`` (absolute µs text) added."""
        t = self.profile.tasks.sort_values(["start_ns", "task_id"], kind="stable")
        t = t.reset_index(drop=True)
        seq = naming.collective_seq(t)
        return t.assign(
            coll_seq=seq,
            kernel_name=naming.kernel_names(t, seq),
            hw_type=naming.hardware_task_types(t),
            summary_type=naming.summary_task_types(t),
            api=naming.launch_api_names(t),
            dur_ns=(t["end_ns"] - t["start_ns"]).to_numpy(dtype=np.int64),
            ts=self.info.ts_series(t["start_ns"].to_numpy()),
        )

    @cached_property
    def summary_tasks(self) -> pd.DataFrame:
        """The op_summary / kernel_details rows: compute kernels and collectives."""
        t = self.tasks
        return t[t["kind"].isin(["kernel", "collective"])].reset_index(drop=True)

    @cached_property
    def host_ops(self) -> pd.DataFrame:
        """Host ops and annotations (the torch ops of the Python timeline), by start; of spans
        starting together the longer (enclosing) one first."""
        h = self.profile.host_events
        ops = h[h["kind"].isin(["op", "annotation"])]
        ops = ops.sort_values(
            ["start_ns", "end_ns", "event_id"], ascending=[True, False, True], kind="stable"
        )
        return ops.reset_index(drop=True)

    @cached_property
    def main_thread(self) -> int:
        """The thread that ran most host ops (where steps are drawn)."""
        threads = self.host_ops["thread"]
        threads = threads[threads != 0]
        if threads.empty:
            return self.info.pid
        return int(threads.value_counts().idxmax())

    @cached_property
    def launches(self) -> pd.DataFrame:
        """Host launch spans joined to the task they submitted (``api``, ``task_kind``,
        ``task_ts``, ``task_stream``)."""
        h = self.profile.host_events
        launch = h[h["kind"] == "launch"]
        cols = {"task_id": "task_id", "api": "api", "kind": "task_kind", "ts": "task_ts"}
        cols["stream_id"] = "task_stream"
        tasks = self.tasks[list(cols)].rename(columns=cols)
        joined = launch.merge(tasks, on="task_id", how="inner")
        return joined.sort_values("start_ns", kind="stable").reset_index(drop=True)

    @cached_property
    def syncs(self) -> pd.DataFrame:
        """Host waits and other runtime API calls that are CANN API calls, with their ``api``
        name (:func:`naming.sync_api_names`)."""
        h = self.profile.host_events
        sync = h[h["kind"].isin(["sync", "api"])]
        t = self.profile.tasks
        op_types = t.loc[t["kind"] == "kernel", "op_type"].astype(str).unique()
        sync = sync.assign(api=naming.sync_api_names(sync, op_types))
        return sync[sync["api"].notna()].reset_index(drop=True)

    @cached_property
    def sections(self) -> dict[str, Spans]:
        """Overlap analysis of the device timeline (:func:`overlap.sections`)."""
        return sections(self.profile.tasks)

    @cached_property
    def step_ranges(self) -> pd.DataFrame:
        """Device range of each step (see :func:`overlap.step_ranges`)."""
        return step_ranges(self.profile)
