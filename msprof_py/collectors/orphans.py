"""Stopping the script's own children when msprof died under it.

The launcher makes the kernel send the script SIGTERM when msprof dies (``PR_SET_PDEATHSIG``),
but that reaches the script only: processes the script started (a DataLoader worker, a
``subprocess`` it runs) would run on as orphans. When the script's session sees that SIGTERM
while its parent is gone, it passes SIGTERM on to its direct children, as a launcher would.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

PROC = Path("/proc")


def child_pids(parent: int, proc: Path = PROC) -> list[int]:
    """The pids whose parent is ``parent`` (from ``/proc/*/stat``; empty where there is none)."""
    children = []
    with contextlib.suppress(OSError):
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
            except OSError:
                continue  # ended meanwhile, or not ours to read
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            fields = stat.rpartition(")")[2].split()
            if len(fields) > 1 and fields[1] == str(parent):
                children.append(int(entry.name))
    return children


def orphaned(launcher_pid: int) -> bool:
    """True when the process that started this one (msprof) is no longer its parent."""
    return launcher_pid > 1 and os.getppid() != launcher_pid


def terminate_children(signum: int = signal.SIGTERM) -> list[int]:
    """Send ``signum`` to every direct child of this process; return their pids."""
    pids = child_pids(os.getpid())
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
    return pids
