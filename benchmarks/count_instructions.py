"""Instructions per small npu op, counted by valgrind: a measure the machine's noise leaves alone.

Wall-clock timings on a shared 2-core VM vary by up to 2x between runs of the same code, more
than most per-op changes are worth. Valgrind's cachegrind counts the instructions a process
executes, the same from run to run. Each mode runs a loop of ``(x * 0.5).add_(1.0)`` on a
64-element npu tensor for ``--small`` and for ``--large`` ops, each in a fresh process under
cachegrind, and the difference divided by the extra ops is the cost of one op, start-up
excluded. Both runs first do the same warm-up (ops and two steps: whatever the first step
imports lazily is counted in both), every run has ``PYTHONHASHSEED=0`` (the layouts of dicts
and sets of strings otherwise change from run to run), and BLAS and OpenMP run no worker
threads (an idle OpenBLAS thread spin-waits: about 6k instructions per op that depend on
timing). The runs start outside any checkout and import msprof_py from this one, or from
``--pythonpath`` (checked: ``python -c`` puts the working directory first on ``sys.path``, so
a "before" run started from the repository measured the repository's own code). So run, the
same code gives the same count every time:

- ``plain``: the adapter alone (``msprof_py.adapter.install()``);
- ``cpu``: the same workload on CPU eager (what the npu's costs compare with);
- ``record``: an msprof recording session (``start_session``; the time-based flush is off so
  that valgrind's slowness does not add flushes: the writer still flushes what it holds at the
  end, and that is counted).

    python benchmarks/count_instructions.py [--modes plain,record] [--small 1000] [--large 5000]
        [--pythonpath DIR]   # another checkout's msprof_py, for a before/after in one run
        [--hash-seed N]      # PYTHONHASHSEED (default 0)
        [--workload step]    # a small MLP's training steps instead (autograd, optimizer);
                             # --small and --large then count steps (e.g. 20 and 120)
        [--workload resnet]  # the ResNet sample's steps (convolutions, private formats;
                             # e.g. --small 2 --large 6)
        [--workload amp]     # those steps under float16 autocast and a GradScaler on the npu
                             # (numerics "fast"), against CPU float32
        [--caches]           # also first-level data and second-level misses per op or step,
                             # in cachegrind's model of this machine's caches
        [--region --steps N] # a step workload's N steps only, in one process per mode:
                             # callgrind collects just while they run (switched on and off
                             # around them by a client request), so nothing done once per
                             # run (imports, the recording's first chunk) counts

``--region`` needs valgrind's ``callgrind.h`` (Debian's valgrind package has it) and a C
compiler: a four-line helper is built into a temporary folder for the runs.

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
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOOP = """
import ctypes, os, sys, tempfile
import torch
mode, n = sys.argv[1], int(sys.argv[2])
# --region: callgrind collects only between the two calls (the counted steps)
_helper = os.environ.get("MSPROF_COUNT_REGION")
toggle = ctypes.CDLL(_helper).msprof_count_toggle if _helper else (lambda: None)
device = "cpu" if mode == "cpu" else "npu"  # cpu: the same workload on CPU eager
if mode == "cpu":
    pass
elif mode == "record":
    import msprof_py.profile.writer as writer
    writer.FLUSH_INTERVAL_S = float("inf")
    from msprof_py.collectors.session import SessionConfig, start_session
    start_session(SessionConfig(output=tempfile.mkdtemp(), export=False, deterministic=True))
else:
    import msprof_py.adapter
    msprof_py.adapter.install(numerics="fast" if sys.argv[3] == "amp" else "cpu")
import msprof_py
torch.set_num_threads(1)
try:
    from msprof_py.device import native as device_native
    core = device_native.status()
except ImportError:
    core = "Python (this checkout has no compiled device cores)"
