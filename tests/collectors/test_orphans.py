"""Finding this process's children (to stop them when msprof died under the script)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from msprof_py.collectors.orphans import child_pids, orphaned


def test_child_pids_parses_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    for pid, stat in {
        "10": "10 (python) S 7 10 10 0",
        "11": "11 (my (odd) name) S 7 10 10 0",
        "12": "12 (other) S 8 12 12 0",
        "self": "ignored",
    }.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(stat)
    (tmp_path / "13").mkdir()  # ended while being read: no stat file
    assert sorted(child_pids(7, proc=tmp_path)) == [10, 11]
    assert child_pids(99, proc=tmp_path) == []
    assert child_pids(7, proc=tmp_path / "missing") == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_child_pids_finds_a_real_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in child_pids(os.getpid())
        assert not orphaned(os.getppid())  # our parent is still ours
    finally:
        child.kill()
        child.wait()
