"""One rank's data, prepared once for every analysis: the analysed steps and their rows.

Steps come from ``profile.steps`` (host marks: ``optimizer.step()``, ``prof.step()``,
``msprof_py.step()``). Rows with source ``end of run`` are the partial tail after the last
step mark, not a training step. Without any step mark the steps are derived from the ``step``
column of the tasks, and without that the whole run is one window.

**Step time** is the step's window on the device (:func:`device_windows`): from the end of
the previous step's device work to the end of the last task the step launched. The windows
partition the device timeline, so every per-step figure adds up to the step time even when
the host runs ahead of the device (a loop without ``.item()``: the host marks then say
nothing about when the step's work ran). The host range of each step stays in
``start_ns``/``end_ns`` (``host_ns``).

Left out of the analysed steps: the first training step when the recording starts at the
process's first step and holds at least two (it holds one-time work: parameter uploads,
weight format conversions, allocator growth; pass ``warmup`` to choose), and **outlier
steps** (:func:`outliers`: more than 3x the median step, e.g. an evaluation pass in the
loop), which are reported instead (``keep_outliers`` keeps them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from msprof_py.device.spec import DeviceSpec, preset_names
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


STEP_COLUMNS = [
    "step",
    "start_ns",
    "end_ns",
    "host_ns",
    "duration_ns",
    "dev_start_ns",
    "dev_end_ns",
]
#: columns of the profile no analysis reads: ``analyze(path)`` does not load them
UNREAD_COLUMNS = {
    "tasks": ("stream_id",),
    "host_events": ("stream_id",),
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
    "sequence",
    "module_path",
    "stack",
    "parent_id",
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
    choice: StepChoice
    tasks: pd.DataFrame
    host: pd.DataFrame
    memory: pd.DataFrame
    all_tasks: pd.DataFrame
    all_host: pd.DataFrame
    all_memory: pd.DataFrame
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    offsets: dict[str, int] = field(default_factory=dict, repr=False)
    #: graph mode: every plan of the recording, what the passes tried, the planned kernels
    #: (the profile's ``graphs``, ``graph_passes``, ``graph_kernels``; empty when eager)
    graphs: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    graph_passes: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    graph_kernels: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    #: real wall time of the data-loading ranges measured on the recording host (the
    #: profile's ``measured_waits``, whole recording): never part of the timeline
    measured_waits: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

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
        """Mean step time (device window) of an analysed step."""
        return self.step_time_ns / self.n_steps

    @property
    def median_step_ns(self) -> float:
        """Median step time (device window) of the analysed steps."""
        return float(self.steps["duration_ns"].median()) if len(self.steps) else 0.0

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
        """``ns`` (a total over the analysed steps) as a share of the step time, in [0, 1]."""
        return share_of(ns, self.step_time_ns)

    def per_step(self, ns: float) -> float:
        """``ns`` (a total over the analysed steps) per step."""
        return float(ns) / self.n_steps


def share_of(part: Any, whole: float) -> Any:
    """``part / whole`` clipped to [0, 1] (0 where ``whole`` is 0): a share is never outside
    [0, 1], inf or NaN. ``part``: a number or an array/Series."""
    if not whole or not np.isfinite(whole):
        return part * 0.0 if hasattr(part, "__mul__") and not np.isscalar(part) else 0.0
    out = np.clip(np.nan_to_num(np.asarray(part, dtype=float) / float(whole)), 0.0, 1.0)
    if isinstance(part, pd.Series):
        return pd.Series(out, index=part.index)
    return float(out) if np.ndim(out) == 0 else out


def op_self_ns(ops: pd.DataFrame) -> np.ndarray:
    """Self host time of each op of ``ops`` (its span less the spans of the ops of ``ops``
    nested directly in it, by ``parent_id``; never below 0): summed over ops it counts every
    nanosecond once, where the spans of nested ops (an imported ``aten::linear`` around its
    ``aten::addmm``) count it at every level. Ops without ``parent_id``: their spans."""
    span = (ops["end_ns"] - ops["start_ns"]).to_numpy(dtype=np.int64)
    if "parent_id" not in ops.columns or not len(ops):
        return span
    parent = ops["parent_id"].to_numpy(dtype=np.int64)
    nested = parent >= 0
    if not nested.any():
        return span
    ids = pd.Index(ops["event_id"].to_numpy())
    if not ids.is_unique:  # several ranks at once: nesting is per rank, leave the spans
        return span
    at = ids.get_indexer(parent[nested])
    ok = at >= 0
    children = np.bincount(at[ok], weights=span[nested][ok], minlength=len(ops))
    return np.maximum(span - children.astype(np.int64), 0)


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
    except Exception as exc:  # a damaged inline spec is one reason, never a crash
        return None, f"device spec not loadable ({exc})"


def _derived_steps(tasks: pd.DataFrame) -> pd.DataFrame:
    """Steps from the tasks' ``step`` column (host range: first launch to last end)."""
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


