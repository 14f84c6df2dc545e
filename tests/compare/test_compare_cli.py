"""``msprof compare`` on the command line: tables, --json keys, --output files, errors."""

from __future__ import annotations

import csv
import json
import re
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from compare_helpers import host_only_run, run, save

from msprof_py.cli import cli
from msprof_py.compare import PROJECTION_LABEL, SHEETS, compare

JSON_KEYS = {"mode", "label", "base", "new", "warnings", "overall", "operators",
             "operator_statistic", "modules", "memory", "memory_statistic",
             "communication"}  # fmt: skip
SIDE_KEYS = {"path", "rank", "source", "steps", "device", "command", "peak_allocated_bytes",
             "peak_reserved_bytes"}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    hostile = run("new", mm_name="=HYPERLINK(1)")
    made = {"base": run("base"), "new": run("new"), "cpu": host_only_run(), "hostile": hostile}
    return {name: save(profile, root / name) for name, profile in made.items()}


def invoke(*args: str):
    return CliRunner().invoke(cli, ["compare", *map(str, args)], catch_exceptions=False)


def test_tables_on_the_terminal(runs: dict[str, Path]) -> None:
    res = invoke(runs["base"], runs["new"])
    assert res.exit_code == 0, res.output
    for sheet in ("OverallMetrics", "OperatorCompare", "ModuleCompare", "CommunicationCompare"):
        assert f"{sheet} - device time (NPU vs NPU)" in res.output
    assert "aten::convolution" in res.output and "base only" in res.output


def test_json_keys(runs: dict[str, Path]) -> None:
    res = invoke(runs["base"], runs["new"], "--json")
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert set(doc) == JSON_KEYS and doc["mode"] == "device"
    assert set(doc["base"]) == SIDE_KEYS and doc["base"]["steps"] == [1, 2]
    for sheet, (attr, columns) in SHEETS.items():
        assert doc[attr], sheet
        assert all(set(row) == set(columns) for row in doc[attr]), sheet
    matmul = next(r for r in doc["overall"] if r["index"] == "MatMul")
    assert matmul["diff_duration_ms"] == pytest.approx(-0.004)
    flash = next(r for r in doc["overall"] if r["index"] == "Flash Attention (Forward)")
    assert flash["diff_ratio"] is None  # 0 vs 0: no ratio, never NaN in JSON


def _csv(path: Path) -> tuple[str, list[str], list[list[str]]]:
    with open(path, encoding="utf-8", newline="") as f:
        title, header, *rows = list(csv.reader(f))
    return title[0], header, rows


def _sheet_names(book: Path) -> list[str]:
    with zipfile.ZipFile(book) as z:
        return re.findall(r'<sheet name="([^"]+)"', z.read("xl/workbook.xml").decode())


def test_output_csv_and_xlsx(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = invoke(runs["base"], runs["hostile"], "--output", out)
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"{s}.csv" for s in SHEETS] + ["performance_comparison_result.xlsx"])
    for sheet, (_, columns) in SHEETS.items():
        title, header, _ = _csv(out / f"{sheet}.csv")
        assert title == f"{sheet}: device time (NPU vs NPU)"
        assert header == list(columns.values())
    _, header, rows = _csv(out / "OverallMetrics.csv")
    assert header[:4] == ["Index", "Base Duration(ms)", "Base Duration Ratio", "Base Number"]
    matmul = next(r for r in rows if r[0] == "MatMul")
    assert float(matmul[header.index("Diff Duration(ms)")]) == pytest.approx(-0.004)
    _, header, rows = _csv(out / "OperatorCompare.csv")
    new_names = [r[header.index("New Operator Name")] for r in rows]
    assert "'=HYPERLINK(1)" in new_names  # a formula start made inert
    assert _sheet_names(out / "performance_comparison_result.xlsx") == list(SHEETS)
    again = invoke(runs["base"], runs["new"], "--output", out)
    assert again.exit_code == 2 and "--force replaces them" in again.output
    assert invoke(runs["base"], runs["new"], "--output", out, "--force").exit_code == 0


def test_csv_only_without_xlsxwriter(runs, tmp_path, monkeypatch) -> None:
    from msprof_py.compare import export

    monkeypatch.setattr(export, "has_xlsxwriter", lambda: False)
    res = invoke(runs["base"], runs["new"], "--output", tmp_path / "o")
    assert res.exit_code == 0
    assert res.output.count("xlsxwriter is not installed") == 1
    assert not list((tmp_path / "o").glob("*.xlsx"))


def test_projection_is_labelled_everywhere(runs: dict[str, Path], tmp_path: Path) -> None:
    res = invoke(runs["cpu"], runs["new"])
    assert res.exit_code == 0
    assert f"msprof compare: {PROJECTION_LABEL}" in res.output
    assert res.output.count(f"- {PROJECTION_LABEL}") >= 4  # every table printed
    assert "BASE has no device tasks" in res.output
    invoke(runs["cpu"], runs["new"], "--output", tmp_path / "p")
    for sheet in SHEETS:
        assert _csv(tmp_path / "p" / f"{sheet}.csv")[0] == f"{sheet}: {PROJECTION_LABEL}"
    doc = json.loads(invoke(runs["cpu"], runs["new"], "--json").stdout)
    assert doc["label"] == PROJECTION_LABEL and doc["base"]["source"] == "host"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/missing", "{new}"], "missing: no such file or directory (BASE)"),
        (["{base}", "{tmp}"], "no profile here"),
        (["{base}", "{new}", "--base-step", "9"], "BASE has no step 9 (steps: 1-2)"),
        (["{base}", "{new}", "--rank", "5"], "has no rank 5"),
        (["{base}", "{new}", "--op-name-map", "{tmp}/nomap"], "expected a=b pairs or a map file"),
        (["{base}", "{new}", "--json", "--output", "{tmp}/x"], "cannot be combined"),
    ],
)
def test_errors_are_one_line(runs, tmp_path, args, message) -> None:
    filled = [a.format(tmp=tmp_path, base=runs["base"], new=runs["new"]) for a in args]
    res = invoke(*filled)
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message.lower() in lines[0].lower(), res.output


def test_compare_takes_paths_and_profiles(runs: dict[str, Path]) -> None:
    by_path = compare(runs["base"], runs["new"]).overall
    by_profile = compare(run("base"), run("new")).overall
    assert by_path["diff_duration_ms"].tolist() == pytest.approx(
        by_profile["diff_duration_ms"].tolist()
    )
