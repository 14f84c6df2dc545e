"""The terminal summary printed at the end of an ``msprof`` run (from its analysis).

Plain words for people and CI logs alike: statuses as words, ``1 rank (rank 0)``, the top
findings with their estimated gain, one line each. In a pipe or a CI log (not a terminal)
no line is wrapped mid-way.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from rich.console import Console
from rich.table import Table

from msprof_py.analyzers import Analysis
from msprof_py.analyzers.render import numbers, ranks_text
from msprof_py.analyzers.schema import headline
from msprof_py.console import make_console
from msprof_py.profile.meta import UNFINISHED
from msprof_py.safe_text import cell, terminal, visible

#: findings listed in the summary (``msprof analyze`` lists all)
TOP_FINDINGS = 5
#: a finding's message is cut to this many characters (one line)
FINDING_WIDTH = 100


def summary_console() -> Console:
    """Stderr; when it is no terminal, wide enough that no line wraps."""
    return make_console(stderr=True)


def status_text(status: dict[int, str | None]) -> str:
    """The runs' statuses as words: ``completed``; ``partial: killed``; per rank when they
    differ (``rank 0 completed, rank 1 partial: killed``)."""

    def word(s: str | None) -> str:
        return "partial: killed" if s in UNFINISHED else str(s or "unknown")

    words = {r: word(s) for r, s in status.items()}
    if len(set(words.values())) <= 1:
        return next(iter(words.values()), "unknown")
    return ", ".join(f"rank {r} {w}" for r, w in sorted(words.items()))


def warmup_text(steps: list[int]) -> str:
    """``step 0 left out as warm-up`` / ``steps 0, 1 left out as warm-up``."""
    if len(steps) == 1:
        return f"step {steps[0]} left out as warm-up"
    return f"steps {numbers(steps)} left out as warm-up"


def finding_line(finding: object, mean_step_us: float) -> str:
    """``rule: message (one line)  est. gain 12.3 us/step (4.1%)``."""
    message = textwrap.shorten(
        " ".join(str(getattr(finding, "message", "")).split()),
        FINDING_WIDTH,
        placeholder=" ...",
    )
    gain = getattr(finding, "estimated_gain_us", None)
    gain_text = ""
    if gain:
        share = f" ({gain / mean_step_us:.1%} of a step)" if mean_step_us else ""
        gain_text = f"   est. gain {gain:,.1f} us/step{share}"
    return f"{visible(getattr(finding, 'rule', '?'))}: {visible(message)}{gain_text}"


def print_run_summary(
    folder: Path | None,
    rank_dirs: list[Path],
    exit_code: int,
    analysis: Analysis | None = None,
    report: Path | None = None,
    console: Console | None = None,
    *,
    trace: Path | None = None,
    ascend: bool = True,
    statuses: dict[int, str] | None = None,
) -> None:
    """Where the profile is and its headline numbers (the same as ``msprof analyze``'s).

    ``statuses``: each rank's status, for a run whose analysis failed (else the analysis has
    them)."""
    console = console or summary_console()

    def say(text: str) -> None:
        console.print(text, soft_wrap=True, highlight=False)

    if folder is None or not rank_dirs:
        if exit_code > 128:
            say(
                f"msprof: the application was ended by signal {exit_code - 128} before "
                "anything was recorded"
            )
        else:
            say(
                f"msprof: the application exited with code {exit_code}; no device "
                "activity was recorded (did it use the npu device?)"
            )
        return
    where = terminal(folder)
    say(f"[bold]msprof[/bold]: profile written to {where}")
    outputs = []
    if ascend:
        outputs.append("per rank: *_ascend_pt/ (msprof-analyze reads it)")
    if trace is not None:
        outputs.append(f"timeline: {terminal(trace)}")
    if report is not None:
        outputs.append(f"report: {terminal(report)}")
    if outputs:
        say("  " + "; ".join(outputs))
    status = dict(analysis.profile.get("status") or {}) if analysis else dict(statuses or {})
    if status:
        say(
            f"  {ranks_text(sorted(status))}   {terminal(status_text(status))}   "
            f"exit code {exit_code}"
        )
    if any(s in UNFINISHED for s in status.values()):
        say("  the recorder never finished: the profile holds what was written up to then")
    if analysis is None:
        say(f"  exit code {exit_code}: no analysis (see the message above)")
        return
    info = analysis.profile
    if not info.get("tasks"):
        say(
            "  the application never used the npu device: no device work was recorded "
            '(move the model and its inputs with .to("npu"))'
        )
        return
    h = headline(analysis)
    warmup = list(info.get("warmup_skipped") or [])
    analysed = f"{h['steps']} step{'s' if h['steps'] != 1 else ''} analysed"
    if warmup:
        analysed += f" ({warmup_text(warmup)})"
    say(
        f"  {analysed}   mean step {h['mean_step_us'] / 1e3:,.3f} ms (median "
        f"{h['median_step_us'] / 1e3:,.3f} ms)   device utilisation {h['utilisation']:.1%}   "
        f"copy ratio {h['copy_ratio']:.1%}"
    )
    for note in info.get("notes", []):
        say(f"  note: {terminal(note)}")
    fired = analysis.fired()
    if fired:
        more = f", the top {TOP_FINDINGS}" if len(fired) > TOP_FINDINGS else ""
        say(f"  findings: {len(fired)} fired{more} (details: msprof analyze {where})")
        for f in fired[:TOP_FINDINGS]:
            console.print(
                "    " + finding_line(f, h["mean_step_us"]),
                soft_wrap=True,
                markup=False,
                highlight=False,
            )
    else:
        say("  findings: none fired")
    ops = analysis.top_ops["by_type"]
    ops = ops[ops["rank"] == h["rank"]] if "rank" in ops.columns else ops
    if ops.empty:
        return
    table = Table(title=f"top ops by device time (rank {h['rank']})")
    for column in ("op type", "engine", "count", "total (us)", "mean (us)", "of step"):
        table.add_column(
            column,
            justify="left" if column in ("op type", "engine") else "right",
            no_wrap=column not in ("op type",),
        )
    for row in ops.head(10).itertuples():
        table.add_row(
            cell(row.op_type),
            cell(row.task_type),
            f"{row.count:,}",
            f"{row.total_ns / 1e3:,.1f}",
            f"{row.mean_ns / 1e3:,.2f}",
            f"{row.share_of_step:.1%}",
        )
    console.print(table)
