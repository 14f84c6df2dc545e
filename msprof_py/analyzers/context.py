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

from msprof_py.device.spec import DeviceSpec, SpecError, preset_names
from msprof_py.profile import Profile, ProfileError
from msprof_py.profile.schema import TABLES

#: task kinds that are device compute (msprof "Computing")
KERNEL = "kernel"
COLLECTIVE = "collective"
MEMCPY = "memcpy"
CUBE_TYPES = ("AI_CORE", "MIX_AIC")
VECTOR_TYPES = ("AI_VECTOR_CORE",)
AICPU_TYPES = ("AI_CPU",)


class WarmupError(ProfileError):
    """``warmup`` leaves out every step of the profile (the message gives the step count)."""


STEP_COLUMNS = ["step", "start_ns", "end_ns", "duration_ns", "dev_start_ns", "dev_end_ns"]
#: columns of the profile no analysis reads: ``analyze(path)`` does not load them
UNREAD_COLUMNS = {
    "tasks": ("stream_id",),
    "host_events": ("stream_id", "sequence"),
    "memory": ("address", "active", "stream_id", "tag"),
}
#: per table, the columns ``analyze(path)`` loads (every other)
READ_COLUMNS = {
    name: [c for c in table.names if c not in UNREAD_COLUMNS.get(name, ())]
    for name, table in TABLES.items()
}
#: the columns of the host ops the analyses read (:attr:`RankData.all_host_ops`)
OP_COLUMNS = [
    "event_id",
    "name",
    "module",
    "thread",
    "step",
    "start_ns",
    "end_ns",
    "input_shapes",
    "input_dtypes",
]