sys.stderr.write(f"msprof_py: {msprof_py.__file__}; engine core: {core}\\n")
if sys.argv[3] in ("resnet", "amp"):  # the ResNet sample's training step: convolutions,
    # formats; amp: on the npu under float16 autocast with a GradScaler, numerics "fast" (CPU:
    # float32, as bench_adapter.py's AMP CNN compares)
    sys.path.insert(0, sys.argv[4])
    import train_resnet
    model = train_resnet.build(0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = (t.to(device) for t in train_resnet.synthetic_batch(8))
    amp = sys.argv[3] == "amp" and device == "npu"
    scaler = torch.amp.GradScaler(device, enabled=amp)
    for i in range(3 + n):  # three warm-up steps in both runs
        if i == 3:
            toggle()
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        msprof_py.step()
    toggle()
    os._exit(0)
if sys.argv[3] == "step":  # a small MLP's training step: autograd, the optimizer
    model = torch.nn.Sequential(
        *[m for _ in range(4) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())]
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(16, 32).to(device)
    for i in range(5 + n):  # five warm-up steps in both runs
        if i == 5:
            toggle()
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        msprof_py.step()
    toggle()
    os._exit(0)
x = torch.randn(64, device=device)
for warm_up in range(2):  # what the first ops and steps import or build, in both runs
    for i in range(200):
        x = (x * 0.5).add_(1.0)
    msprof_py.step()
for i in range(n // 2):
    x = (x * 0.5).add_(1.0)
    if i % 1000 == 999:
        msprof_py.step()
os._exit(0)
"""

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
_COLLECTED = re.compile(r"Collected\s*:\s*([\d,]+)")
#: the --region helper: callgrind's client request switching collection on or off
REGION_HELPER = """#include <valgrind/callgrind.h>
void msprof_count_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""
_MISSES = {"D1": re.compile(r"D1\s+misses:\s+([\d,]+)"), "LL": re.compile(r"LL misses:\s+([\d,]+)")}
_IMPORTED = re.compile(r"msprof_py: (\S+)/msprof_py/__init__.py; engine core: (.*)")
#: this checkout (what runs without ``--pythonpath``)
ROOT = Path(__file__).resolve().parent.parent


def cache_geometry() -> list[str]:
    """Cachegrind's options modelling this machine's first-level data cache and its
    second-level cache as the last level (``--D1``, ``--LL``: size, associativity, line), as
    ``getconf`` reports them (48 KiB, 12-way and 1 MiB, 16-way on this project's VMs); a level
    it does not report gets 32 KiB, 8-way or 1 MiB, 16-way, with 64-byte lines."""

    def value(name: str) -> int:
        try:
            out = subprocess.run(["getconf", name], capture_output=True, text=True, check=False)
            return int(out.stdout.strip() or 0)
        except (OSError, ValueError):
            return 0

    def level(name: str, fallback: tuple[int, int, int]) -> str:
        found = tuple(value(f"{name}_{part}") for part in ("SIZE", "ASSOC", "LINESIZE"))
        return ",".join(str(v) for v in (found if all(v > 0 for v in found) else fallback))

    return [
        f"--D1={level('LEVEL1_DCACHE', (32768, 8, 64))}",
        f"--LL={level('LEVEL2_CACHE', (1048576, 16, 64))}",
    ]


def count(
    mode: str,
    ops: int,
    pythonpath: str | None,
    hash_seed: int = 0,
    workload: str = "ops",
    caches: bool = False,
    region: Path | None = None,
) -> dict[str, int]:
    """Instructions (``"I"``) of one process running ``ops`` small ops (or training steps,
    workload ``step``) in ``mode``; with ``caches``, also its first-level data misses and
    last-level misses (``"D1"``, ``"LL"``) in cachegrind's model of this machine's caches;
    with ``region`` (the built :data:`REGION_HELPER`), only those of the counted steps
    (callgrind)."""
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = str(hash_seed)  # the same dict and set layouts in every run
    # no BLAS or OpenMP worker threads: their spin-waits count instructions by timing
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    checkout = Path(pythonpath or ROOT).resolve()
    env["PYTHONPATH"] = str(checkout)
    if region is not None:
        env["MSPROF_COUNT_REGION"] = str(region)
    tool = (
        ["--tool=callgrind", "--collect-atstart=no", "--callgrind-out-file=/dev/null"]
        if region is not None
        else [
            "--tool=cachegrind", f"--cache-sim={'yes' if caches else 'no'}",
            *(cache_geometry() if caches else []), "--cachegrind-out-file=/dev/null",
        ]
    )  # fmt: skip
    # run outside any checkout: ``python -c`` puts the working directory first on sys.path,
    # which would import the msprof_py found there instead of the one asked for
    out = subprocess.run(
        [
            "valgrind", *tool, sys.executable,
            "-c", LOOP, mode, str(ops), workload, str(checkout / "sample_runs"),
        ],
        capture_output=True, text=True, env=env, check=False, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"count_instructions: the {mode} run failed:\n{out.stderr[-2000:]}")
    imported = _IMPORTED.search(out.stderr)
    if imported is None or Path(imported.group(1)) != checkout:
        raise SystemExit(f"count_instructions: the run did not import msprof_py from {checkout}")
    found = (_COLLECTED if region is not None else _REFS).search(out.stderr)
    if found is None:
        raise SystemExit(f"count_instructions: no instruction count in valgrind's output ({mode})")
    print(f"{mode}, {ops} ops: {checkout} ({imported.group(2)})", file=sys.stderr)
    counted = {"I": int(found.group(1).replace(",", ""))}
    for event, pattern in _MISSES.items() if caches else ():
        missed = pattern.search(out.stderr)
        if missed is None:
            raise SystemExit(f"count_instructions: no {event} misses in valgrind's output")
        counted[event] = int(missed.group(1).replace(",", ""))
    return counted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--modes", default="plain,record", help="plain, record (both npu), cpu (CPU eager)"
    )
    parser.add_argument("--small", type=int, default=1000, help="ops in the short run")
    parser.add_argument("--large", type=int, default=5000, help="ops in the long run")
    parser.add_argument("--pythonpath", help="PYTHONPATH for the runs (another checkout)")
    parser.add_argument("--hash-seed", type=int, default=0, help="PYTHONHASHSEED of the runs")
    parser.add_argument(
        "--workload",
        choices=("ops", "step", "resnet", "amp"),
        default="ops",
        help="the small-op loop (per op), a small MLP's training steps, or the ResNet "
        "sample's (per step; --small and --large count steps)",
    )
    parser.add_argument(
        "--caches",
        action="store_true",
        help="also count first-level data and second-level cache misses (cachegrind's cache "
        "model with this machine's geometry; several times slower)",
    )
    parser.add_argument(
        "--region",
        action="store_true",
        help="a step workload's --steps steps only, one process per mode (callgrind collects "
        "just while they run)",
    )
    parser.add_argument("--steps", type=int, default=3, help="--region: the steps counted")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("count_instructions: valgrind is not installed (apt-get install valgrind)")
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.region:
        if args.workload == "ops" or args.caches or args.steps < 1:
            parser.error("--region counts a step workload's --steps (>= 1) steps, no caches")
        return region_counts(modes, args)
    if args.large <= args.small or any(m not in ("plain", "record", "cpu") for m in modes):
        parser.error("--large must exceed --small; modes are plain, record and cpu")
    jobs = [(m, n) for m in modes for n in (args.small, args.large)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(
            zip(
                jobs,
                pool.map(
                    lambda j: count(
                        *j, args.pythonpath, args.hash_seed, args.workload, args.caches
                    ),
                    jobs,
                ),
                strict=True,
            )
        )
    unit = "op" if args.workload == "ops" else "step"
    misses = (
        f" D1 misses per {unit} | L2 misses per {unit} ({' '.join(cache_geometry())}) |"
        if args.caches
        else ""
    )
    print(f"| mode | instructions per {unit} |{misses} process, small run | process, large run |")
    print("|---|---:|" + ("---:|---:|" if args.caches else "") + "---:|---:|")
    for m in modes:
        small, large = counts[(m, args.small)], counts[(m, args.large)]
        per = {e: (large[e] - small[e]) / (args.large - args.small) for e in small}
        cells = f" {per['D1']:,.0f} | {per['LL']:,.0f} |" if args.caches else ""
        print(f"| {m} | {per['I']:,.0f} |{cells} {small['I']:,} | {large['I']:,} |")
    return 0


def build_region_helper(folder: Path) -> Path:
    """Compile :data:`REGION_HELPER` into ``folder``; the library's path. Exits with the
    compiler's first error (valgrind's ``callgrind.h`` missing, no compiler)."""
    source, library = folder / "region.c", folder / "region.so"
    source.write_text(REGION_HELPER, encoding="utf-8")
    compiler = os.environ.get("CC") or "cc"
    try:
        done = subprocess.run(
            [compiler, "-O1", "-shared", "-fPIC", str(source), "-o", str(library)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    except OSError as exc:
        raise SystemExit(f"count_instructions: --region needs a C compiler ({exc})") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["the compiler failed"])[0]
        raise SystemExit(f"count_instructions: --region could not build its helper: {first}")
    return library


def region_counts(modes: list[str], args: argparse.Namespace) -> int:
    """``--region``: each mode's counted steps in one process; instructions per step."""
    with tempfile.TemporaryDirectory(prefix="count_region_") as folder:
        helper = build_region_helper(Path(folder))
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = list(
                pool.map(
                    lambda m: count(
                        m, args.steps, args.pythonpath, args.hash_seed, args.workload,
                        region=helper,
                    ),
                    modes,
                )
            )  # fmt: skip
    print(f"| mode | instructions per step ({args.steps} steps counted) | over the first mode |")
    print("|---|---:|---:|")
    base = counts[0]["I"] / args.steps
    for mode, counted in zip(modes, counts, strict=True):
        per = counted["I"] / args.steps
        print(f"| {mode} | {per:,.0f} | {per / base:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