def device_windows(
    steps: pd.DataFrame, tasks: pd.DataFrame, resumed: bool = False
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Each step's device window ``[lo, hi)`` (``steps`` sorted by number), and whether the
    windows come from the device (else: the host marks, when no step launched a task).

    As Ascend's step_trace cuts iterations on the device: a step's work is the tasks it
    launched (the tasks' ``step``, given at launch), and its window runs from the end of the
    previous step to the end of its own last task, or its host end mark when that is later
    (host work after the last launch). ``hi`` is a running maximum, so the windows are
    contiguous, never overlap and their lengths add up to the span they cover. The first
    window starts at the step's host start, or at its first task when ``resumed`` (the
    recording began after ``msprof --warmup`` steps: the device may still be running their
    unrecorded work when the first recorded step starts on the host).
    """
    numbers = steps["step"].to_numpy(dtype=np.int64)
    host_lo = steps["start_ns"].to_numpy(dtype=np.int64)
    host_hi = np.maximum(steps["end_ns"].to_numpy(dtype=np.int64), host_lo)
    stepped = tasks.loc[tasks["step"] >= 0, ["step", "start_ns", "end_ns"]]
    if stepped.empty or not stepped["step"].isin(numbers).any():
        return host_lo, host_hi, False
    g = stepped.groupby("step")
    last_end = g["end_ns"].max()
    first_start = g["start_ns"].min()
    # every step number that launched work, the analysed ones included, in order
    every = np.union1d(last_end.index.to_numpy(dtype=np.int64), numbers)
    ends = last_end.reindex(every).to_numpy(dtype=float)
    marked = pd.Series(host_hi, index=numbers).reindex(every).to_numpy(dtype=float)
    ends = np.fmax(ends, marked)
    running = np.fmax.accumulate(np.nan_to_num(ends, nan=-np.inf))
    before = np.concatenate([[-np.inf], running[:-1]])  # device end of all earlier steps
    pos = np.searchsorted(every, numbers)
    hi_f, prev = running[pos], before[pos]
    first = first_start.reindex(numbers).to_numpy(dtype=float)
    start = first if resumed else np.fmin(first, host_lo)
    lo_f = np.where(np.isfinite(prev), prev, start)
    lo_f = np.where(np.isfinite(lo_f), lo_f, host_lo)  # nothing launched yet: the host mark
    hi_f = np.where(np.isfinite(hi_f), hi_f, lo_f)
    lo = lo_f.astype(np.int64)
    return lo, np.maximum(hi_f.astype(np.int64), lo), True


#: a step is an outlier when its time is more than this many times the median step's
OUTLIER_FACTOR = 3.0
#: fewer analysed steps than this: no step is called an outlier (of two, which one is?)
OUTLIER_MIN_STEPS = 3


def outliers(durations: np.ndarray) -> tuple[np.ndarray, float]:
    """Which steps are outliers, and the median step time they are compared with. A step
    is an outlier when it takes more than ``OUTLIER_FACTOR`` times the median (an evaluation
    pass inside the loop, a checkpoint, a recompilation); with fewer than
    ``OUTLIER_MIN_STEPS`` steps, or a median of 0, none is."""
    d = np.asarray(durations, dtype=float)
    ref = float(np.median(d)) if d.size else 0.0
    if d.size < OUTLIER_MIN_STEPS or ref <= 0:
        return np.zeros(d.size, dtype=bool), ref
    return d > OUTLIER_FACTOR * ref, ref


def profile_meta_warmup(profile: Profile) -> int:
    """The steps ``msprof --warmup`` skipped before recording (0 when unknown)."""
    for meta in profile.meta.values():
        try:
            return int(meta.get("warmup") or 0)
        except (TypeError, ValueError):
            return 0
    return 0


@dataclass
class StepChoice:
    """How the analysed steps were chosen: the source, what was left out and why."""

    source: str
    warmup_skipped: list[int]
    outliers: list[dict[str, Any]]
    outlier_reference_ns: float
    windows: str
    optimizers: int
    all_steps: pd.DataFrame


def step_windows(
    profile: Profile,
    tasks: pd.DataFrame,
    warmup: int | None,
    keep_outliers: bool = False,
) -> tuple[pd.DataFrame, StepChoice]:
    """The analysed steps (host range ``start_ns``/``end_ns``, device window
    ``dev_start_ns``/``dev_end_ns``, ``duration_ns``: the window's length, the step time) and
    how they were chosen. ``warmup``: first training steps left out (default: the first
    step when the recording starts at the process's first step and holds two or more; none
    when ``msprof --warmup`` already skipped the warm-up). Outlier steps (see
    :func:`outliers`) are left out too unless ``keep_outliers``."""
    steps = profile.steps
    training = steps[steps["source"] != "end of run"]
    optimizer_ids = (
        training.loc[training["source"] == "optimizer", "optimizer_id"]
        if "optimizer_id" in training.columns
        else pd.Series(dtype="int64")
    )
    optimizers = int(np.unique(optimizer_ids[optimizer_ids >= 0]).size)
    training = training[["step", "start_ns", "end_ns"]]
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
    training = training.astype({"step": "int64", "start_ns": "int64", "end_ns": "int64"})
    if source == "whole run (no steps)":
        on_device = len(tasks) > 0
        lo_w = np.array([tasks["start_ns"].min() if on_device else training["start_ns"][0]])
        hi_w = np.array([tasks["end_ns"].max() if on_device else training["end_ns"][0]])
    else:
        resumed = profile_meta_warmup(profile) > 0
        lo_w, hi_w, on_device = device_windows(training, tasks, resumed)
    training["host_ns"] = training["end_ns"] - training["start_ns"]
    training["dev_start_ns"] = np.asarray(lo_w, dtype=np.int64)
    training["dev_end_ns"] = np.asarray(hi_w, dtype=np.int64)
    training["duration_ns"] = training["dev_end_ns"] - training["dev_start_ns"]
    if warmup is not None and warmup > 0 and warmup >= len(training):
        counted = "no training steps" if source.startswith("whole") else f"{len(training)} step(s)"
        raise WarmupError(
            f"--warmup {warmup} leaves no step to analyse: the profile has {counted} "
            f"({source}); use --warmup {max(0, len(training) - 1)} or less"
        )
    if warmup is None:
        first_of_process = int(training["step"].iloc[0]) <= 0
        skip = 1 if len(training) >= 2 and first_of_process else 0
    else:
        skip = max(0, warmup)
    skip = min(skip, max(0, len(training) - 1))
    skipped = [int(s) for s in training["step"].iloc[:skip]]
    kept = training.iloc[skip:].reset_index(drop=True)
    odd, ref = outliers(kept["duration_ns"].to_numpy())
    outlier_rows = [
        {
            "step": int(r.step),
            "step_ns": int(r.duration_ns),
            "host_step_ns": int(r.host_ns),
            "ratio_to_median": float(r.duration_ns / ref) if ref > 0 else None,
            "kept": bool(keep_outliers),
        }
        for r in kept[odd].itertuples()
    ]
    if not keep_outliers:
        kept = kept[~odd].reset_index(drop=True)
    windows = "device" if on_device else "host marks"
    choice = StepChoice(source, skipped, outlier_rows, ref, windows, optimizers, training)
    return kept[STEP_COLUMNS], choice


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


def prepare(
    profile: Profile, rank: int, warmup: int | None = None, keep_outliers: bool = False
) -> RankData:
    """The :class:`RankData` of ``rank``."""
    one = profile if profile.ranks == [rank] else profile.for_rank(rank)
    meta = one.meta[rank]
    spec, why = load_spec(meta)
    # one rank: its rank column says nothing (and is 8 bytes a row)
    tables = {k: compact(v.drop(columns="rank", errors="ignore")) for k, v in one.tables.items()}
    one = Profile(one.path, one.meta, tables)
    tasks = one.tasks
    tasks["duration_ns"] = (tasks["end_ns"] - tasks["start_ns"]).clip(lower=0)
    steps, choice = step_windows(one, tasks, warmup, keep_outliers)
    source, skipped = choice.source, choice.warmup_skipped
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
        choice=choice,
        tasks=in_tasks.reset_index(drop=True),
        host=in_host.reset_index(drop=True),
        memory=in_mem.reset_index(drop=True),
        all_tasks=tasks,
        all_host=host,
        all_memory=memory,
        offsets=offsets,
        graphs=one.graphs,
        graph_passes=one.graph_passes,
        graph_kernels=one.graph_kernels,
        measured_waits=one.measured_waits,
    )


_Result = TypeVar("_Result")


def per_rank(fn: Callable[..., _Result]) -> Callable[..., _Result]:
    """Compute ``fn(data, *args)`` once per rank's data (``data.cache``, keyed by the function
    and its hashable arguments): the tables of an analysis and its rules ask for the same
    derived tables (the AI CPU tasks, TransData groups, utilisation ...) several times.
    Each caller gets its own shallow copy of a frame (copy-on-write: free, and safe to add
    columns to) and of a dict or list, so no caller sees another's changes."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def cached(data: RankData, *args: Any, **kwargs: Any) -> _Result:
        key = (name, args, tuple(sorted(kwargs.items())))
        try:
            result = data.cache[key]
        except KeyError:
            result = data.cache[key] = fn(data, *args, **kwargs)
        return _own_copy(result)

    return cached


def _own_copy(value: Any) -> Any:
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy(deep=False)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _own_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_own_copy(v) for v in value)
    return value
