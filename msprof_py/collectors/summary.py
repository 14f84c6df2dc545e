"""The terminal summary printed at the end of an ``msprof`` run."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from msprof_py.analyzers.summary import summarize
from msprof_py.profile import load


def print_run_summary(
    folder: Path | None,
    rank_dirs: list[Path],
    exit_code: int,
    report: Path | None = None,
    console: Console | None = None,
) -> None:
    """Where the profile is and its headline numbers."""
    console = console or Console(stderr=True)
    if folder is None or not rank_dirs:
        console.print(
            f"msprof: the application exited with code {exit_code}; no device "
            "activity was recorded (did it use the npu device?)"
        )
        return
    profile = load(folder)
    statuses = {r: profile.meta[r].get("status", "?") for r in profile.ranks}
    s = summarize(profile)
    console.print(f"[bold]msprof[/bold]: profile written to {folder}")
    console.print(
        f"  per rank: *_ascend_pt/ (msprof-analyze reads it); timeline: {folder}/trace.json"
    )
    if report is not None:
        console.print(f"  report: {report}")
    console.print(f"  ranks {len(profile.ranks)}   status {statuses}   exit code {exit_code}")
    console.print(
        f"  steps {s.steps}   mean step {s.mean_step_ns / 1e6:.3f} ms   device utilisation "
        f"{s.utilization:.1%}   copy ratio {s.copy_ratio:.1%}   tasks {s.tasks}"
    )
    if not s.top_ops.empty:
        table = Table(title=f"top ops by device time (rank {profile.ranks[0]})")
        for column in ("op type", "engine", "count", "total (us)", "mean (us)", "share"):
            table.add_column(column, justify="left" if column in ("op type", "engine") else "right")
        for row in s.top_ops.itertuples():
            table.add_row(
                row.op_type,
                row.task_type,
                str(row.count),
                f"{row.total_ns / 1e3:.1f}",
                f"{row.mean_ns / 1e3:.2f}",
                f"{row.share:.1%}",
            )
        console.print(table)
