"""The terminal summary of ``msprof analyze``: headline numbers, tables and the findings."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from msprof_py.analyzers.api import Analysis
from msprof_py.analyzers.findings import FIRED, SKIPPED
from msprof_py.analyzers.schema import headline
from msprof_py.console import make_console
from msprof_py.safe_text import cell, terminal, visible

PRIORITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def step_list(steps: Any) -> str:
    """Step numbers for a header: all of them when few, else their count and range."""
    if not isinstance(steps, list | tuple):
        return "-" if steps is None else str(steps)
    if not steps:
        return "none"
    if len(steps) <= 12:
        return ", ".join(str(s) for s in steps)
    first, last = steps[0], steps[-1]
    contiguous = isinstance(first, int) and list(steps) == list(range(first, first + len(steps)))
    sep = "-" if contiguous else ", ..., "
    return f"{len(steps):,} steps: {first}{sep}{last}"


def numbers(values: list[int]) -> str:
    """``0``, ``0, 2`` or ``0-3`` (a contiguous run)."""
    values = sorted(values)
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ", ".join(str(v) for v in values)


def ranks_text(ranks: list[int]) -> str:
    """``1 rank (rank 0)``, ``2 ranks (ranks 0, 1)``, ``8 ranks (ranks 0-7)``."""
    if len(ranks) == 1:
        return f"1 rank (rank {ranks[0]})"
    return f"{len(ranks)} ranks (ranks {numbers(ranks)})"


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.0f}"


def _pct(x: float | None) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.1%}"


def _focus(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    return df[df["rank"] == rank] if len(df) and "rank" in df.columns else df


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for row in rows:  # profile strings (op types ...) are never read as markup
        table.add_row(*(cell(value) for value in row))
    return table


def render(a: Analysis, console: Console | None = None, top: int = 10) -> None:
    """Print the analysis: headline, step breakdown, top ops, cluster view, findings."""
    console = console or make_console()
    info = a.profile
    rank = info["focus_rank"]
    h = headline(a)
    warmup = info["warmup_skipped"]
    skipped = f", warm-up step(s) {step_list(warmup)} left out" if warmup else ""
    console.print(f"[bold]msprof analyze[/bold]: {terminal(info['path'])}")
    if info.get("partial"):
        console.print(
            "  [bold yellow]partial profile[/bold yellow]: the recorder never finished (the run "
            "was killed?); figures cover what was recorded up to its last complete chunk"
        )
    console.print(
        f"  {ranks_text(list(info['ranks']))} (details for rank {rank})   "
        f"device {terminal(info['device'])}   "
        f"steps {step_list(info['steps_analysed'])} from the {terminal(info['step_source'])}"
        f"{skipped}"
    )
    console.print(
        f"  mean step [bold]{h['mean_step_us']:,.1f} us[/bold] (median "
        f"{h['median_step_us']:,.1f} us)   device busy {_pct(h['utilisation'])} (cube "
        f"{_pct(h['cube_utilisation'])}, vector {_pct(h['vector_utilisation'])})   free "
        f"{_pct(h['free_share'])} (idle {_pct(h['idle_share'])})   copy ratio "
        f"{_pct(h['copy_ratio'])} (exposed {_pct(h['exposed_copy_share'])})"
    )
    for note in info.get("notes", []):
        console.print(f"  [yellow]note:[/yellow] {note}", highlight=False)
    if h["peak_reserved_bytes"] is not None:
        mem = next(m for m in a.memory["summary"] if m["rank"] == rank)
        cap = mem.get("capacity_bytes")
        share = f" ({_pct(mem['peak_share_of_capacity'])} of usable)" if cap else ""
        console.print(f"  peak memory reserved {h['peak_reserved_bytes'] / 2**20:,.1f} MiB{share}")
    _steps(a, console, rank)
    _top_ops(a, console, rank, top)
    _modules(a, console, rank, top)
    if len(info["ranks"]) > 1:
        _cluster(a, console)
    _findings(a, console)


def _steps(a: Analysis, console: Console, rank: int) -> None:
    steps = _focus(a.step_breakdown["steps"], rank)
    if steps.empty:
        return
    cols = [
        "step",
        "time",
        "compute",
        "comm",
        "comm exposed",
        "free",
        "idle dispatch",
        "idle sync",
        "idle other",
        "copies",
    ]
    rows = [
        [
            str(r.step),
            _us(r.step_ns),
            _us(r.computing_ns),
            _us(r.communication_ns),
            _us(r.comm_not_overlapped_ns),
            _us(r.free_ns),
            _us(r.idle_dispatch_ns),
            _us(r.idle_sync_ns),
            _us(r.idle_data_loading_ns + r.idle_other_ns),
            _us(r.idle_copy_ns),
        ]
        for r in steps.itertuples()
    ]
    console.print(_table(f"step breakdown (us, rank {rank})", cols, rows))


def _top_ops(a: Analysis, console: Console, rank: int, top: int) -> None:
    ops = _focus(a.top_ops["by_type"], rank).head(top)
    if ops.empty:
        return
    wide = console.width >= 120
    cols = [
        "op type",
        "engine",
        "count",
        "total (us)",
        "mean",
        *(["min", "max"] if wide else []),
        "of step",
    ]
    rows = []
    for r in ops.itertuples():
        spread = [f"{r.min_ns / 1e3:.2f}", f"{r.max_ns / 1e3:.2f}"] if wide else []
        rows.append(
            [
                r.op_type,
                r.task_type,
                str(r.count),
                f"{r.total_ns / 1e3:,.1f}",
                f"{r.mean_ns / 1e3:.2f}",
                *spread,
                _pct(r.share_of_step),
            ]
        )
    console.print(_table(f"top ops by device time (rank {rank})", cols, rows))


#: modules shown in the terminal: at least this share of the device time ...
MODULE_MIN_SHARE = 0.01


def _modules(a: Analysis, console: Console, rank: int, top: int) -> None:
    """The module tree (modules with at least 1% of the device time, depth first, at most
    ``3 * top`` rows): self and total device time per step, forward / backward."""
    tree = _focus(a.modules.get("tree", pd.DataFrame()), rank)
    if tree.empty or len(tree) < 2:
        return  # no module ran (or only the top one): nothing a tree would add
    shown = tree[tree["share_of_device"] >= MODULE_MIN_SHARE].head(3 * top)
    cols = [
        "module",
        "class",
        "self fwd",
        "self bwd",
        "self other",
        "total fwd",
        "total bwd",
        "total",
        "share",
    ]
    rows = [
        [
            "  " * int(r.depth) + (r.module.rsplit(".", 1)[-1] if r.module else r.name),
            r.class_name,
            _us(r.self_forward_ns),
            _us(r.self_backward_ns),
            _us(r.self_other_ns),
            _us(r.total_forward_ns),
            _us(r.total_backward_ns),
            _us(r.total_ns),
            _pct(r.share_of_device),
        ]
        for r in shown.itertuples()
    ]
    console.print(_table(f"modules by device time (us per step, rank {rank})", cols, rows))
    left = len(tree) - len(shown)
    if left:
        console.print(
            f"  {left} more module(s) under {MODULE_MIN_SHARE:.0%} of the device time or past "
            "the first rows: --json, --csv and the HTML report list every one",
            style="dim",
            highlight=False,
        )


def _cluster(a: Analysis, console: Console) -> None:
    ranks = a.communication["ranks"]
    rows = [
        [
            str(r.rank),
            _us(r.mean_step_ns),
            _us(r.computing_ns),
            _us(r.communication_ns),
            _us(r.comm_not_overlapped_ns),
            _us(r.idle_ns),
            f"{r.deviation:+.1%}",
        ]
        for r in ranks.itertuples()
    ]
    cols = ["rank", "step (us)", "computing", "comm", "not ovl.", "idle", "vs mean"]
    console.print(_table("ranks (per step)", cols, rows))


def joint_text(h: dict) -> str:
    """The headline's re-costed combined gain as a clause (empty when there is none): its
    figure, the findings it includes and that the rest is only in the bound."""
    if h.get("joint_gain_us") is None:
        return ""
    rules = ", ".join(h["joint_gain_rules"])
    rest = (
        f"; {', '.join(h['joint_gain_not_included'])} only in the bound"
        if h["joint_gain_not_included"]
        else ""
    )
    return (
        f"; re-costed together {h['joint_gain_us']:,.1f} us/step for {rules} (replayed at "
        f"once; their single gains add up to {h['joint_gain_sum_us']:,.1f}{rest})"
    )


def _findings(a: Analysis, console: Console) -> None:
    fired = [f for f in a.findings if f.status == FIRED]
    h = headline(a)
    combined = (
        f"; together at most {h['estimated_gain_us']:,.1f} us/step (the gains overlap: "
        "bounded by the step's parts, not summed)" + joint_text(h)
        if len([f for f in fired if f.estimated_gain_us]) > 1
        else ""
    )
    console.print(
        f"[bold]findings[/bold] ({len(fired)} of {len(a.findings)} rules fired{combined})",
        highlight=False,
    )
    for i, f in enumerate(fired, 1):
        style = PRIORITY_STYLE.get(f.priority or "", "")
        gain = (
            f"estimated gain {f.estimated_gain_us:,.1f} us/step ({f.gain_model})"
            if f.estimated_gain_us is not None
            else "no time estimate"
        )
        priority = terminal((f.priority or "").upper())
        console.print(f" {i}. [{style}]{priority}[/{style}] [bold]{terminal(f.title)}[/bold]")
        # messages and advice quote op types and module paths: printed without markup
        plain = {"markup": False, "highlight": False}
        console.print(f"    {visible(f.message)}", **plain)
        console.print(f"    -> {visible(f.advice)}", **plain)
        console.print(f"    {gain}", style="dim", **plain)
    ok = [visible(f.rule) for f in a.findings if f.status == "ok"]
    if ok:
        console.print(f" ok: {', '.join(ok)}", style="dim", markup=False)
    for f in a.findings:
        if f.status == SKIPPED:
            console.print(f" {visible(f.rule)}: {visible(f.message)}", style="dim", markup=False)