@dataclass
class RankData:
    """One rank, narrowed to the analysed steps (times in ns).

    ``tasks``/``host``/``memory`` hold the rows of the analysed steps; ``all_tasks`` etc. the
    whole recording. ``tasks`` has a ``duration_ns`` column. ``offsets``: where the analysed
    rows are one run of the whole recording's rows (they share its memory), the position of
    the first, per table (``"tasks"``, ``"host"``, ``"memory"``).
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
    offsets: dict[str, int] = field(default_factory=dict, repr=False)

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

    def _subset(self, key: str, frame: pd.DataFrame, column: str, value: str) -> pd.DataFrame:
        cached = self.cache.get(key)
        if cached is None:
            cached = self.cache[key] = frame[frame[column] == value]
        return cached

    @property
    def kernels(self) -> pd.DataFrame:
        """The analysed tasks of kind ``kernel`` (every column: a copy of most of ``tasks``;
        :meth:`kernel_columns` copies only what an analysis reads)."""
        return self._subset("kernels", self.tasks, "kind", KERNEL)

    @property
    def kernel_mask(self) -> np.ndarray:
        """True for the rows of ``tasks`` of kind ``kernel``."""
        mask = self.cache.get("kernel_mask")
        if mask is None:
            mask = self.cache["kernel_mask"] = (self.tasks["kind"] == KERNEL).to_numpy()
        return mask

    def kernel_columns(self, columns: list[str]) -> pd.DataFrame:
        """``kernels[columns]`` without copying the other columns."""
        cached = self.cache.get("kernels")
        if cached is not None:
            return cached[columns]
        return self.tasks.loc[self.kernel_mask, columns]

    @property
    def host_ops(self) -> pd.DataFrame:
        """The analysed host events of kind ``op`` (indexed by their position in ``host``; the
        columns of :attr:`all_host_ops`)."""
        cached = self.cache.get("host_ops")
        if cached is not None:
            return cached
        start = self.offsets.get("host")
        if start is None:
            host = self.host
            cols = [c for c in OP_COLUMNS if c in host.columns]
            cached = self.cache["host_ops"] = host.loc[host["kind"] == "op", cols]
            return cached
        # the analysed rows are a run of the whole recording's: a run of its ops, no copy
        every = self.all_host_ops
        labels = every.index.to_numpy()
        lo, hi = np.searchsorted(labels, [start, start + len(self.host)])
        cached = every.iloc[lo:hi].set_axis(pd.Index(labels[lo:hi] - start))
        self.cache["host_ops"] = cached
        return cached

    @property
    def all_host_ops(self) -> pd.DataFrame:
        """Every host event of kind ``op``: the columns in ``OP_COLUMNS`` (those read of
        ops; there are as many ops as launches, so not a copy of every column)."""
        cached = self.cache.get("all_host_ops")
        if cached is None:
            host = self.all_host
            cols = [c for c in OP_COLUMNS if c in host.columns]
            cached = self.cache["all_host_ops"] = host.loc[host["kind"] == "op", cols]
        return cached

    def share(self, ns: float) -> float:
        """``ns`` (a total over the analysed steps) as a share of the step time."""
        return float(ns) / self.step_time_ns if self.step_time_ns else 0.0

    def per_step(self, ns: float) -> float:
        """``ns`` (a total over the analysed steps) per step."""
        return float(ns) / self.n_steps


def load_spec(meta: dict[str, Any]) -> tuple[DeviceSpec | None, str]:
    """The device spec the rank ran on, or None and why not.

    The spec comes from the profile itself (``device_spec``, written by the recorder) or, for
    older profiles, from the preset the profile names. A profile never makes msprof read a
    file: a ``device`` that is not a preset name is not looked up on disk.
    """
    inline = meta.get("device_spec")
    name = meta.get("device")
    try:
        if inline is not None:
            return DeviceSpec.from_mapping(inline, origin="the profile's device_spec"), ""
        if not name:
            return None, "meta.json names no device"
        if str(name) not in preset_names():
            return None, f"device {str(name)!r} is not a preset and the profile carries no spec"
        return DeviceSpec.preset(str(name)), ""
    except (SpecError, OSError, ValueError, TypeError) as exc:
        return None, f"device spec not loadable ({exc})"


def _derived_steps(tasks: pd.DataFrame) -> pd.DataFrame:
    """Steps from the tasks' ``step`` column (device range of each)."""
    stepped = tasks.loc[tasks["step"] >= 0, ["step", "launch_ns", "start_ns", "end_ns"]]
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
    if warmup is not None and warmup > 0 and warmup >= len(training):
        counted = "no training steps" if source.startswith("whole") else f"{len(training)} step(s)"
        raise WarmupError(
            f"--warmup {warmup} leaves no step to analyse: the profile has {counted} "
            f"({source}); use --warmup {max(0, len(training) - 1)} or less"
        )
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
        cols = ["step", "start_ns", "end_ns"]
        g = tasks.loc[tasks["step"].isin(training["step"]), cols].groupby("step")
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
    names and shapes, so this shrinks the tables and makes every row selection cheap.
    Categoricals already there keep only the categories their rows use (one rank's slice of
    a profile loaded with ``categorical=True`` holds every rank's categories)."""
    out = df.copy(deep=False)  # numeric columns are shared, not copied
    for c in df.columns:
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            codes = df[c].cat.codes.to_numpy()
            if np.unique(codes[codes >= 0]).size < len(df[c].cat.categories):
                out[c] = df[c].cat.remove_unused_categories()
        elif df[c].dtype == object or pd.api.types.is_string_dtype(df[c]):
            out[c] = df[c].astype("category")
    return out


def rows(frame: pd.DataFrame, mask: Any) -> tuple[pd.DataFrame, int | None]:
    """The rows of ``frame`` where ``mask`` holds, with a fresh index, and the position of the
    first when they are one run. Rows of a run of steps usually lie together (tables are in
    time order): then a slice that shares the frame's memory instead of a copy."""
    mask = np.asarray(mask, dtype=bool)
    where = np.flatnonzero(mask)
    if where.size and where[-1] - where[0] + 1 == where.size:
        start = int(where[0])
        return frame.iloc[start : start + where.size].reset_index(drop=True), start
    return frame[mask].reset_index(drop=True), None


def prepare(profile: Profile, rank: int, warmup: int | None = None) -> RankData:
    """The :class:`RankData` of ``rank``."""
    one = profile if profile.ranks == [rank] else profile.for_rank(rank)
    meta = one.meta[rank]
    spec, why = load_spec(meta)
    # one rank: its rank column says nothing (and is 8 bytes a row)
    tables = {k: compact(v.drop(columns="rank", errors="ignore")) for k, v in one.tables.items()}
    one = Profile(one.path, one.meta, tables)
    tasks = one.tasks
    tasks["duration_ns"] = (tasks["end_ns"] - tasks["start_ns"]).clip(lower=0)
    steps, source, skipped = step_windows(one, tasks, warmup)
    host, memory = one.host_events, one.memory
    offsets: dict[str, int] = {}
    if source == "whole run (no steps)":
        in_tasks, in_host, in_mem = tasks, host, memory
        offsets = {"tasks": 0, "host": 0, "memory": 0}
    else:
        ids = steps["step"].to_numpy()
        subsets = {}
        for name, frame in (("tasks", tasks), ("host", host), ("memory", memory)):
            subsets[name], start = rows(frame, frame["step"].isin(ids))
            if start is not None:
                offsets[name] = start
        in_tasks, in_host, in_mem = subsets["tasks"], subsets["host"], subsets["memory"]
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
        offsets=offsets,
    )
