"""A hostile program end to end: module class names, annotations and argv made of markup,
control characters, formula cells, quotes, commas and newlines go through msprof and every
output (terminal, HTML, Chrome/Ascend JSON, CSV, analyze JSON and CSV, TOML budget, JUnit,
Markdown) without changing any output's structure."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import tomllib

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]

#: names the program gives its module classes and annotations
HOSTILE = [
    "[/]",
    "[link=https://evil.example/]click[/link]",
    "Clear\x1b[2JScreen",
    'Q"uote,comma\nnewline',
    "=cmd|' /C calc'!A0",
    "</script><img src=x onerror=alert(1)>",
    "\u202egnp.exe",
    "+SUM(1)",
    "@at",
    "tick`|` pipe",
]
#: argv the program is started with (the program prints nothing of it)
HOSTILE_ARGV = ["=evil()", "[bold]x[/bold]", "</script><b>argv</b>"]

PROGRAM = """
import torch
import msprof_py

HOSTILE = {hostile!r}

def named(name, base):
    return type(name, (base,), {{}})

layers = [named(name, torch.nn.Linear)(8, 8) for name in HOSTILE[:6]]
model = named(HOSTILE[6], torch.nn.Sequential)(*layers).to("npu")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 8, device="npu")
for step in range(3):
    for i, label in enumerate(HOSTILE):
        with msprof_py.annotate(label):
            y = model(x) * (i + 1)
    y.sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def _msprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MSPROF, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _inert_on_terminal(text: str) -> None:
    assert "\x1b" not in text, "a raw escape sequence reached the terminal"
    assert "\u202e" not in text and "\x00" not in text
    assert "evil.example" not in text or "]8;" not in text  # never a terminal hyperlink


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The program recorded with ``--report``: (the run folder, msprof's terminal output)."""
    root = tmp_path_factory.mktemp("hostile_program")
    script = root / "hostile.py"
    script.write_text(textwrap.dedent(PROGRAM.format(hostile=HOSTILE)), encoding="utf-8")
    result = _msprof("--output=out", "--report", "python", str(script), *HOSTILE_ARGV, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    (folder,) = sorted((root / "out").glob("msprof_*"))
    return folder, result.stdout + result.stderr


def test_run_summary_is_inert(hostile_run: tuple[Path, str]) -> None:
    _, terminal = hostile_run
    assert "profile written to" in terminal
    _inert_on_terminal(terminal)


class _Tags(HTMLParser):
    """The elements an HTML page opens (to count scripts and spot injected ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_html_report_gains_no_elements(hostile_run: tuple[Path, str]) -> None:
    folder, _ = hostile_run
    page = (folder / "report.html").read_text(encoding="utf-8")
    tags = _Tags()
    tags.feed(page)
    assert "img" not in tags.tags  # neither the class name's nor the argv's markup became HTML
    assert "</script><img" not in page and "<b>argv</b>" not in page
    assert "gnp.exe" in page  # the names are there, as text


def _trace_names(path: Path) -> set[str]:
    data = json.loads(path.read_text(encoding="utf-8"))  # valid JSON for any name
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {str(event.get("name", "")) for event in events}
    for event in events:
        names.update(str(value) for value in (event.get("args") or {}).values())
    return names


def test_traces_stay_valid_json_with_names_intact(hostile_run: tuple[Path, str]) -> None:
    folder, _ = hostile_run
    (trace_view,) = folder.rglob("ASCEND_PROFILER_OUTPUT/trace_view.json")
    for path in (folder / "trace.json", trace_view):
        names = _trace_names(path)
        for label in HOSTILE:  # every annotation came through, byte for byte
            assert label in names, (path.name, label)


def _check_csv(path: Path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    assert "\x00" not in text
    rows = list(csv.reader(text.splitlines(keepends=True)))
    widths = {len(row) for row in rows if row}
    assert len(widths) == 1, (path.name, widths)  # no name opened a column or a row
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(FORMULA_LEADS) or _is_number(cell), (path.name, cell)
    return rows


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_ascend_csv_exports_neutralise_formulas(hostile_run: tuple[Path, str]) -> None:
    folder, _ = hostile_run
    cells: set[str] = set()
    exports = sorted(folder.rglob("*.csv"))
    assert exports
    for path in exports:
        for row in _check_csv(path):
            cells.update(row)
    assert "'=cmd|' /C calc'!A0" in cells and "'+SUM(1)" in cells  # neutralised, not dropped
    assert 'Q"uote,comma\nnewline' in cells  # quoting kept the quote, comma and newline


def test_analyze_terminal_json_and_csv(hostile_run: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = hostile_run
    shown = _msprof("analyze", str(folder), "--top", "30", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    _inert_on_terminal(shown.stdout + shown.stderr)
    as_json = _msprof("analyze", str(folder), "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    json.loads(as_json.stdout)
    written = _msprof("analyze", str(folder), "--csv", str(tmp_path / "csv"), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    tables = sorted((tmp_path / "csv").glob("*.csv"))
    assert tables
    for path in tables:
        _check_csv(path)


def test_gate_budget_junit_and_markdown(hostile_run: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = hostile_run
    budget, junit, markdown = tmp_path / "b.toml", tmp_path / "g.xml", tmp_path / "g.md"
    init = _msprof("gate", str(folder), "--init-budget", str(budget), cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    limits = tomllib.loads(budget.read_text(encoding="utf-8"))
    assert limits["absolute"]
    args = ["gate", str(folder), "--budget", str(budget), "--junit", str(junit)]
    checked = _msprof(*args, "--markdown", str(markdown), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    _inert_on_terminal(checked.stdout + checked.stderr)
    assert list(ET.fromstring(junit.read_text(encoding="utf-8")).iter("testcase"))
    table = [line for line in markdown.read_text(encoding="utf-8").splitlines() if "|" in line]
    assert len({line.replace("\\|", "").count("|") for line in table}) == 1
