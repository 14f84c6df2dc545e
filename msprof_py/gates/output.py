"""How gate results and diffs are shown: rich tables, Markdown (CI job summaries, at most
1 MiB) and JUnit XML (one test case per checked metric)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

from msprof_py.gates.check import Check
from msprof_py.gates.diff import SAME, Diff
from msprof_py.gates.gate import GateResult
from msprof_py.gates.numbers import with_unit
from msprof_py.safe_text import cell, markdown_code, markdown_text, visible, xml_text
from msprof_py.units import human_bytes

#: GitHub's limit for one step's job summary
MARKDOWN_LIMIT = 1024 * 1024


def value_text(value: float | None, unit: str = "") -> str:
    """``1.979 ms``; ratios and counts without a unit; ``-`` for None."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return with_unit(value, unit)


def limit_text(check: Check) -> str:
    """``<= 12.5 ms`` (a ceiling) or ``>= 0.6`` (a floor)."""
    return f"{'<=' if check.ceiling else '>='} {value_text(check.limit, check.unit)}"


def metric_name(check: Check, multi_rank: bool) -> str:
    return f"{check.metric} (rank {check.rank})" if multi_rank else check.metric


def summary_line(result: GateResult) -> str:
    """One line: how many checks passed, and which failed with their values."""
    total = len(result.checks)
    failures = result.failures
    if not failures:
        return f"msprof gate: PASS: all {total} checks within budget"
    shown = "; ".join(_describe(c, result.multi_rank) for c in failures[:5]) + (
        "; ..." if len(failures) > 5 else ""
    )
    return f"msprof gate: FAIL: {len(failures)} of {total} checks over budget: {shown}"


def _describe(check: Check, multi_rank: bool) -> str:
    text = check.describe()
    return f"{text} [rank {check.rank}]" if multi_rank else text


# ---- terminal ------------------------------------------------------------------------------


def _console() -> Any:
    """A console for the tables: the terminal's width; in a pipe or CI log wide enough that
    nothing wraps (where rich would assume 80 and squeeze the columns)."""
    from msprof_py.console import make_console

    return make_console()


def render_gate(result: GateResult, console: Any = None) -> None:
    """The table of every checked metric on the terminal, then the summary line."""
    from rich.table import Table

    console = console or _console()
    relative = any(c.baseline is not None for c in result.checks)
    title = f"msprof gate: {result.path}"
    if result.baseline_path:
        title += f" (baseline {result.baseline_path})"
    table = Table(title=cell(title), title_justify="left")
    table.add_column("metric", no_wrap=True, overflow="fold")
    if result.multi_rank:
        table.add_column("rank", justify="right")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("limit", justify="right", no_wrap=True)
    if relative:
        table.add_column("baseline", justify="right", no_wrap=True)
        table.add_column("change", overflow="fold")
    table.add_column("verdict", no_wrap=True)
    for c in result.checks:
        row: list[Any] = [cell(c.metric)]  # metric names quote op types: never markup
        if result.multi_rank:
            row.append(str(c.rank))
        row += [value_text(c.value, c.unit), limit_text(c)]
        if relative:
            row += [value_text(c.baseline, c.unit), cell(_change(c))]
        row.append("[green]pass[/]" if c.passed else "[bold red]FAIL[/]")
        table.add_row(*row)
    console.print(table)
    console.print(visible(summary_line(result)), markup=False, highlight=False, soft_wrap=True)


def _change(check: Check) -> str:
    if check.baseline is None:
        return ""
    return check.note.split(" vs baseline", 1)[0] if check.baseline else "from 0"


# ---- Markdown --------------------------------------------------------------------------------


