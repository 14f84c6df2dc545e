"""The end of an msprof run does the exports in a forked process beside the analysis
(``collectors/run.py``'s ``_beside``): its result and its messages reach the parent, a failure
in it never raises there, and it never runs the parent's exit handlers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from msprof_py.collectors.run import _beside

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_the_work_runs_in_another_process_and_hands_back_result_and_messages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def work() -> dict[str, int]:
        print("written by the child")
        print("msprof: a warning", file=sys.stderr)
        return {"pid": os.getpid()}

    join = _beside(work, "the work")
    result = join()
    assert result["pid"] != os.getpid()
    captured = capsys.readouterr()
    assert captured.out == "written by the child\n"
    assert captured.err == "msprof: a warning\n"


def test_a_child_that_fails_gives_none_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    def work() -> None:
        raise RuntimeError("boom")

    assert _beside(work, "the exports")() is None
    assert capsys.readouterr().err == "msprof: warning: the exports ended early (exit status 1)\n"


def test_the_child_leaves_without_the_parents_exit_handlers(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = f"""
import atexit, pathlib
from msprof_py.collectors.run import _beside
atexit.register(lambda: pathlib.Path({str(marker)!r}).open("a").write("x"))
print(_beside(lambda: 7, "seven")())
"""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "7"
    assert marker.read_text() == "x"  # the parent's handler, once


def test_inline_runs_the_work_here() -> None:
    assert _beside(os.getpid, "pid", inline=True)() == os.getpid()
