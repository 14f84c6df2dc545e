"""One rank's data, prepared once for every analysis: the analysed steps and their rows.

Steps come from ``profile.steps`` (host clock). Rows with source ``end of run`` are the partial
tail after the last step mark, not a training step. Without any step mark the steps are derived
from the ``step`` column of the tasks (device range of each), and without that the whole run is
one window. By default the first training step is left out when there are at least two (it
holds one-time work: parameter uploads, weight format conversions, allocator growth); pass
``warmup`` to choose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.device.spec import DeviceSpec, SpecError
from msprof_py.profile import Profile

#: task kinds that are device compute (msprof "Computing")
KERNEL = "kernel"
COLLECTIVE = "collective"
MEMCPY = "memcpy"
CUBE_TYPES = ("AI_CORE", "MIX_AIC")
VECTOR_TYPES = ("AI_VECTOR_CORE",)
AICPU_TYPES = ("AI_CPU",)

STEP_COLUMNS = ["step", "start_ns", "end_ns", "duration_ns", "dev_start_ns", "dev_end_ns"]


@dataclass
class RankData:
    """One rank, narrowed to the analysed steps (times in ns).

    ``tasks``/``host``/``memory`` hold the rows of the analysed steps; ``all_tasks`` etc. the
    whole recording. ``tasks`` has a ``duration_ns`` column.
    """

    rank: int
    meta: dict[str, Any]
    spec: DeviceSpec | None
    spec_error: str
    steps: pd.DataFrame
    step_source: str
    warmup_skipped: list[int]
    tasks: pd.DataFrame
    host: pd.DataFrame
    memory: pd.DataFrame
    all_tasks: pd.DataFrame
    all_host: pd.DataFrame
    all_memory: pd.DataFrame
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def n_steps(self) -> int:
        """Number of analysed steps (at least 1 so averages stay finite)."""
        return max(1, len(self.steps))

    @property
    def step_time_ns(self) -> int:
        """Total host time of the analysed steps."""
        return int(self.steps["duration_ns"].sum()) if len(self.steps) else 0

    @property
    def mean_step_ns(self) -> float:
        """Mean host duration of an analysed step."""
        return self.step_time_ns / self.n_steps

    def _subset(self, key: str, frame: pd.DataFrame, mask: Any) -> pd.DataFrame:
        cached = self.cache.get(key)
        if cached is None:
            cached = self.cache[key] = frame[mask]
        return cached

    @property
    def kernels(self) -> pd.DataFrame:
        """The analysed tasks of kind ``kernel``."""
        return self._subset("kernels", self.tasks, self.tasks["kind"] == KERNEL)

    @property
    def host_ops(self) -> pd.DataFrame:
        """The analysed host events of kind ``op``."""
        return self._subset("host_ops", self.host, self.host["kind"] == "op")

    @property
    def all_host_ops(self) -> pd.DataFrame:
        """Every host event of kind ``op``."""
        return self._subset("all_host_ops", self.all_host, self.all_host["kind"] == "op")

    def share(self, ns: float) -> float:
        """``ns`` (a total over the analysed steps) as a share of the step time."""
        return float(ns) / self.step_time_ns if self.step_time_ns else 0.0

    def per_step(self, ns: float) -> float:
        """``ns`` (a total over the analysed steps) per step."""
        return float(ns) / self.n_steps


def load_spec(meta: dict[str, Any]) -> tuple[DeviceSpec | None, str]:
    """The device spec the rank ran on, or None and why not."""
    name = meta.get("device")
    if not name:
        return None, "meta.json names no device"
    try:
        return DeviceSpec.load(str(name)), ""
    except (SpecError, OSError, ValueError) as exc:
        return None, f"device spec {name!r} not loadable ({exc})"


def _derived_steps(tasks: pd.DataFrame) -> pd.DataFrame:
    """Steps from the tasks' ``step`` column (device range of each)."""
    stepped = tasks[tasks["step"] >= 0]
    if stepped.empty:
        return pd.DataFrame(columns=["step", "start_ns", "end_ns"], dtype="int64")
    g = stepped.groupby("step")
    out = pd.DataFrame(
        {
            "start_ns": g["launch_ns"].min().clip(upper=g["start_ns"].min()),
            "end_ns": g["end_ns"].max(),
        }
    ).reset_index()
    return out


