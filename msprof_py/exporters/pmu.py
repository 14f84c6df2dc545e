"""Pipe-level PMU columns of op_summary / kernel_details (``PipeUtilization``), as modelled.

The simulated device has no performance counters; what it knows is how the cost model timed
each kernel (``tasks.cube_ns / vector_ns / memory_ns``: the cube's MAC time, the vector units'
time and the HBM traffic time, each as if it ran alone; the duration is the scheduling
overhead plus the largest). The columns the Ascend tools read are derived from that:

* ``aicore_time(us)`` is the task's duration for tasks on the cube cores (AI_CORE, MIX_AIC),
  0 for vector-only tasks; ``aiv_time(us)`` is the duration for tasks with vector work
  (AI_VECTOR_CORE, MIX_AIC, a cube kernel with a fused vector epilogue), else 0.
* ``aic_mac_time`` is the cube time, ``aiv_vec_time`` the vector time.
* The HBM term is split between loads and stores by the bytes the task's outputs take
  (outputs' shapes x dtype sizes over the task's bytes): loads are ``aic_mte2`` / ``aiv_mte2``
  (GM -> L1 / UB), stores ``aic_fixpipe`` (L0C -> GM) / ``aiv_mte3`` (UB -> GM).
* ``*_scalar_time`` is the rest of the duration (the scheduling overhead the roofline adds).
* ``*_ratio`` is a pipe's time over its core's time; ``*_total_cycles`` the core time x the
  unit's clock x the cores the task occupies; ``cube_utilization(%)`` is the MAC ratio x the
  share of cube cores the task occupies.

Not modelled, so left out rather than faked: ``aic_mte1`` (L1 -> L0 moves, folded into the
cube's efficiency) and the instruction-cache miss rates. Rows that are not AI Core / vector
kernels (AI CPU, collectives) and kernels of profiles recorded before the pipe times were
kept (all three 0) read ``N/A``, as CANN writes for tasks without PMU data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import DeviceSpec
from msprof_py.analyzers.shapes import tensor_bytes

#: A2 ``PipeUtilization`` labels in CANN's order, less the ones not modelled (module doc).
PMU_HEADER = [
    "aicore_time(us)",
    "aic_total_cycles",
    "aic_mac_time(us)",
    "aic_mac_ratio",
    "aic_scalar_time(us)",
    "aic_scalar_ratio",
    "aic_mte2_time(us)",
    "aic_mte2_ratio",
    "aic_fixpipe_time(us)",
    "aic_fixpipe_ratio",
    "aiv_time(us)",
    "aiv_total_cycles",
    "aiv_vec_time(us)",
    "aiv_vec_ratio",
    "aiv_scalar_time(us)",
    "aiv_scalar_ratio",
    "aiv_mte2_time(us)",
    "aiv_mte2_ratio",
    "aiv_mte3_time(us)",
    "aiv_mte3_ratio",
    "cube_utilization(%)",
]
_CUBE_TYPES = ("AI_CORE", "MIX_AIC")
_VECTOR_TYPES = ("AI_VECTOR_CORE",)
NA = "N/A"


def _store_share(tasks: pd.DataFrame) -> np.ndarray:
    """Share of each task's HBM bytes that its outputs take (0..1)."""
    keys = tasks["output_shapes"].fillna("") + "|" + tasks["output_dtypes"].fillna("")
    sizes = {k: tensor_bytes(*k.split("|", 1)) for k in pd.unique(keys)}
    out = keys.map(sizes).to_numpy(dtype=np.float64)
    total = tasks["bytes"].to_numpy(dtype=np.float64)
    share = np.divide(out, total, out=np.zeros_like(out), where=total > 0)
    return np.clip(share, 0.0, 1.0)


