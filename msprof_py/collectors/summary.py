"""The terminal summary printed at the end of an ``msprof`` run (from its analysis)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from msprof_py.analyzers import Analysis
from msprof_py.analyzers.schema import headline
from msprof_py.safe_text import cell, terminal


def print_run_summary(
    folder: Path | None,
    rank_dirs: list[Path],
    exit_code: int,
    analysis: Analysis | None = None,
    report: Path | None = None,
    console: Console | None = None,
) -> None:
    """Where the profile is and its headline numbers (the same as ``msprof analyze``'s)."""
    console = console or Console(stderr=True)
    if folder is None or not rank_dirs:
        if exit_code > 128:
            console.print(
                f"msprof: the application was ended by signal {exit_code - 128} before "
                "anything was recorded"
            )
        else:
            console.print(
                f"msprof: the application exited with code {exit_code}; no device "
                "activity was recorded (did it use the npu device?)"
            )
        return
    where = terminal(folder)
    console.print(f"[bold]msprof[/bold]: profile written to {where}")
    console.print(
        f"  per rank: *_ascend_pt/ (msprof-analyze reads it); timeline: {where}/trace.json"
    )
    if report is not None:
        console.print(f"  report: {terminal(report)}")
    if analysis is None:
        console.print(f"  exit code {exit_code} (no analysis: see the message above)")
        return
    info = analysis.profile
    h = headline(analysis)
    status = terminal(info["status"])
    console.print(f"  ranks {len(info['ranks'])}   status {status}   exit code {exit_code}")
    console.print(
        f"  steps {h['steps']}   mean step {h['mean_step_us'] / 1e3:.3f} ms (median "
        f"{h['median_step_us'] / 1e3:.3f} ms)   device utilisation {h['utilisation']:.1%}   "
        f"copy ratio {h['copy_ratio']:.1%}   findings {h['findings_fired']} (msprof analyze "
        f"{where})"
    )
    for note in info.get("notes", []):
        console.print(f"  note: {note}", highlight=False)
    ops = analysis.top_ops["by_type"]
    ops = ops[ops["rank"] == h["rank"]] if "rank" in ops.columns else ops
    if ops.empty:
        return
    table = Table(title=f"top ops by device time (rank {h['rank']})")
    for column in ("op type", "engine", "count", "total (us)", "mean (us)", "of step"):
        table.add_column(column, justify="left" if column in ("op type", "engine") else "right")
    for row in ops.head(10).itertuples():
        table.add_row(
            cell(row.op_type),
            cell(row.task_type),
            str(row.count),
            f"{row.total_ns / 1e3:.1f}",
            f"{row.mean_ns / 1e3:.2f}",
            f"{row.share_of_step:.1%}",
        )
    console.print(table)
