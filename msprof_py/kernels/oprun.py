"""Run a Python script in this process with the op profiler on (what ``msprof op`` does).

``run_script(["python", "train.py", "--lr", "0.1"], ...)``: the leading interpreter word is
optional; the script runs as ``__main__`` with ``sys.argv`` set to the script and its
arguments and its folder first on ``sys.path``. A missing script, a script that is not a
``.py`` file, a script that raises, no launch at all or no launch of the asked name are
:class:`OpProfError` (one line).
"""

from __future__ import annotations

import datetime as dt
import os
import runpy
import sys
from pathlib import Path

from msprof_py.kernels.opprof import OpProfError, OpProfiler

_PYTHONS = ("python", "python3")


def script_of(application: list[str]) -> tuple[Path, list[str]]:
    """The script and its argv from ``[python] script.py args...``."""
    args = list(application)
    if args and (Path(args[0]).name.startswith(_PYTHONS) or args[0] == sys.executable):
        args = args[1:]
    if not args:
        raise OpProfError("no application given: msprof op [options] python script.py [args]")
    script = Path(args[0])
    if script.suffix != ".py":
        raise OpProfError(f"msprof op runs a Python script (python script.py ...), got {args[0]}")
    if not script.is_file():
        raise OpProfError(f"no such script: {args[0]}")
    return script, args


def run_script(
    application: list[str],
    *,
    kernel_name: str | None = None,
    launch_count: int = 1,
) -> OpProfiler:
    """Run the script with an :class:`OpProfiler` active; returns it (profiles checked)."""
    script, argv = script_of(application)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(script.resolve().parent))
    prof = OpProfiler(kernel_name=kernel_name, launch_count=launch_count)
    try:
        with prof:
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise OpProfError(f"{script} exited with status {exc.code}") from None
    except OpProfError:
        raise
    except Exception as exc:  # the script's own error, as one line
        text = " ".join(str(exc).split())
        raise OpProfError(f"{script} failed: {type(exc).__name__}: {text}") from None
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    prof.check(str(script))
    return prof


def run_folder(output: str | Path) -> Path:
    """A fresh ``OPPROF_<time>_<pid>`` folder name under ``output`` (not created)."""
    stamp = dt.datetime.now().strftime("%Y%m%d%H%M%S")
    return Path(output) / f"OPPROF_{stamp}_{os.getpid()}"
