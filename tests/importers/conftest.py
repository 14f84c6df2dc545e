"""Fixtures of the importer tests: a small recorded run, and its torch_npu folder alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from import_helpers import without_raw

# the exporters' hand-made profiles (export_helpers), for runs of this folder alone
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exporters"))

from recording import finish, record


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded run folder (``*_ascend_pt`` with ``msprof_raw/`` and the export)."""
    return finish(record(tmp_path_factory.mktemp("recorded")))


@pytest.fixture(scope="session")
def imported(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run's torch_npu folder alone (what a real run on hardware leaves)."""
    return without_raw(recorded, tmp_path_factory.mktemp("imported"))
