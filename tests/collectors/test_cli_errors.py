"""msprof's bad inputs end in one line on stderr and exit code 2, before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]


def _msprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MSPROF, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("msprof: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ("/proc/forbidden", "cannot create --output /proc/forbidden"),
        ("a_file/sub", "cannot create --output a_file/sub: Not a directory"),
        ("a_file", "Directory 'a_file' is a file"),
    ],
    ids=["proc", "under-a-file", "a-file"],
)
def test_an_output_that_cannot_be_created_is_one_line(
    tmp_path: Path, output: str, why: str
) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "train.py").write_text("print('ran')\n")
    result = _msprof(f"--output={output}", "python", "train.py", cwd=tmp_path)
    assert why in _one_error_line(result)
    assert "ran" not in result.stdout  # the application never started
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_options_without_an_application_are_a_usage_error(tmp_path: Path) -> None:
    result = _msprof("--output=out", cwd=tmp_path)
    line = _one_error_line(result)
    assert "no application to profile" in line and "--output" in line
    assert "Usage" not in result.stdout
    assert not (tmp_path / "out").exists()


def test_msprof_alone_shows_help_and_succeeds(tmp_path: Path) -> None:
    result = _msprof(cwd=tmp_path)
    assert result.returncode == 0
    assert "Usage: msprof" in result.stdout