def gate_markdown(result: GateResult, limit: int = MARKDOWN_LIMIT) -> str:
    """A Markdown summary (for ``$GITHUB_STEP_SUMMARY``): verdict, warnings and a table of
    every check, failures first; at most ``limit`` bytes (UTF-8), rows left out beyond it
    are counted in a note."""
    failures = result.failures
    verdict = (
        f"FAIL: {len(failures)} of {len(result.checks)} checks over budget"
        if failures
        else f"PASS: all {len(result.checks)} checks within budget"
    )
    head = [f"## msprof gate: {verdict}", "", f"Profile: {markdown_code(result.path)}"]
    if result.baseline_path:
        head[-1] += f"; baseline: {markdown_code(result.baseline_path)}"
    head.append("")
    head += [f"> **Warning:** {markdown_text(w)}" for w in result.warnings]
    if result.warnings:
        head.append("")
    relative = any(c.baseline is not None for c in result.checks)
    columns = ["metric", *(["rank"] if result.multi_rank else []), "value", "limit"]
    columns += ["baseline", "change"] if relative else []
    columns.append("verdict")
    head.append("| " + " | ".join(columns) + " |")
    head.append(
        "|"
        + "|".join("---" if c in ("metric", "verdict", "change") else "---:" for c in columns)
        + "|"
    )
    rows = []
    for c in sorted(result.checks, key=lambda c: c.passed):  # stable: failures first
        cells = [markdown_code(c.metric)]
        if result.multi_rank:
            cells.append(str(c.rank))
        cells += [value_text(c.value, c.unit), limit_text(c)]
        if relative:
            cells += [value_text(c.baseline, c.unit), markdown_text(_change(c))]
        cells.append("pass" if c.passed else "**FAIL**")
        rows.append("| " + " | ".join(cells) + " |")
    return _fit("\n".join(head), rows, limit)


def _fit(head: str, rows: list[str], limit: int) -> str:
    """``head`` and as many ``rows`` as fit in ``limit`` bytes, with a note on the rest."""

    def size(text: str) -> int:
        return len(text.encode("utf-8"))

    out = head
    reserve = 200  # the note on left-out rows
    for i, row in enumerate(rows):
        if size(out) + size(row) + 1 + reserve > limit:
            left = len(rows) - i
            note = (
                f"\n\n*{left} more rows left out to keep this summary under "
                f"{limit // 1024} KiB; the JUnit file and the job log have all of them.*\n"
            )
            return out + note if size(out + note) <= limit else out[: max(0, limit - 1)] + "\n"
        out += "\n" + row
    return out + "\n"


# ---- JUnit -----------------------------------------------------------------------------------


def gate_junit(result: GateResult) -> str:
    """JUnit XML: one test suite, one test case per check (a failure for each over budget)."""
    failures = len(result.failures)
    attrs = {
        "name": "msprof gate",
        "tests": str(len(result.checks)),
        "failures": str(failures),
        "errors": "0",
        "skipped": "0",
        "time": "0",
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    props = ET.SubElement(suite, "properties")
    # names and messages quote op types and paths: characters XML cannot carry are escaped
    ET.SubElement(props, "property", {"name": "profile", "value": xml_text(result.path)})
    if result.baseline_path:
        baseline = xml_text(result.baseline_path)
        ET.SubElement(props, "property", {"name": "baseline", "value": baseline})
    for w in result.warnings:
        ET.SubElement(props, "property", {"name": "warning", "value": xml_text(w)})
    for c in result.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"msprof.gate.{xml_text(c.kind)}",
                "name": xml_text(metric_name(c, result.multi_rank)),
                "time": "0",
            },
        )
        text = xml_text(_describe(c, result.multi_rank))
        if c.passed:
            ET.SubElement(case, "system-out").text = text
        else:
            failure = ET.SubElement(case, "failure", {"message": text, "type": "BudgetExceeded"})
            failure.text = text
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ---- diff ------------------------------------------------------------------------------------


#: diff figures that are shares (shown as percentages, their change in percentage points)
SHARES = ("utilization", "copy_ratio")


def number_text(value: float) -> str:
    """``1,234``, ``12.5``, ``0.125``: thousands separators, no exponent, at most 3 decimals."""
    if math.isinf(value) or math.isnan(value):
        return str(value)
    if value == int(value) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.3f}".rstrip("0").rstrip(".")


