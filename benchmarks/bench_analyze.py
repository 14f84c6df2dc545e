"""How long ``msprof analyze`` takes, and how much memory, on profiles of up to 1M device tasks.

A real profile is recorded once (the ResNet sample under msprof, 3 steps); its steady-state step
(tasks, host events, memory events) is then replicated with shifted times and ids until the
profile holds the requested number of device tasks, and written as a raw profile. Each size is
analysed in a fresh process, which reports the wall time of ``msprof_py.load``, of
``analyze()`` (every table and every rule) and its peak resident memory (ru_maxrss), next to
the in-memory size of the loaded tables. As a baseline for the machine, the same process times
one ``groupby`` over the tasks (the least work any per-op analysis does).

    python benchmarks/bench_analyze.py [--tasks 100000 300000 1000000] [--profile DIR]
                                       [--write]   # append the table to benchmarks/RESULTS.md

Holistic Trace Analysis is not compared: it reads Kineto (CUDA) Chrome traces only, and this
project exports no Kineto trace of the simulated NPU to feed it.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msprof_py.profile import load  # noqa: E402
from msprof_py.profile.schema import META_FILE, TABLES  # noqa: E402

ID_COLUMNS = {
    "tasks": ["task_id", "host_op_id"],
    "host_events": ["event_id", "task_id", "parent_id"],
    "memory": [],
}
TIME_COLUMNS = {
    "tasks": ["launch_ns", "start_ns", "end_ns"],
    "host_events": ["start_ns", "end_ns"],
    "memory": ["time_ns"],
}


def record(folder: Path) -> Path:
    """Record the ResNet sample (3 steps) under msprof; the run folder."""
    cmd = [
        sys.executable,
        "-m",
        "msprof_py.cli_entry",
        f"--output={folder}",
        "python",
        str(ROOT / "sample_runs" / "train_resnet.py"),
        "--steps",
        "3",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    (run,) = [p for p in folder.iterdir() if p.is_dir()]  # msprof_<time>
    return run


def replicate(source: Path, tasks: int, out: Path) -> Path:
    """A raw profile of at least ``tasks`` device tasks: step 1 of ``source`` repeated."""
    profile = load(source)
    rank = profile.ranks[0]
    steps = profile.steps
    one = steps[steps["step"] == 1].iloc[0]
    period = int(one["end_ns"] - one["start_ns"]) * 2  # room for the device to lag
    frames = {name: profile.tables[name] for name in ("tasks", "host_events", "memory")}
    template = {name: df[df["step"] == 1].drop(columns="rank") for name, df in frames.items()}
    copies = -(-tasks // len(template["tasks"]))
    span = {
        name: int(df[cols].max().max()) + 1 if cols and len(df) else 0
        for name, df in frames.items()
        for cols in [ID_COLUMNS[name]]
    }
    span = max(span.values())
    out.mkdir(parents=True)
    k = np.arange(copies, dtype=np.int64)
    for name, df in template.items():
        n = len(df)
        table = {}
        for col in df.columns:
            values = df[col].to_numpy()
            tiled = np.tile(values, copies)
            if col in TIME_COLUMNS[name]:
                tiled = tiled + np.repeat(k * period, n) - int(one["start_ns"])
            elif col in ID_COLUMNS[name]:
                tiled = np.where(tiled >= 0, tiled + np.repeat(k * span, n), tiled)
            elif col == "step":
                tiled = np.repeat(k, n).astype(values.dtype)
            table[col] = tiled
        arrow = pa.Table.from_pandas(
            pd.DataFrame(table), schema=TABLES[name].schema, preserve_index=False
        )
        pq.write_table(arrow, out / f"{name}-00000.parquet")
    steps_df = pd.DataFrame(
        {
            "step": k.astype(np.int32),
            "start_ns": k * period,
            "end_ns": (k + 1) * period,
            "source": "optimizer",
        }
    )
    pq.write_table(
        pa.Table.from_pandas(steps_df, schema=TABLES["steps"].schema, preserve_index=False),
        out / "steps-00000.parquet",
    )
    meta = dict(profile.meta[rank])
    (out / META_FILE).write_text(json.dumps(meta, default=str), encoding="utf-8")
    return out


CHILD = r"""
import gc, json, resource, sys, time
from msprof_py.profile import load
from msprof_py.analyzers import analyze
path = sys.argv[1]
t0 = time.perf_counter(); p = load(path); t_load = time.perf_counter() - t0
rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mem = sum(df.memory_usage(deep=True).sum() for df in p.tables.values())
t0 = time.perf_counter(); p.tasks.groupby(["op_type", "task_type"])["end_ns"].sum()
t_base = time.perf_counter() - t0
n_tasks, n_host = len(p.tasks), len(p.host_events)
del p; gc.collect()
t0 = time.perf_counter(); a = analyze(path); t_analyze = time.perf_counter() - t0 - t_load
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"tasks": n_tasks, "host_events": n_host, "load_s": t_load,
    "analyze_s": t_analyze, "baseline_s": t_base, "tables_mib": mem / 2**20,
    "rss_loaded_mib": rss_loaded / 1024, "rss_peak_mib": rss / 1024,
    "fired": [f.rule for f in a.findings if f.status == "fired"]}))
