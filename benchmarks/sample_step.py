"""Where a training step's extra wall time on the npu goes, sampled in one process.

``count_instructions.py`` counts what the adapter executes; this script samples where the
real time goes. One process runs a ``bench_adapter.py`` workload's step on CPU eager and on
the npu, taking turns (a shared VM's speed drifts between processes by more than the
difference looked for), while ``perf record -e cpu-clock -k CLOCK_MONOTONIC`` samples every
thread of it. Each sample is given to the mode whose turn its timestamp falls in (warm-up
and start-up samples fall in none and are dropped), to the thread (the main thread, or any
other: OpenMP's workers) and to the shared object it ran in, and the table gives each
(thread, object)'s time in ms per step in both modes and the difference. ``--symbols N``
also lists the N functions whose time grew most.

On the ResNet sample with two threads the npu's extra time is spread over the main thread:
the adapter's own code, malloc, the Python interpreter and libtorch's dispatch code and
kernels, each a part; the worker threads' spin-waiting grows by about the main thread's
extra serial time (see RESULTS.md, "Issue 20, 2026-12-07 (late)").

    python benchmarks/sample_step.py [--workload resnet] [--threads 2] [--rounds 25]
        [--steps 20] [--frequency 4000] [--symbols 0]

Needs ``perf`` (Debian's ``linux-perf``) allowed to sample its own children (software
``cpu-clock`` events: no hardware counters are needed, so it runs in VMs without them).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: characters of a function's name kept (C++ template names run to thousands)
SYMBOL_WIDTH = 100
#: the workloads of bench_adapter.py this script can sample, by short name
WORKLOADS = {"resnet": "_resnet", "transformer": "_transformer", "mlp": "_mlp"}

#: the child: warm both modes up, then run them in turns, writing each turn's span
CHILD = """
import json, sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import torch
import bench_adapter
import msprof_py.adapter
msprof_py.adapter.install()
torch.set_num_threads(int(sys.argv[3]))
build = getattr(bench_adapter, sys.argv[2])
steps, rounds = int(sys.argv[4]), int(sys.argv[5])
output = sys.argv[7]
runs = {}
for mode in sys.argv[8].split(","):
    step = build("cpu" if mode == "cpu" else "npu")
    if mode == "recorded":
        runs[mode] = bench_adapter.recorded_steps(step, steps, output)
    else:
        runs[mode] = bench_adapter._steps(step, steps, mode == "npu")
for run in runs.values():
    run()