def figure_text(value: float, metric: str = "", unit: str = "", signed: bool = False) -> str:
    """A diff value for people: ``1.979 ms``, ``2.0 MiB``, ``29.2%``, ``1,234``; ``signed``
    for a change (``+0.250 ms``, ``+1.5 pp``, ``0``)."""
    sign = "+" if signed and value > 0 else ("-" if value < 0 else "")
    size = abs(value)
    if signed and value == 0:
        return "0"
    if metric in SHARES:
        return f"{sign}{size * 100:,.1f} pp" if signed else f"{value:.1%}"
    if unit == "ms":
        return f"{sign}{size:,.3f} ms"
    if unit == "B":
        return f"{sign}{human_bytes(size)}"
    if unit == "MiB":
        return f"{sign}{human_bytes(size * 1024 * 1024)}"
    return f"{sign}{number_text(size)}"


def _pct(relative: float | None) -> str:
    """``+12.5%``, ``-3.0%``, ``0%``; ``new`` from 0; a change past +1,000% as a factor
    (``x2,561``)."""
    if relative is None:
        return "new"
    if not relative:
        return "0%"
    if relative >= 10:
        return f"x{relative + 1:,.0f}"
    return f"{relative:+.1%}"


def _signed(value: float, unit: str = "") -> str:
    return figure_text(value, unit=unit, signed=True)


def render_diff(d: Diff, console: Any = None, top: int = 30) -> None:
    """The figures (step time, the other times by their change in ms, the rest by relative
    change) and the op types that changed (by the change of device time) on the terminal;
    ``top`` op types at most."""
    from rich.table import Table

    console = console or _console()
    multi = len(d.ranks) > 1
    title = cell(f"msprof diff: {d.base_path} -> {d.new_path}")
    table = Table(title=title, title_justify="left")
    table.add_column("figure", no_wrap=True)
    if multi:
        table.add_column("rank", justify="right")
    for name in ("base", "new", "change"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("%", justify="right", no_wrap=True)
    for f in d.figures:
        row: list[Any] = [cell(f.metric), *([str(f.rank)] if multi else [])]
        row += [
            figure_text(f.base, f.metric, f.unit),
            figure_text(f.new, f.metric, f.unit),
            figure_text(f.delta, f.metric, f.unit, signed=True),
        ]
        style = "" if not f.changed else "bold"
        row.append(_pct(f.relative))
        table.add_row(*row, style=style)
    console.print(table)
    changed = [o for o in d.op_types if o.status != SAME]
    if not changed:
        console.print("op types: no op type changed in count or device time")
    else:
        ops = Table(
            title="op types that changed (device time and count per step)", title_justify="left"
        )
        ops.add_column("op type", no_wrap=True, overflow="fold")
        if multi:
            ops.add_column("rank", justify="right")
        ops.add_column("status")
        for name in ("base ms", "new ms", "change ms", "%", "base count", "new count"):
            ops.add_column(name, justify="right", no_wrap=True)
        for o in changed[:top]:
            ops.add_row(
                cell(o.op_type),
                *([str(o.rank)] if multi else []),
                o.status,
                figure_text(o.base_ms),
                figure_text(o.new_ms),
                _signed(o.delta_ms),
                _pct(o.relative),
                figure_text(o.base_count),
                figure_text(o.new_count),
            )
        console.print(ops)
        if len(changed) > top:
            console.print(f"... and {len(changed) - top} more op types (--json lists all)")
    console.print(visible(diff_summary(d)), markup=False, highlight=False, soft_wrap=True)


def diff_summary(d: Diff) -> str:
    """One line: the step time change and the counts of added/removed/changed op types."""
    if not d.changed:
        return "msprof diff: no change (every figure and op type is identical)"
    step = d.figure("step_time_ms")
    parts = [
        f"step time {figure_text(step.base, unit='ms')} -> {figure_text(step.new, unit='ms')} "
        f"({_pct(step.relative)})"
    ]
    for status in ("added", "removed", "changed"):
        names = sorted({o.op_type for o in d.op_types if o.status == status})
        if names:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            parts.append(f"{len(names)} op types {status} ({shown})")
    return "msprof diff: " + "; ".join(parts)
