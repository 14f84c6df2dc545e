"""``msprof compare`` on the terminal: the header, then one Rich table per sheet."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.table import Table

from msprof_py.compare.core import SHEETS, Comparison
from msprof_py.compare.side import Side
from msprof_py.console import make_console
from msprof_py.safe_text import cell, visible

#: sheets shown in full; the others show their first ``top`` rows
FULL = ("OverallMetrics", "MemoryCompareStatistic", "CommunicationCompare")


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return cell(value)


def _side_line(side: Side) -> str:
    steps = side.steps
    shown = ", ".join(map(str, steps[:8])) + (" ..." if len(steps) > 8 else "")
    what = "device tasks" if side.on_device else "host ops only"
    return f"{side.label}: {visible(side.path)} (rank {side.data.rank}, steps {shown}; {what})"


def _table(result: Comparison, sheet: str, top: int) -> Table | None:
    attr, columns = SHEETS[sheet]
    frame: pd.DataFrame = getattr(result, attr)
    if frame.empty:
        return None
    rows = frame if sheet in FULL else frame.head(top)
    more = "" if len(rows) == len(frame) else f", first {len(rows)} of {len(frame)}"
    title = f"{sheet} - {result.label}{more}"
    out = Table(title=title, title_justify="left")
    for key, header in columns.items():
        numeric = pd.api.types.is_numeric_dtype(frame[key]) or key.startswith(
            ("diff", "base_", "new_")
        )
        text = key.endswith(("name", "shapes")) or key in ("index", "operator", "module", "match")
        out.add_column(header, justify="left" if text or not numeric else "right", overflow="fold")
    for row in rows.to_dict(orient="records"):
        out.add_row(*(_number(row[k]) for k in columns))
    return out


def render(result: Comparison, top: int = 20) -> None:
    """Print the comparison: what is compared, the warnings' count, the tables."""
    console = make_console()
    console.print(f"[bold]msprof compare[/bold]: {result.label}, per step")
    console.print(_side_line(result.base), markup=False)
    console.print(_side_line(result.new), markup=False)
    for sheet in SHEETS:
        table = _table(result, sheet, top)
        if table is not None:
            console.print(table)
        elif sheet == "ModuleCompare":
            console.print("ModuleCompare: no module paths on both sides (nothing to compare)")
