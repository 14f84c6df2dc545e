"""Instructions per small npu op, counted by valgrind: a measure the machine's noise leaves alone.

Wall-clock timings on a shared 2-core VM vary by up to 2x between runs of the same code, more
than most per-op changes are worth. Valgrind's cachegrind counts the instructions a process
executes, the same from run to run. Each mode runs a loop of ``(x * 0.5).add_(1.0)`` on a
64-element npu tensor for ``--small`` and for ``--large`` ops, each in a fresh process under
cachegrind, and the difference divided by the extra ops is the cost of one op, start-up
excluded:

- ``plain``: the adapter alone (``msprof_py.adapter.install()``);
- ``record``: an msprof recording session (``start_session``; the time-based flush is off so
  that valgrind's slowness does not add flushes: the writer still flushes what it holds at the
  end, and that is counted).

    python benchmarks/count_instructions.py [--modes plain,record] [--small 1000] [--large 5000]
        [--pythonpath DIR]   # another checkout's msprof_py, for a before/after in one run

Needs ``valgrind`` (Debian's package); each process takes one to three minutes under it, and
two run at once.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

LOOP = """
import os, sys, tempfile
import torch
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "record":
    import msprof_py.profile.writer as writer
    writer.FLUSH_INTERVAL_S = float("inf")
    from msprof_py.collectors.session import SessionConfig, start_session
    start_session(SessionConfig(output=tempfile.mkdtemp(), export=False, deterministic=True))
else:
    import msprof_py.adapter
    msprof_py.adapter.install()
import msprof_py
torch.set_num_threads(1)
x = torch.randn(64, device="npu")
for i in range(200 + n // 2):
    x = (x * 0.5).add_(1.0)
    if i % 1000 == 999:
        msprof_py.step()
os._exit(0)
"""

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def count(mode: str, ops: int, pythonpath: str | None) -> int:
    """Instructions of one process running ``ops`` small ops in ``mode``."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [
            "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
            sys.executable, "-c", LOOP, mode, str(ops),
        ],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    found = _REFS.search(out.stderr)
    if found is None:
        raise SystemExit(f"count_instructions: no instruction count in valgrind's output ({mode})")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="plain,record", help="plain, record or both")
    parser.add_argument("--small", type=int, default=1000, help="ops in the short run")
    parser.add_argument("--large", type=int, default=5000, help="ops in the long run")
    parser.add_argument("--pythonpath", help="PYTHONPATH for the runs (another checkout)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("count_instructions: valgrind is not installed (apt-get install valgrind)")
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.large <= args.small or any(m not in ("plain", "record") for m in modes):
        parser.error("--large must exceed --small; modes are plain and record")
    jobs = [(m, n) for m in modes for n in (args.small, args.large)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: count(*j, args.pythonpath), jobs), strict=True))
    print("| mode | instructions per op | process, small run | process, large run |")
    print("|---|---:|---:|---:|")
    for m in modes:
        small, large = counts[(m, args.small)], counts[(m, args.large)]
        per_op = (large - small) / (args.large - args.small)
        print(f"| {m} | {per_op:,.0f} | {small:,} | {large:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
