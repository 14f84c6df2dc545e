"""Outputs that fail never change msprof's exit code, and never leave a truncated file."""

from __future__ import annotations

import errno
import textwrap
from pathlib import Path

import pytest

from msprof_py.collectors.run import ProfileRun, RunOptions
from msprof_py.profile import load
from msprof_py.profile.atomic import create_atomically
from tests.collectors.scripts import LINEAR_STEPS

SCRIPT = LINEAR_STEPS.format(steps=2, end="sys.exit(3)")


def test_create_atomically_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    with (
        pytest.raises(OSError, match="No space"),
        create_atomically(target, "x", encoding="utf-8") as f,
    ):
        f.write("{half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []  # no final file, no temporary one
    with create_atomically(target, "x", encoding="utf-8") as f:
        f.write("{}")
    assert target.read_text() == "{}"
    with pytest.raises(FileExistsError), create_atomically(target, "xb") as f:
        f.write(b"other")
    assert target.read_text() == "{}" and len(list(tmp_path.iterdir())) == 1
    with pytest.raises(ValueError, match="new files only"), create_atomically(target, "w"):
        pass


def test_failing_exports_keep_the_scripts_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "trace.json")

    import msprof_py.exporters
    import msprof_py.report

    monkeypatch.setattr(msprof_py.exporters, "write_chrome_trace", disk_full)
    monkeypatch.setattr(msprof_py.exporters, "export_run", disk_full)
    monkeypatch.setattr(msprof_py.report, "write_report", disk_full)
    run = ProfileRun(RunOptions(output=tmp_path / "out"), ["python", str(script)])
    assert run.execute() == 3  # the script's own exit code
    err = capsys.readouterr().err
    assert "msprof: the Chrome trace failed: No space left on device (trace.json)" in err
    assert "msprof: the HTML report failed: No space left on device" in err
    assert "Traceback" not in err
    assert run.folder is not None and not (run.folder / "trace.json").exists()
    profile = load(run.folder)  # the raw profile is still there and loadable
    assert len(profile.steps) == 2
