"""The headline numbers of a run: step time, top ops, copy ratio, device utilisation."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from msprof_py.analyzers import intervals
from msprof_py.profile import Profile

COMPUTE_KINDS = ("kernel", "collective")


@dataclass(frozen=True)
class RunSummary:
    """What the terminal prints at the end of a run (times in ns)."""

    ranks: int
    steps: int
    mean_step_ns: float
    device_busy_ns: int
    span_ns: int
    copy_ns: int
    tasks: int
    top_ops: pd.DataFrame

    @property
    def utilization(self) -> float:
        """Device busy time (any compute task running) over the recorded span."""
        return self.device_busy_ns / self.span_ns if self.span_ns else 0.0

    @property
    def copy_ratio(self) -> float:
        """Copy time (host<->device and device copies) over the recorded span."""
        return self.copy_ns / self.span_ns if self.span_ns else 0.0


def training_steps(profile: Profile) -> pd.DataFrame:
    """Steps ended by the script (not the partial step closed at the end of the run)."""
    steps = profile.steps
    return steps[steps["source"] != "end of run"]


def top_ops(tasks: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """Op types by total device time: count, total and mean (ns), share, engine."""
    kernels = tasks[tasks["kind"].isin(COMPUTE_KINDS)]
    if kernels.empty:
        return pd.DataFrame(
            columns=["op_type", "task_type", "count", "total_ns", "mean_ns", "share"]
        )
    duration = kernels["end_ns"] - kernels["start_ns"]
    grouped = (
        kernels.assign(duration=duration)
        .groupby(["op_type", "task_type"], as_index=False)
        .agg(count=("duration", "size"), total_ns=("duration", "sum"))
    )
    grouped["mean_ns"] = grouped["total_ns"] / grouped["count"]
    grouped["share"] = grouped["total_ns"] / grouped["total_ns"].sum()
    return (
        grouped.sort_values("total_ns", ascending=False, kind="stable")
        .head(n)
        .reset_index(drop=True)
    )


def summarize(profile: Profile, rank: int | None = None) -> RunSummary:
    """Headline numbers of one rank (the first by default)."""
    rank = profile.ranks[0] if rank is None else rank
    one = profile.for_rank(rank)
    tasks = one.tasks
    steps = training_steps(one)
    mean_step = float((steps["end_ns"] - steps["start_ns"]).mean()) if len(steps) else 0.0
    busy = tasks[tasks["end_ns"] > tasks["start_ns"]]
    span = int(busy["end_ns"].max() - busy["start_ns"].min()) if len(busy) else 0
    compute = busy[busy["kind"].isin(COMPUTE_KINDS)]
    copies = busy[busy["kind"] == "memcpy"]
    return RunSummary(
        ranks=len(profile.ranks),
        steps=len(steps),
        mean_step_ns=mean_step,
        device_busy_ns=intervals.total(
            compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy()
        ),
        span_ns=span,
        copy_ns=intervals.total(copies["start_ns"].to_numpy(), copies["end_ns"].to_numpy()),
        tasks=len(tasks),
        top_ops=top_ops(tasks),
    )
