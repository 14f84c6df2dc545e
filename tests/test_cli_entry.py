"""The ``msprof`` console script's exit: fast (no interpreter teardown), yet complete."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from msprof_py.cli_entry import exit_code


def _run(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``code`` run before ``msprof_py.cli_entry.run()`` with ``argv`` as msprof's arguments."""
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import sys
        sys.argv = ["msprof", *{list(argv)!r}]
        from msprof_py.cli_entry import run
        run()
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("code", "status"), [(None, 0), (0, 0), (2, 2), (130, 130), (256 + 3, 3), (True, 1)]
)
def test_exit_status_of_a_system_exit_code(code: object, status: int) -> None:
    assert exit_code(code) == status


def test_a_message_exits_1_after_printing_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code("something went wrong") == 1
    assert capsys.readouterr().err == "something went wrong\n"


def test_output_through_a_pipe_is_complete_and_exit_handlers_run(tmp_path: Path) -> None:
    marker = tmp_path / "handler.txt"
    result = _run(
        f"""
        import atexit, pathlib
        atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text("ran"))
        """,
        "devices",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) >= {"ascend910b", "ascend310p"}  # flushed whole
    assert marker.read_text() == "ran"


def test_threads_that_are_not_daemons_finish_before_the_exit(tmp_path: Path) -> None:
    marker = tmp_path / "thread.txt"
    result = _run(
        f"""
        import pathlib, threading, time
        def late():
            time.sleep(0.3)
            pathlib.Path({str(marker)!r}).write_text("done")
        threading.Thread(target=late).start()
        """,
        "devices",
    )
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "done"


def test_errors_keep_their_exit_code_and_one_line() -> None:
    result = _run("", "devices", "--spec", "/no/such/spec.toml")
    assert result.returncode == 2
    assert result.stderr.startswith("msprof: error:") and "Traceback" not in result.stderr
