"""The figures a performance gate checks, read from one rank of an :class:`Analysis`.

Every figure is per analysed step (warm-up steps left out, as ``msprof analyze`` does) so that
a run with more steps is comparable with a shorter one. With ``--host-time modeled`` every
figure is a function of the program alone: the same program gives the same figures on any
machine, which is what lets a gate be exact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from msprof_py.analyzers.api import Analysis

#: task types that are kernels (one launch each); DMA copies, HCCL and events are not
KERNEL_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")
MIB = 1024 * 1024


@dataclass(frozen=True)
class GateFigures:
    """One rank's gate figures (times in milliseconds per analysed step unless named)."""

    rank: int
    steps: int
    step_time_ms: float
    device_time_ms: float
    utilization: float
    copy_ratio: float
    copy_bytes_per_step: float
    exposed_copy_ms: float
    communication_ms: float
    communication_not_overlapped_ms: float
    peak_memory_mb: float
    peak_allocated_mb: float
    launches_per_step: float
    syncs_per_step: float
    sync_time_ms: float
    op_type_time_ms: dict[str, float] = field(default_factory=dict)
    op_type_count_per_step: dict[str, float] = field(default_factory=dict)
    host_time: str = "modeled"
    #: the importer that read the profile (``kineto``, ``ascend_pt`` ...), "" when msprof-py
    #: recorded it: an imported profile's times were measured on the run
    source_format: str = ""
    device: str = ""
    #: the command the profile recorded (``python train.py --lr 0.1``)
    command: str = ""

    @property
    def imported(self) -> bool:
        """Whether msprof-py did not record the profile (an importer read it)."""
        return bool(self.source_format)

    @property
    def deterministic(self) -> bool:
        """Whether the figures are exact (host time modelled, not measured; an imported
        profile's times are always measured)."""
        return self.host_time == "modeled" and not self.imported

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict."""
        return asdict(self)


def _mine(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    return df[df["rank"] == rank] if "rank" in df.columns and len(df) else df


def _of_rank(items: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    return next((item for item in items if item.get("rank") == rank), {})


def figures(analysis: Analysis, rank: int | None = None) -> GateFigures:
    """The gate figures of ``rank`` (default: the analysis' focus rank).

    The analysis must hold the tables of that rank (``analyze(path)`` keeps all ranks).
    """
    rank = analysis.profile["focus_rank"] if rank is None else rank
    steps = _mine(analysis.step_breakdown["steps"], rank)
    n_steps = max(1, len(steps))
    step_ns = float(steps["step_ns"].sum()) if len(steps) else 0.0
    stat = _mine(analysis.op_statistic, rank)
    per_type = stat.groupby("op_type", sort=True, observed=True).agg(
        total_ns=("total_ns", "sum"), count=("count", "sum")
    )
    kernels = stat[stat["core_type"].isin(KERNEL_TASK_TYPES)]
    copy = _of_rank(analysis.copy["summary"], rank)
    comm = _of_rank(analysis.communication["summary"], rank)
    mem = _of_rank(analysis.memory["summary"], rank)
    sync = _mine(analysis.sync["summary"], rank)
    meta_host_time = analysis.profile.get("host_time") or "modeled"

    def ms(ns: float) -> float:
        return float(ns) / 1e6 / n_steps

    return GateFigures(
        rank=int(rank),
        steps=len(steps),
        step_time_ms=step_ns / 1e6 / n_steps,
        device_time_ms=ms(steps["device_busy_ns"].sum()) if len(steps) else 0.0,
        utilization=float(steps["device_busy_ns"].sum()) / step_ns if step_ns else 0.0,
        copy_ratio=float(copy.get("copy_ratio", 0.0)),
        copy_bytes_per_step=float(copy.get("bytes", 0)) / n_steps,
        exposed_copy_ms=ms(copy.get("exposed_ns", 0)),
        communication_ms=ms(comm.get("communication_ns", 0)),
        communication_not_overlapped_ms=ms(comm.get("not_overlapped_ns", 0)),
        peak_memory_mb=float(mem.get("peak_reserved") or 0) / MIB,
        peak_allocated_mb=float(mem.get("peak_allocated") or 0) / MIB,
        launches_per_step=float(kernels["count"].sum()) / n_steps,
        syncs_per_step=float(sync["count"].sum()) / n_steps if len(sync) else 0.0,
        sync_time_ms=ms(sync["total_ns"].sum()) if len(sync) else 0.0,
        op_type_time_ms={str(k): ms(v) for k, v in per_type["total_ns"].items()},
        op_type_count_per_step={str(k): float(v) / n_steps for k, v in per_type["count"].items()},
        host_time="measured" if analysis.profile.get("source_format") else str(meta_host_time),
        source_format=str(analysis.profile.get("source_format") or ""),
        device=str(analysis.profile.get("device") or ""),
        command=str(analysis.profile.get("command") or ""),
    )


def all_ranks(analysis: Analysis) -> dict[int, GateFigures]:
    """The gate figures of every rank the analysis holds."""
    return {int(r): figures(analysis, int(r)) for r in analysis.profile["ranks"]}
