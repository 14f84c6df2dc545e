"""Compute density: FLOPs, bytes, arithmetic intensity, achieved rate vs peak, roofline class.

The ceilings are the device spec's achievable rates: the cube's peak FLOP/s for the dtype it
computes in (fp32 runs as fp16 on a cube without an fp32 fractal) times the cube efficiency,
the vector units' peak element-ops/s times their efficiency, and the effective HBM bandwidth.
A kernel is

* **overhead-bound** when neither its compute nor its memory time at those ceilings reaches
  the per-task scheduling overhead (the fixed cost dominates: fuse it or batch more work);
* **compute-bound** when its compute time exceeds its memory time (intensity above the ridge);
* **memory-bound** otherwise.

``utilisation`` (achieved over nominal peak) uses the nominal peak, without the efficiency.

The **roofline** table (:func:`roofline`) places every analysed kernel with FLOPs and bytes,
not only the longest: aggregated by op type, engine, shapes and dtypes, and, where that
leaves more than :data:`ROOFLINE_POINTS` groups, binned per op type and engine by
intensity and achieved rate (half-octave bins), so the cube kernels of a model whose
longest groups are vector ops are on the plot too.
Per step: the device busy time (any kernel or collective) over the step time, and for the cube
and vector units both the time any of their tasks runs and the core-weighted occupancy
(task time x cores used / cores).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals, shapes
from msprof_py.analyzers.context import (
    AICPU_TYPES,
    COLLECTIVE,
    CUBE_TYPES,
    KERNEL,
    VECTOR_TYPES,
    RankData,
    per_rank,
    share_of,
)
from msprof_py.device.costmodel import cube_dtype
from msprof_py.device.spec import DeviceSpec, SpecError

CLASSES = ("compute-bound", "memory-bound", "overhead-bound")
#: every ``bound`` label (``unknown`` without a device spec), sorted: the categories of the
#: column, so that grouping by it orders as grouping the strings would
BOUNDS = tuple(sorted((*CLASSES, "unknown")))
DENSITY_COLUMNS = [
    "rank",
    "name",
    "op_type",
    "task_type",
    "input_shapes",
    "input_dtypes",
    "count",
    "total_ns",
    "mean_ns",
    "flops",
    "bytes",
    "intensity",
    "ridge_intensity",
    "achieved_tflops",
    "peak_tflops",
    "utilisation",
    "bound",
    "share_of_step",
]
UTILISATION_COLUMNS = [
    "rank",
    "step",
    "step_ns",
    "device_busy_ns",
    "utilisation",
    "cube_busy_ns",
    "cube_utilisation",
    "cube_occupancy",
    "vector_busy_ns",
    "vector_utilisation",
    "vector_occupancy",
    "aicpu_busy_ns",
]
CLASS_COLUMNS = ["rank", "bound", "kernels", "total_ns", "share_of_step"]
ROOFLINE_COLUMNS = [
    "rank",
    "unit",
    "op_type",
    "task_type",
    "input_shapes",
    "input_dtypes",
    "groups",
    "count",
    "total_ns",
    "flops",
    "bytes",
    "intensity",
    "achieved_tflops",
    "bound",
    "share_of_step",
]
#: at most this many roofline points per rank before binning
ROOFLINE_POINTS = 400
#: bins per octave of intensity and achieved rate when binning
ROOFLINE_BINS_PER_OCTAVE = 2


def peak_rates(spec: DeviceSpec, task_type: str, dtype: str) -> tuple[float, float]:
    """(nominal peak, achievable peak) in FLOP/s of the unit running ``task_type`` in ``dtype``."""
    try:
        if task_type in CUBE_TYPES:
            peak = spec.cube_peak_flops(cube_dtype(spec, dtype))
            return peak, peak * spec.cube.efficiency
        if task_type in VECTOR_TYPES:
            peak = spec.vector_peak_ops(dtype or "float32")
            return peak, peak * spec.vector.efficiency
        if task_type in AICPU_TYPES:
            return spec.aicpu.flops_per_s, spec.aicpu.flops_per_s
    except (SpecError, ValueError, KeyError):
        pass
    return float("nan"), float("nan")


def kernel_rates(data: RankData) -> pd.DataFrame:
    """The analysed kernels (the columns :func:`density` groups by, ``flops``, ``bytes`` and
    ``duration_ns``) with ``peak``, ``ceiling`` (achievable) FLOP/s and ``bound`` (categorical:
    no string per row). Not kept: :func:`density` keeps the per-class totals
    :func:`by_class` reads."""
    keys = ["name", "op_type", "task_type", "input_shapes", "input_dtypes"]
    k = data.kernel_columns([*keys, "flops", "bytes", "duration_ns"])
    dtype = shapes.first_dtype(k["input_dtypes"])
    codes, uniques = shapes.factorize(k["task_type"], dtype)
    spec = data.spec
    nominal = np.full(len(uniques) + 1, np.nan)
    ceiling = np.full(len(uniques) + 1, np.nan)
    if spec is not None:
        for i, (task_type, dt) in enumerate(uniques):
            nominal[i], ceiling[i] = peak_rates(spec, task_type, dt)
    peak, ach = nominal[codes], ceiling[codes]
    flops = k["flops"].to_numpy(dtype=float)
    nbytes = k["bytes"].to_numpy(dtype=float)
    dur = k["duration_ns"].to_numpy(dtype=float)
    if spec is not None:
        bw = spec.memory.effective_bandwidth
        aicpu = k["task_type"].isin(AICPU_TYPES).to_numpy()
        sched = np.where(aicpu, spec.aicpu.launch_overhead_ns, spec.dispatch.device_sched_ns)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_compute = np.where(aicpu, dur - sched, np.nan_to_num(flops / ach * 1e9))
            t_memory = np.where(aicpu, 0.0, nbytes / bw * 1e9)
        code = np.array([BOUNDS.index(c) for c in CLASSES], dtype=np.int8)
        bound_codes = np.where(
            np.maximum(t_compute, t_memory) < sched,
            code[2],
            np.where(t_compute >= t_memory, code[0], code[1]),
        )
    else:
        bound_codes = np.full(len(k), BOUNDS.index("unknown"), dtype=np.int8)
    bound = pd.Categorical.from_codes(bound_codes, categories=list(BOUNDS))
    return k.assign(peak=peak, ceiling=ach, bound=bound)


def density(data: RankData, n: int | None = 20) -> pd.DataFrame:
    """Per kernel (name, op type, engine, shapes, dtypes): FLOPs and bytes per call, intensity,
    achieved and peak TFLOP/s, utilisation and roofline class; by total time."""
    k = kernel_rates(data)
    data.cache["class_totals"] = _class_totals(k)
    data.cache["roofline"] = _roofline(data, k)
    if k.empty:
        return pd.DataFrame(columns=DENSITY_COLUMNS)
    keys = ["name", "op_type", "task_type", "input_shapes", "input_dtypes"]
    g = k.groupby(keys, sort=False, dropna=False, observed=True)
    out = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g["duration_ns"].sum(),
            "flops_sum": g["flops"].sum(),
            "bytes_sum": g["bytes"].sum(),
            "peak": g["peak"].first(),
            "ceiling": g["ceiling"].first(),
            "bound": g["bound"].first(),
        }
    ).reset_index()
    out = out.sort_values(["total_ns", *keys], ascending=[False] + [True] * len(keys))
    if n is not None:
        out = out.head(n)
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["flops"] = out["flops_sum"] / out["count"]
    out["bytes"] = out["bytes_sum"] / out["count"]
    out["intensity"] = out["flops_sum"] / out["bytes_sum"].where(out["bytes_sum"] > 0)
    bw = data.spec.memory.effective_bandwidth if data.spec is not None else float("nan")
    out["ridge_intensity"] = out["ceiling"] / bw
    out["achieved_tflops"] = out["flops_sum"] / out["total_ns"].where(out["total_ns"] > 0) / 1e3
    out["peak_tflops"] = out["peak"] / 1e12
    out["utilisation"] = out["achieved_tflops"] / out["peak_tflops"]
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out["bound"] = out["bound"].astype(str)
    out.insert(0, "rank", data.rank)
    return out[DENSITY_COLUMNS].reset_index(drop=True)


def roofline(data: RankData) -> pd.DataFrame:
    """Every analysed kernel with FLOPs and bytes as roofline points (:data:`ROOFLINE_COLUMNS`):
    one per (op type, engine, shapes, dtypes), binned when there are too many; ``unit`` is
    ``cube`` (AI Core and MIX kernels), ``vector``, ``ai_cpu`` or ``other``; ``groups`` is how
    many (op type, shapes, dtypes) groups a point holds (1 unless binned); ``flops`` and
    ``bytes`` are per call."""
    cached = data.cache.get("roofline")
    if cached is None:
        cached = data.cache["roofline"] = _roofline(data, kernel_rates(data))
    return cached


def _roofline(data: RankData, k: pd.DataFrame) -> pd.DataFrame:
    k = k[(k["flops"] > 0) & (k["bytes"] > 0)]
    if k.empty:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    keys = ["op_type", "task_type", "input_shapes", "input_dtypes"]
    g = k.groupby(keys, sort=False, observed=True)
    out = pd.DataFrame(
        {
            "groups": 1,
            "count": g.size(),
            "total_ns": g["duration_ns"].sum(),
            "flops_sum": g["flops"].sum(),
            "bytes_sum": g["bytes"].sum(),
            "bound": g["bound"].first().astype(str),
        }
    ).reset_index()
    out = out[out["count"] > 0]
    for c in ("op_type", "task_type", "input_shapes", "input_dtypes"):
        out[c] = out[c].astype(str)
    if len(out) > ROOFLINE_POINTS:
        out = _binned(out)
    out["flops"] = out["flops_sum"] / out["count"]
    out["bytes"] = out["bytes_sum"] / out["count"]
    out["intensity"] = out["flops_sum"] / out["bytes_sum"]
    out["achieved_tflops"] = out["flops_sum"] / out["total_ns"].where(out["total_ns"] > 0) / 1e3
    task = out["task_type"]
    out["unit"] = np.select(
        [task.isin(CUBE_TYPES), task.isin(VECTOR_TYPES), task.isin(AICPU_TYPES)],
        ["cube", "vector", "ai_cpu"],
        "other",
    )
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out.insert(0, "rank", data.rank)
    out = out.sort_values(["total_ns", *keys], ascending=[False] + [True] * len(keys))
    return out[ROOFLINE_COLUMNS].reset_index(drop=True)


def _binned(points: pd.DataFrame) -> pd.DataFrame:
    """Roofline points merged per op type and engine into half-octave bins of intensity and
    achieved rate (time-weighted: the bin's totals give its place)."""
    rate = points["flops_sum"] / points["total_ns"].where(points["total_ns"] > 0, 1)
    per = ROOFLINE_BINS_PER_OCTAVE
    p = points.assign(
        ibin=np.floor(np.log2(points["flops_sum"] / points["bytes_sum"]) * per).astype(int),
        abin=np.floor(np.log2(rate.clip(lower=1e-12)) * per).astype(int),
    )
    g = p.groupby(["op_type", "task_type", "ibin", "abin"], sort=False)
    out = g.agg(
        groups=("groups", "sum"),
        count=("count", "sum"),
        total_ns=("total_ns", "sum"),
        flops_sum=("flops_sum", "sum"),
        bytes_sum=("bytes_sum", "sum"),
        bound=("bound", "first"),
    ).reset_index()
    out["input_shapes"] = out["groups"].map(lambda n: f"({n} shapes)")
    out["input_dtypes"] = ""
    return out.drop(columns=["ibin", "abin"])


def by_class(data: RankData) -> pd.DataFrame:
    """Kernel count and time per roofline class."""
    g = data.cache.get("class_totals")
    if g is None:
        g = _class_totals(kernel_rates(data))
    out = pd.DataFrame(
        {
            "rank": data.rank,
            "bound": g.index.astype(str),
            "kernels": g["size"],
            "total_ns": g["sum"],
        }
    ).reset_index(drop=True)
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    return out.sort_values("total_ns", ascending=False)[CLASS_COLUMNS].reset_index(drop=True)


def _class_totals(k: pd.DataFrame) -> pd.DataFrame:
    """Kernels (``size``) and time (``sum``) per ``bound`` of :func:`kernel_rates`."""
    return k.groupby("bound", observed=True)["duration_ns"].agg(["size", "sum"])


def _busy_per_step(data: RankData, mask: np.ndarray) -> np.ndarray:
    """Union of the masked tasks' time inside each analysed step's device window."""
    tasks = data.all_tasks
    s = tasks["start_ns"].to_numpy()[mask]
    e = tasks["end_ns"].to_numpy()[mask]
    lo = data.steps["dev_start_ns"].to_numpy(dtype=np.int64)
    hi = data.steps["dev_end_ns"].to_numpy(dtype=np.int64)
    return intervals.Coverage(s, e).within(lo, hi)


@per_rank
def _occupancy_per_step(data: RankData, types: tuple[str, ...], cores: int) -> np.ndarray:
    tasks = data.tasks
    sel = tasks.loc[tasks["task_type"].isin(types), ["duration_ns", "block_dim", "step"]]
    weight = sel["duration_ns"] * sel["block_dim"].clip(lower=1, upper=cores) / cores
    per = weight.groupby(sel["step"]).sum()
    return per.reindex(data.steps["step"]).fillna(0).to_numpy()


def _rate(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``part / whole`` per step in [0, 1] (0 where the step has no time)."""
    return np.clip(np.nan_to_num(part / whole), 0.0, 1.0)


@per_rank
def utilisation(data: RankData) -> pd.DataFrame:
    """Device, cube and vector utilisation per analysed step."""
    tasks = data.all_tasks
    kind, tt = tasks["kind"], tasks["task_type"]  # compared as categoricals: no string per row
    kernel = (kind == KERNEL).to_numpy()
    step_ns = data.steps["duration_ns"].to_numpy(dtype=float)
    safe = np.where(step_ns > 0, step_ns, np.nan)
    busy = _busy_per_step(data, kind.isin((KERNEL, COLLECTIVE)).to_numpy())
    cube = _busy_per_step(data, kernel & tt.isin(CUBE_TYPES).to_numpy())
    vector = _busy_per_step(data, kernel & tt.isin(VECTOR_TYPES).to_numpy())
    aicpu = _busy_per_step(data, kernel & tt.isin(AICPU_TYPES).to_numpy())
    spec = data.spec
    cube_cores = spec.cube.cores if spec is not None else 1
    vector_cores = spec.vector.cores if spec is not None else 1
    out = pd.DataFrame(
        {
            "rank": data.rank,
            "step": data.steps["step"].to_numpy(),
            "step_ns": data.steps["duration_ns"].to_numpy(),
            "device_busy_ns": busy,
            "utilisation": _rate(busy, safe),
            "cube_busy_ns": cube,
            "cube_utilisation": _rate(cube, safe),
            "cube_occupancy": _rate(_occupancy_per_step(data, CUBE_TYPES, cube_cores), safe),
            "vector_busy_ns": vector,
            "vector_utilisation": _rate(vector, safe),
            "vector_occupancy": _rate(_occupancy_per_step(data, VECTOR_TYPES, vector_cores), safe),
            "aicpu_busy_ns": aicpu,
        }
    )
    return out[UTILISATION_COLUMNS]