def pmu_columns(tasks: pd.DataFrame, spec: DeviceSpec | None) -> pd.DataFrame:
    """The :data:`PMU_HEADER` columns of ``tasks`` (op_summary rows, same index order);
    ``spec`` gives the clocks and core counts (cycles and utilisation read N/A without it)."""
    n = len(tasks)
    kind = tasks["kind"].to_numpy(dtype=object)
    ttype = tasks["task_type"].to_numpy(dtype=object)
    dur = tasks["dur_ns"].to_numpy(dtype=np.float64)
    cube = _column(tasks, "cube_ns")
    vec = _column(tasks, "vector_ns")
    mem = _column(tasks, "memory_ns")
    block = tasks["block_dim"].to_numpy(dtype=np.float64)
    on_cube = np.isin(ttype, _CUBE_TYPES)
    on_vec_only = np.isin(ttype, _VECTOR_TYPES)
    modelled = (kind == "kernel") & (on_cube | on_vec_only) & ((cube + vec + mem) > 0)
    store = mem * _store_share(tasks)
    load = mem - store
    scalar = np.clip(dur - np.maximum(np.maximum(cube, vec), mem), 0.0, None)
    aic_time = np.where(on_cube, dur, 0.0)
    aiv_used = on_vec_only | (ttype == "MIX_AIC") | (on_cube & (vec > 0))
    aiv_time = np.where(aiv_used, dur, 0.0)
    cols: dict[str, np.ndarray] = {
        "aicore_time(us)": aic_time,
        "aic_mac_time(us)": np.where(on_cube, cube, 0.0),
        "aic_scalar_time(us)": np.where(on_cube, scalar, 0.0),
        "aic_mte2_time(us)": np.where(on_cube, load, 0.0),
        "aic_fixpipe_time(us)": np.where(on_cube, store, 0.0),
        "aiv_time(us)": aiv_time,
        "aiv_vec_time(us)": np.where(aiv_used, vec, 0.0),
        "aiv_scalar_time(us)": np.where(on_vec_only, scalar, 0.0),
        "aiv_mte2_time(us)": np.where(on_vec_only, load, 0.0),
        "aiv_mte3_time(us)": np.where(on_vec_only, store, 0.0),
    }
    out: dict[str, np.ndarray] = {}
    for name, value in cols.items():
        out[name] = np.round(value / 1000.0, 3)
        prefix, _, pipe = name.partition("_")
        if pipe.endswith("_time(us)") and name not in ("aicore_time(us)", "aiv_time(us)"):
            base = aic_time if prefix == "aic" else aiv_time
            ratio = np.divide(value, base, out=np.zeros(n), where=base > 0)
            out[f"{prefix}_{pipe.removesuffix('_time(us)')}_ratio"] = np.round(ratio, 3)
    if spec is not None:
        cube_cores = np.minimum(block, spec.cube.cores)
        vec_cores = np.minimum(np.where(ttype == "MIX_AIC", 2 * block, block), spec.vector.cores)
        out["aic_total_cycles"] = np.round(aic_time / 1e9 * spec.cube.clock_hz * cube_cores)
        out["aiv_total_cycles"] = np.round(aiv_time / 1e9 * spec.vector.clock_hz * vec_cores)
        mac_ratio = out["aic_mac_ratio"]
        out["cube_utilization(%)"] = np.round(100.0 * mac_ratio * cube_cores / spec.cube.cores, 3)
    frame = pd.DataFrame(index=tasks.index)
    for name in PMU_HEADER:
        value = out.get(name)
        if value is None:
            frame[name] = NA
            continue
        if name.endswith("total_cycles"):
            value = value.astype(np.int64)
        frame[name] = pd.Series(value, index=tasks.index).astype(object).where(modelled, NA)
    return frame


def _column(tasks: pd.DataFrame, name: str) -> np.ndarray:
    """A pipe-time column as float ns (0 where the profile predates it)."""
    if name not in tasks:
        return np.zeros(len(tasks))
    return tasks[name].to_numpy(dtype=np.float64)
