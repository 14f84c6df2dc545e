"""Helpers of the importer tests."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any


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


def _numbers(value: Any, where: str = "") -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in _numbers(v, f"{where}[{i}]")]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [(where, float(value))]
    return []


def check_finite_shares(doc: dict[str, Any]) -> int:
    """Assert what ``msprof analyze --json`` promises: JSON without NaN or inf anywhere, and
    every share (a key ending in ``share`` or starting with ``share_of``) in [0, 1]. Returns
    how many shares it checked."""
    json.dumps(doc, allow_nan=False)  # raises on NaN/inf
    numbers = _numbers(doc)
    bad = [(k, v) for k, v in numbers if not math.isfinite(v)]
    assert not bad, bad
    shares = [
        (k, v)
        for k, v in numbers
        if (key := k.rsplit(".", 1)[-1].split("[")[0]).endswith("share")
        or key.startswith("share_of")
    ]
    outside = [(k, v) for k, v in shares if not 0.0 <= v <= 1.0]
    assert not outside, outside
    return len(shares)
