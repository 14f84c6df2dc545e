"""Helpers of the importer tests."""

from __future__ import annotations

import shutil
from pathlib import Path


def without_raw(run: Path, parent: Path) -> Path:
    """A copy of the run folder ``run`` under ``parent`` without its ``msprof_raw/``."""
    target = parent / run.name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("msprof_raw"))
    return target


def one_line_error(path: Path) -> str:
    """The one line ``msprof analyze PATH`` fails with (no traceback, a non-zero exit)."""
    from click.testing import CliRunner

    from msprof_py.cli import cli

    result = CliRunner().invoke(cli, ["analyze", str(path)])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]