spans = bench_adapter.turns_with_spans(runs, rounds)
Path(sys.argv[6]).write_text(
    json.dumps({"main": threading.get_native_id(), "steps": steps, "spans": spans})
)
"""


def _parse_sample(line: str) -> tuple[int, float, str, str] | None:
    """(thread id, time in s, symbol, shared object) of a ``perf script -F
    tid,time,ip,sym,dso`` line, or None for a line that is not a sample."""
    head = line.split(None, 3)
    if len(head) < 4 or not head[0].isdigit():
        return None
    rest = head[3]
    open_at = rest.rfind("(")
    if open_at < 0:
        return None
    dso = Path(rest[open_at + 1 : -1]).name or rest[open_at + 1 : -1]
    if dso.startswith("perf-") and dso.endswith(".map"):
        dso = "[JIT code: oneDNN's kernels]"  # perf's name for code generated at run time
    symbol = rest[:open_at].strip()
    return int(head[0]), float(head[1].rstrip(":")), symbol[:SYMBOL_WIDTH], dso


def attribute(
    samples: list[tuple[int, float, str, str]],
    spans: list[tuple[str, float, float]],
    main_tid: int,
    ms_per_sample: float,
    steps_per_turn: int,
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str, str], dict[str, float]]]:
    """Each sample's time given to the mode whose span holds it, by (thread, object) and by
    (thread, object, symbol): ms per step of that mode. ``thread`` is "main" or "others"."""
    starts = [start for _, start, _ in spans]
    turns: dict[str, int] = defaultdict(int)
    for mode, _, _ in spans:
        turns[mode] += 1
    by_object: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_symbol: dict[tuple[str, str, str], dict[str, float]] = defaultdict(
        lambda: defaultdict(float)
    )
    for tid, when, symbol, dso in samples:
        at = bisect.bisect_right(starts, when) - 1
        if at < 0 or when > spans[at][2]:
            continue  # start-up, warm-up or between turns
        mode = spans[at][0]
        share = ms_per_sample / (turns[mode] * steps_per_turn)
        thread = "main" if tid == main_tid else "others"
        by_object[(thread, dso)][mode] += share
        by_symbol[(thread, dso, symbol)][mode] += share
    return by_object, by_symbol


#: what each mode's column is called
MODE_NAMES = {"cpu": "CPU eager", "npu": "npu", "recorded": "npu recorded"}


def _table(
    rows: dict, label: str, limit: int, order_by_growth: bool, modes: tuple[str, str]
) -> list[str]:
    base, other = modes

    def growth(item: tuple) -> float:
        return item[1].get(other, 0.0) - item[1].get(base, 0.0)

    def size(item: tuple) -> float:
        return max(item[1].get(other, 0.0), item[1].get(base, 0.0))

    ordered = sorted(rows.items(), key=growth if order_by_growth else size, reverse=True)
    lines = [
        f"| {label} | {MODE_NAMES[base]} (ms/step) | {MODE_NAMES[other]} (ms/step) "
        f"| {MODE_NAMES[other]} - {MODE_NAMES[base]} |",
        "|---|---:|---:|---:|",
    ]
    for key, times in ordered[:limit]:
        first, second = times.get(base, 0.0), times.get(other, 0.0)
        if max(first, second) < 0.005:
            continue
        lines.append(f"| {' / '.join(key)} | {first:.3f} | {second:.3f} | {second - first:+.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="resnet")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--rounds", type=int, default=25, help="turns of each mode")
    parser.add_argument("--steps", type=int, default=20, help="steps per turn")
    parser.add_argument("--frequency", type=int, default=4000, help="samples per second")
    parser.add_argument("--symbols", type=int, default=0, help="also the N functions grown most")
    parser.add_argument(
        "--modes",
        default="cpu,npu",
        help="the two modes compared, base first: cpu (CPU eager), npu, recorded (npu inside "
        "an in-process recording); default cpu,npu",
    )
    args = parser.parse_args(argv)
    modes = tuple(args.modes.split(","))
    if len(modes) != 2 or len(set(modes)) != 2 or not set(modes) <= set(MODE_NAMES):
        parser.error("--modes: two different modes of cpu, npu, recorded")
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("sample_step: needs perf (Debian: apt install linux-perf)")
    with tempfile.TemporaryDirectory() as folder:
        data, spans_file = Path(folder, "perf.data"), Path(folder, "spans.json")
        child = [
            sys.executable, "-c", CHILD, str(HERE), WORKLOADS[args.workload], str(args.threads),
            str(args.steps), str(args.rounds), str(spans_file), str(Path(folder, "runs")),
            ",".join(modes),
        ]  # fmt: skip
        record = [
            perf, "record", "-q", "-e", "cpu-clock", "-k", "CLOCK_MONOTONIC",
            "-F", str(args.frequency), "-o", str(data), "--", *child,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
        ran = subprocess.run(record, capture_output=True, text=True, env=env, check=False)
        if ran.returncode != 0 or not spans_file.exists():
            raise SystemExit(f"sample_step: the sampled run failed:\n{ran.stderr[-2000:]}")
        script = subprocess.run(
            [perf, "script", "-i", str(data), "-F", "tid,time,ip,sym,dso"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if script.returncode != 0:
            raise SystemExit(f"sample_step: perf script failed:\n{script.stderr[-2000:]}")
        run = json.loads(spans_file.read_text())
    samples = [s for s in map(_parse_sample, script.stdout.splitlines()) if s is not None]
    spans = [tuple(span) for span in run["spans"]]
    by_object, by_symbol = attribute(
        samples, spans, run["main"], 1e3 / args.frequency, run["steps"]
    )
    wall = defaultdict(float)
    for mode, start, end in spans:
        wall[mode] += (end - start) * 1e3 / (args.rounds * run["steps"])
    base, other = modes
    print(
        f"{args.workload}, {args.threads} thread(s), {args.rounds} turns of {args.steps} steps "
        f"each mode; wall ms/step: {MODE_NAMES[base]} {wall[base]:.3f}, {MODE_NAMES[other]} "
        f"{wall[other]:.3f} ({wall[other] / wall[base]:.3f}x); {len(samples)} samples at "
        f"{args.frequency} Hz"
    )
    print()
    print("\n".join(_table(by_object, "thread / shared object", 25, False, modes)))
    if args.symbols:
        print()
        print("\n".join(_table(by_symbol, "thread / object / function", args.symbols, True, modes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
