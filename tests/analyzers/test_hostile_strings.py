"""No string from a profile changes an output's structure: terminal, TOML, JUnit, Markdown."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import tomllib
from analyze_helpers import Builder, chain, save
from click.testing import CliRunner

from msprof_py.analyzers.command import analyze as analyze_command
from msprof_py.gates.command import diff as diff_command
from msprof_py.gates.command import gate as gate_command
from msprof_py.safe_text import markdown_code, toml_string, visible, xml_text

HOSTILE = [
    "[/]",
    "[link=https://evil.example/]click[/link]",
    "Clear\x1b[2JScreen",
    'Add" = 1e9\n"Zz',
    "=cmd|' /C calc'!A0",
    "tick`|` pipe",
    "\u202egnp.exe",
    "nul\x00byte",
]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = Builder()
    t = 0
    for step in range(3):
        b.step(step, t, t + 100_000)
        kernels = [
            {"start": t + 1_000 + 5_000 * i, "end": t + 4_000 + 5_000 * i, "op_type": name}
            for i, name in enumerate(HOSTILE)
        ]
        b.op(f"aten::{HOSTILE[0]}", t, t + 500, kernels, step=step, module=HOSTILE[1])
        ops = [(f"aten::{name}", "4,4", "4,4", {"op_type": name}) for name in HOSTILE[2:5]]
        chain(b, t + 60_000, ops, step=step, module=HOSTILE[2])
        t += 100_000
    return save(b.build(), tmp_path_factory.mktemp("hostile"))


def _no_raw_controls(text: str) -> None:
    assert "\x1b" not in text and "\x00" not in text and "\u202e" not in text
    assert "\x1b]8;" not in text  # no terminal hyperlink


def test_analyze_prints_hostile_names_inert(hostile_run: Path) -> None:
    result = CliRunner().invoke(analyze_command, [str(hostile_run), "--top", "20"])
    assert result.exit_code == 0, result.output
    _no_raw_controls(result.output)
    assert "[/]" in result.output and "Clear\\x1b[2JScreen" in result.output


def test_init_budget_writes_hostile_op_types_as_keys(hostile_run: Path, tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    args = [str(hostile_run), "--init-budget", str(budget)]
    result = CliRunner().invoke(gate_command, [*args, "--headroom", "0%"])
    assert result.exit_code == 0, result.output
    parsed = tomllib.loads(budget.read_text(encoding="utf-8"))
    op_limits = parsed["absolute"]["op_type_time_ms"]
    assert "Zz" not in op_limits  # the quote and newline did not open a key of their own
    assert set(op_limits) <= set(HOSTILE) | {"Add"}
    assert all(value < 1e6 for value in op_limits.values())


def test_gate_junit_and_markdown_stay_well_formed(hostile_run: Path, tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    runner = CliRunner()
    init = [str(hostile_run), "--init-budget", str(budget), "--headroom", "0%"]
    assert runner.invoke(gate_command, init).exit_code == 0
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    args = [str(hostile_run), "--budget", str(budget), "--junit", str(junit)]
    result = runner.invoke(gate_command, [*args, "--markdown", str(markdown)])
    assert result.exit_code == 0, result.output
    _no_raw_controls(result.output)
    root = ET.fromstring(junit.read_text(encoding="utf-8"))  # well-formed despite NUL and ESC
    names = [case.get("name") for case in root.iter("testcase")]
    assert any("\\x1b" in (name or "") for name in names), names  # shown, escaped
    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            unescaped = line.replace("\\|", "").count("|")
            header = markdown.read_text(encoding="utf-8").splitlines()
            columns = next(h for h in header if h.startswith("| metric")).count("|")
            assert unescaped == columns, line


def test_diff_prints_hostile_names_inert(hostile_run: Path) -> None:
    result = CliRunner().invoke(diff_command, [str(hostile_run), str(hostile_run)])
    assert result.exit_code == 0, result.output
    _no_raw_controls(result.output)


def test_escapers() -> None:
    assert visible("a\x1b[2J\u202eb") == "a\\x1b[2J\\u202eb"
    assert tomllib.loads(f"k = {toml_string(HOSTILE[3])}")["k"] == HOSTILE[3]
    assert tomllib.loads(f"{toml_string(chr(1) + 'x')} = 1") == {"\x01x": 1}
    assert xml_text("a\x00b\x0bc\u202e") == "a\\x00b\\x0bc\\u202e"
    assert markdown_code("a`b``c|d\ne") == "```a`b``c\\|d e```"
    assert markdown_code("`x") == "`` `x ``"
