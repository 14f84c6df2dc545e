"""The msprof command line (what exists so far: devices, --version, errors)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from msprof_py.cli import cli as main


def test_devices_lists_the_presets_as_json() -> None:
    result = CliRunner().invoke(main, ["devices", "--json"])
    assert result.exit_code == 0
    table = json.loads(result.output)
    assert set(table) >= {"ascend910b", "ascend910a", "ascend310p"}
    assert table["ascend910b"]["fp16 peak"] == "353.9 TFLOPS"


def test_devices_table_mentions_every_preset() -> None:
    result = CliRunner().invoke(main, ["devices"], terminal_width=200)
    assert result.exit_code == 0
    for name in ("ascend910b", "ascend910a", "ascend310p"):
        assert name in result.output


def test_a_bad_spec_file_is_a_one_line_error_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('base = "ascend910b"\n[cube]\ncores = "x"\n')
    result = CliRunner().invoke(main, ["devices", "--spec", str(path)])
    assert result.exit_code == 2
    assert "field 'cube.cores' must be an integer" in result.output
    assert "Traceback" not in result.output


def test_a_valid_spec_file_is_shown(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('base = "ascend910b"\n[cube]\ncores = 20\n')
    result = CliRunner().invoke(main, ["devices", "--spec", str(path), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["ascend910b"]["cores"].startswith("20 AIC")


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "msprof" in result.output
