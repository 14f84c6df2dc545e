"""Only regular files are opened: a named pipe in a profile never hangs a command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from msprof_py.analyzers.command import analyze as analyze_command
from msprof_py.profile import ProfileError, load

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


@pytest.mark.parametrize("name", ["meta.json", "tasks-00000.parquet"])
def test_a_fifo_is_a_clean_error(copy_of, name: str) -> None:
    run = copy_of("a")
    target = next(Path(run).rglob(f"msprof_raw/{name}"))
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(ProfileError):  # returns at once: nothing opens the pipe to read it
        load(run)
    result = CliRunner().invoke(analyze_command, [str(run)])
    assert result.exit_code == 2 and str(target.name) in result.output