def step_windows(
    profile: Profile, tasks: pd.DataFrame, warmup: int | None
) -> tuple[pd.DataFrame, str, list[int]]:
    """Analysed steps with host and device ranges, where they come from, and skipped steps."""
    steps = profile.steps
    training = steps[steps["source"] != "end of run"][["step", "start_ns", "end_ns"]]
    source = "steps table"
    if training.empty:
        training = _derived_steps(tasks)
        source = "task step numbers"
    if training.empty:
        lo = [tasks["launch_ns"].min()] if len(tasks) else [0]
        hi = [tasks["end_ns"].max()] if len(tasks) else [0]
        host = profile.host_events
        if len(host):
            lo.append(host["start_ns"].min())
            hi.append(host["end_ns"].max())
        training = pd.DataFrame({"step": [-1], "start_ns": [min(lo)], "end_ns": [max(hi)]})
        source = "whole run (no steps)"
    training = training.sort_values("step").reset_index(drop=True)
    skip = (1 if len(training) >= 2 else 0) if warmup is None else max(0, warmup)
    skip = min(skip, max(0, len(training) - 1))
    skipped = [int(s) for s in training["step"].iloc[:skip]]
    training = training.iloc[skip:].reset_index(drop=True)
    training = training.astype({"step": "int64", "start_ns": "int64", "end_ns": "int64"})
    training["duration_ns"] = training["end_ns"] - training["start_ns"]
    if source == "whole run (no steps)":
        dev = tasks
        dev_first = pd.Series([dev["start_ns"].min()], index=[-1]) if len(dev) else pd.Series()
        dev_last = pd.Series([dev["end_ns"].max()], index=[-1]) if len(dev) else pd.Series()
    else:
        g = tasks[tasks["step"].isin(training["step"])].groupby("step")
        dev_first, dev_last = g["start_ns"].min(), g["end_ns"].max()
    first = dev_first.reindex(training["step"]).to_numpy(dtype=float)
    last = dev_last.reindex(training["step"]).to_numpy(dtype=float)
    host_start = training["start_ns"].to_numpy()
    host_end = training["end_ns"].to_numpy()
    training["dev_start_ns"] = np.where(np.isnan(first), host_start, first).astype(np.int64)
    training["dev_end_ns"] = np.maximum(np.nan_to_num(last, nan=-1).astype(np.int64), host_end)
    return training[STEP_COLUMNS], source, skipped


def compact(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its string columns as categoricals: a training loop repeats a few hundred
    names and shapes, so this shrinks the tables and makes every row selection cheap."""
    out = df.copy(deep=False)  # numeric columns are shared, not copied
    for c in df.columns:
        if df[c].dtype == object or pd.api.types.is_string_dtype(df[c]):
            out[c] = df[c].astype("category")
    return out


def prepare(profile: Profile, rank: int, warmup: int | None = None) -> RankData:
    """The :class:`RankData` of ``rank``."""
    one = profile if profile.ranks == [rank] else profile.for_rank(rank)
    meta = one.meta[rank]
    spec, why = load_spec(meta)
    one = Profile(one.path, one.meta, {k: compact(v) for k, v in one.tables.items()})
    tasks = one.tasks
    tasks["duration_ns"] = (tasks["end_ns"] - tasks["start_ns"]).clip(lower=0)
    steps, source, skipped = step_windows(one, tasks, warmup)
    host, memory = one.host_events, one.memory
    if source == "whole run (no steps)":
        in_tasks, in_host, in_mem = tasks, host, memory
    else:
        ids = steps["step"].to_numpy()
        in_tasks = tasks[tasks["step"].isin(ids)]
        in_host = host[host["step"].isin(ids)]
        in_mem = memory[memory["step"].isin(ids)]
    return RankData(
        rank=rank,
        meta=meta,
        spec=spec,
        spec_error=why,
        steps=steps,
        step_source=source,
        warmup_skipped=skipped,
        tasks=in_tasks.reset_index(drop=True),
        host=in_host.reset_index(drop=True),
        memory=in_mem.reset_index(drop=True),
        all_tasks=tasks,
        all_host=host,
        all_memory=memory,
    )