"""


def measure(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    header = [
        "device tasks",
        "host events",
        "load (s)",
        "analyze (s)",
        "tasks/s analysed",
        "groupby baseline (s)",
        "analyze / baseline",
        "tables in memory (MiB)",
        "peak RSS (MiB)",
        "RSS above the first load (MiB)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for r in rows:
        lines.append(
            f"| {r['tasks']:,} | {r['host_events']:,} | {r['load_s']:.2f} | {r['analyze_s']:.2f} "
            f"| {r['tasks'] / r['analyze_s']:,.0f} | {r['baseline_s']:.3f} "
            f"| {r['analyze_s'] / r['baseline_s']:.0f} | {r['tables_mib']:.0f} "
            f"| {r['rss_peak_mib']:.0f} | {r['rss_peak_mib'] - r['rss_loaded_mib']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument(
        "--profile", type=Path, help="a recorded run to replicate (default: record)"
    )
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = args.profile or record(Path(tmp) / "source")
        rows = []
        for n in args.tasks:
            path = replicate(source, n, Path(tmp) / f"p{n}")
            rows.append(measure(path))
            print(
                f"{rows[-1]['tasks']:>9,} tasks: analyze {rows[-1]['analyze_s']:.2f} s, "
                f"peak RSS {rows[-1]['rss_peak_mib']:.0f} MiB, fired {rows[-1]['fired']}",
                flush=True,
            )
    text = table(rows)
    print(text)
    if args.write:
        section = (
            "\n## Analysis (`msprof analyze`) on large profiles\n\n"
            f"Command: `.venv/bin/python benchmarks/bench_analyze.py --write` (tasks "
            f"{', '.join(str(n) for n in args.tasks)}; the ResNet sample's steady-state step "
            "replicated; each size in a fresh process: `load()` timed alone, then "
            "`analyze(path)` with every table and all rules, its second load subtracted).\n\n"
            f"Machine: {platform.machine()} {platform.system()}, Python "
            f"{platform.python_version()}, pandas {pd.__version__}, {date.today()}.\n\n"
            f"{text}\n\n"
            "Reading: analysis time and memory grow linearly with the number of tasks (all\n"
            "per-row work is vectorised; the only Python loops run per distinct shape string,\n"
            "per pattern match, per rule and per step-and-direction group of small copies).\n"
            "`groupby baseline` is one pandas groupby over the tasks in the same process, to\n"
            "compare machines. Holistic Trace Analysis was not compared: it reads Kineto (CUDA)\n"
            "traces, and no Kineto export of the simulated NPU exists to feed it.\n"
        )
        with (ROOT / "benchmarks" / "RESULTS.md").open("a", encoding="utf-8") as fh:
            fh.write(section)


if __name__ == "__main__":
    main()
