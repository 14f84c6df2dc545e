"""Running the real msprof-analyze (PyPI ``msprof-analyze``) on our exports, for the tests.

It is run as ``python -c`` in a subprocess (it warns when run as root and writes files into its
working directory); the advisor's ``--agent`` output is a JSON report after some log lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = (
    "import sys; from msprof_analyze.cli.entrance import msprof_analyze_cli; "
    "sys.argv[0] = 'msprof-analyze'; sys.exit(msprof_analyze_cli())"
)


def msprof_analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``msprof-analyze ARGS`` in ``cwd``; fails the test on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-c", CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def advisor_report(run: Path, cwd: Path) -> dict[str, Any]:
    """``msprof-analyze advisor all -d RUN``'s JSON report."""
    proc = msprof_analyze("advisor", "all", "-d", str(run), "-l", "en", "--agent", cwd=cwd)
    return json.loads(proc.stdout[proc.stdout.index('{"status"') :])


def advisor_problems(run: Path, cwd: Path) -> dict[str, list]:
    """The advisor's problems: title -> its row (title, description, ...)."""
    report = advisor_report(run, cwd)
    assert report["status"] == "success", report
    return {row[0]: row for row in report["message"]["problems"]["data"]}
