"""Helpers of the importer tests."""

from __future__ import annotations

import shutil
from pathlib import Path


def without_raw(run: Path, parent: Path) -> Path:
    """A copy of the run folder ``run`` under ``parent`` without its ``msprof_raw/``."""
    target = parent / run.name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("msprof_raw"))
    return target
