"""A recorded process tells msprof when its profile is complete, as it exits: the exports,
the analysis and the report run beside the interpreter's teardown, and the exit code is
recorded once the process has ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from msprof_py.collectors.config import PROFILE_DONE, SessionConfig
from msprof_py.collectors.launcher import profile_done_notices, wait
from msprof_py.collectors.session import Session
from tests.collectors.scripts import LINEAR_STEPS

pytestmark = pytest.mark.skipif(not hasattr(signal, "sigtimedwait"), reason="needs siginfo")

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]

#: a script whose teardown (after every exit handler, the session's included) waits for the
#: run's Chrome trace: it appears only if msprof finishes the profile before the process ends
WAITS_IN_TEARDOWN = LINEAR_STEPS.format(
    steps=3,
    end="""
import glob, time

class WaitsForTheTrace:
    def __del__(self, find=glob.glob, clock=time.monotonic, sleep=time.sleep, open=open):
        deadline = clock() + 30
        while clock() < deadline and not find({pattern!r}):
            sleep(0.02)
        with open({marker!r}, "w") as out:
            out.write("seen" if find({pattern!r}) else "not seen")

kept_until_teardown = WaitsForTheTrace()
sys.exit({code})
""",
)


def _run(tmp_path: Path, code: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    output, marker = tmp_path / "out", tmp_path / "marker.txt"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(WAITS_IN_TEARDOWN).format(
            pattern=str(output / "msprof_*" / "trace.json"), marker=str(marker), code=code
        )
    )
    result = subprocess.run(
        [*MSPROF, f"--output={output}", "--no-report", "python", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, marker


def test_the_profile_is_finished_while_the_application_tears_down(tmp_path: Path) -> None:
    result, marker = _run(tmp_path, code=0)
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "seen"
    assert "findings:" in result.stderr and "exit code 0" in result.stderr


def test_the_exit_code_is_the_one_the_process_ended_with(tmp_path: Path) -> None:
    result, marker = _run(tmp_path, code=3)
    assert marker.read_text() == "seen"
    assert result.returncode == 3
    assert "exit code 3" in result.stderr
    (meta,) = (tmp_path / "out").glob("msprof_*/*_ascend_pt/msprof_raw/meta.json")
    recorded = json.loads(meta.read_text())
    assert (recorded["status"], recorded["exit_code"]) == ("completed", 3)


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)])


def test_wait_returns_at_the_childs_notice_and_then_its_exit_code() -> None:
    with profile_done_notices() as pid:
        assert pid == os.getpid()
        child = _child(
            f"""
            import os, sys, time
            os.kill(os.getppid(), {int(PROFILE_DONE)})
            time.sleep(0.5)
            sys.exit(5)
            """
        )
        assert wait(child, until_done=True) is None
        assert child.poll() is None  # still exiting
        assert wait(child) == 5


def test_notices_are_ignored_unless_waited_for_and_from_the_child() -> None:
    with profile_done_notices():
        os.kill(os.getpid(), PROFILE_DONE)  # not the child's: neither fatal nor an answer
        child = _child(f"import os; os.kill(os.getppid(), {int(PROFILE_DONE)})")
        assert wait(child) == 0
        child = _child("import time; time.sleep(0.3)")
        os.kill(os.getpid(), PROFILE_DONE)
        assert wait(child, until_done=True) == 0


def _session(notify_pid: int | None) -> Session:
    session = Session.__new__(Session)
    session.config = SessionConfig(notify_pid=notify_pid)
    session.pid = os.getpid()
    return session


def test_only_msprofs_own_child_tells_it(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    _session(os.getppid())._tell_launcher()
    assert sent == [(os.getppid(), PROFILE_DONE)]
    sent.clear()
    _session(os.getpid())._tell_launcher()  # msprof is not this process's parent
    _session(None)._tell_launcher()  # started without msprof
    forked = types.SimpleNamespace(config=SessionConfig(notify_pid=os.getppid()), pid=-1)
    Session._tell_launcher(forked)  # type: ignore[arg-type]  # a fork of the recorded process
    assert sent == []
