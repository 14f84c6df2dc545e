"""``msprof compare --output DIR``: one CSV per sheet, and the same sheets in one workbook.

CSV files are ``<Sheet>.csv`` (:data:`msprof_py.compare.SHEETS`): a first line saying what
is compared (``OperatorCompare: device time (NPU vs NPU)``, or the projection label), then
the header (msprof-analyze's column names with Base/New sides) and the rows; every text
cell goes through
:func:`msprof_py.profile.cells.neutral_cell` (op and module names come from the profiled
program). The workbook ``performance_comparison_result.xlsx`` holds the same sheets when
``xlsxwriter`` is installed (it is optional: CSV only otherwise, and the caller says so once).
Existing files are never replaced unless ``force``.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from typing import Any

from msprof_py.compare.core import SHEETS, Comparison
from msprof_py.profile.cells import neutral_cell

WORKBOOK = "performance_comparison_result.xlsx"


class ExportError(OSError):
    """The output folder cannot take the files (they exist, or it cannot be written)."""


def has_xlsxwriter() -> bool:
    """Whether the optional ``xlsxwriter`` is importable."""
    return importlib.util.find_spec("xlsxwriter") is not None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:
            return ""
        return f"{value:.6f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return neutral_cell(str(value))


def _rows(result: Comparison, sheet: str) -> tuple[list[str], list[list[Any]]]:
    attr, columns = SHEETS[sheet]
    frame = getattr(result, attr)
    header = list(columns.values())
    rows = [[row.get(k) for k in columns] for row in frame.to_dict(orient="records")]
    return header, rows


def planned(folder: Path, xlsx: bool) -> list[Path]:
    """The files an export writes into ``folder``."""
    files = [folder / f"{sheet}.csv" for sheet in SHEETS]
    return files + ([folder / WORKBOOK] if xlsx else [])


def write(result: Comparison, folder: Path, *, force: bool = False) -> list[Path]:
    """Write the CSV files (and the workbook when xlsxwriter is there) into ``folder``."""
    folder = Path(folder)
    xlsx = has_xlsxwriter()
    files = planned(folder, xlsx)
    existing = [p.name for p in files if p.exists()]
    if existing and not force:
        raise ExportError(f"{folder}: already holds {', '.join(existing)} (--force replaces them)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for sheet in SHEETS:
            header, rows = _rows(result, sheet)
            with open(folder / f"{sheet}.csv", "w", encoding="utf-8", newline="") as f:
                out = csv.writer(f)
                out.writerow([neutral_cell(f"{sheet}: {result.label}")])
                out.writerow(header)
                out.writerows([[_cell(v) for v in row] for row in rows])
        if xlsx:
            _workbook(result, folder / WORKBOOK)
    except OSError as exc:
        raise ExportError(f"{folder}: cannot write ({exc.strerror or exc})") from None
    return files


def _workbook(result: Comparison, path: Path) -> None:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path), {"strings_to_formulas": False, "strings_to_urls": False})
    bold = book.add_format({"bold": True})
    try:
        for sheet in SHEETS:
            header, rows = _rows(result, sheet)
            ws = book.add_worksheet(sheet)
            ws.write_string(0, 0, f"{sheet}: {result.label}", bold)
            first = 1
            for c, name in enumerate(header):
                ws.write_string(first, c, name, bold)
                ws.set_column(c, c, max(12, min(40, len(name) + 2)))
            for r, row in enumerate(rows, first + 1):
                for c, value in enumerate(row):
                    if value is None or (isinstance(value, float) and value != value):
                        continue
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        ws.write_number(r, c, value)
                    else:
                        ws.write_string(r, c, str(value).replace("\0", ""))
    finally:
        book.close()
