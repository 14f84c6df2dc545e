"""How long ``msprof analyze`` takes, and how much memory, on profiles of up to 1M device tasks.

A real profile is recorded once (the ResNet sample under msprof, 3 steps); its steady-state step
(tasks, host events, memory events) is then replicated with shifted times and ids until the
profile holds the requested number of device tasks, and written as a raw profile. Each size is
analysed in a fresh process that runs only ``msprof_py.analyze(path)`` (every table and every
rule) and reports its wall time, the part of it spent loading, the in-memory size of the
tables as loaded for the analysis and the process's peak resident memory (VmHWM: a child's
ru_maxrss on Linux starts at its parent's resident size, which holds the replicated profile). As a
baseline for the machine, another fresh process loads the profile and times one ``groupby``
over the tasks (the least work any per-op analysis does).

    python benchmarks/bench_analyze.py [--tasks 100000 300000 1000000] [--profile DIR]
                                       [--repeat 3] [--write]  # the table into RESULTS.md

``--write`` replaces the head of the "Analysis (`msprof analyze`) on large profiles" section
of RESULTS.md (up to its first ``###`` subsection). ``benchmarks/bench_hta.py`` runs the same
profiles side by side with Holistic Trace Analysis (on a Kineto trace of the same events).
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

from peak import PEAK_MIB  # noqa: E402

from msprof_py.profile import load  # noqa: E402
from msprof_py.profile.schema import META_FILE, TABLES  # noqa: E402

#: id columns per table, by the family of ids they hold: each family is shifted by its own span
#: per copy, so replicated ids stay as dense as recorded ones (task ids index lookup tables)
ID_COLUMNS = {
    "tasks": {"task_id": "task", "host_op_id": "event"},
    "host_events": {"event_id": "event", "task_id": "task", "parent_id": "event"},
    "memory": {},
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
    ids: dict[str, list[np.ndarray]] = {"task": [], "event": []}
    for name, df in template.items():
        for col, family in ID_COLUMNS[name].items():
            values = df[col].to_numpy()
            ids[family].append(values[values >= 0])
    all_ids = {f: np.concatenate(v) for f, v in ids.items()}
    first = {f: int(v.min()) if v.size else 0 for f, v in all_ids.items()}
    span = {f: int(v.max()) - first[f] + 1 if v.size else 1 for f, v in all_ids.items()}
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
                family = ID_COLUMNS[name][col]
                shift = np.repeat(k * span[family], n) - first[family]
                tiled = np.where(tiled >= 0, tiled + shift, tiled)
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
            "optimizer_id": np.zeros(len(k), dtype=np.int32),
        }
    )
    pq.write_table(
        pa.Table.from_pandas(steps_df, schema=TABLES["steps"].schema, preserve_index=False),
        out / "steps-00000.parquet",
    )
    meta = dict(profile.meta[rank])
    for key in ("parts", "checksum", "rows"):  # the recorded parts: not these
        meta.pop(key, None)
    (out / META_FILE).write_text(json.dumps(meta, default=str), encoding="utf-8")
    return out


CHILD = (
    PEAK_MIB
    + r"""
import json, resource, sys, time
from msprof_py.analyzers import api
path = sys.argv[1]
seen = {}
resolve = api.resolve
def timed_resolve(*a, **k):  # the load inside analyze(): its time and the tables' size
    t = time.perf_counter(); p = resolve(*a, **k); seen["load_s"] = time.perf_counter() - t
    seen["tables_mib"] = sum(df.memory_usage(deep=True).sum() for df in p.tables.values()) / 2**20
    seen["host_events"] = len(p.host_events)
    return p
api.resolve = timed_resolve
t0 = time.perf_counter(); a = api.analyze(path); total = time.perf_counter() - t0
print(json.dumps(seen | {"tasks": a.profile["tasks"], "analyze_s": total - seen["load_s"],
    "total_s": total, "rss_peak_mib": peak_mib(),
    "fired": [f.rule for f in a.fired()]}))
"""
)

BASELINE = r"""
import json, sys, time
from msprof_py.profile import load
p = load(sys.argv[1])
t0 = time.perf_counter(); p.tasks.groupby(["op_type", "task_type"])["end_ns"].sum()
print(json.dumps({"baseline_s": time.perf_counter() - t0}))
"""


def _run(code: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(path: Path, repeat: int = 1) -> dict:
    """``analyze(path)`` in ``repeat`` fresh processes (the medians of the times and of the
    peak memory; ``rss_runs_mib`` all peaks), and the groupby baseline in another."""
    runs = [_run(CHILD, path) for _ in range(repeat)]
    out = dict(runs[0])
    for key in ("load_s", "analyze_s", "total_s", "rss_peak_mib"):
        out[key] = float(np.median([r[key] for r in runs]))
    out["rss_runs_mib"] = [round(r["rss_peak_mib"]) for r in runs]
    return out | _run(BASELINE, path)


def table(rows: list[dict]) -> str:
    header = [
        "device tasks",
        "host events",
        "load (s)",
        "analyze (s)",
        "load + analyze (s)",
        "tasks/s analysed",
        "groupby baseline (s)",
        "analyze / baseline",
        "tables in memory (MiB)",
        "peak RSS (MiB)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for r in rows:
        lines.append(
            f"| {r['tasks']:,} | {r['host_events']:,} | {r['load_s']:.2f} | {r['analyze_s']:.2f} "
            f"| {r['total_s']:.2f} | {r['tasks'] / r['analyze_s']:,.0f} | {r['baseline_s']:.3f} "
            f"| {r['analyze_s'] / r['baseline_s']:.0f} | {r['tables_mib']:.0f} "
            f"| {r['rss_peak_mib']:.0f} |"
        )
    return "\n".join(lines)


HEADING = "## Analysis (`msprof analyze`) on large profiles"


def write_section(head: str, results: Path = ROOT / "benchmarks" / "RESULTS.md") -> None:
    """Replace the head of the analysis section (up to its first ``###``) with ``head``; add
    the section at the end when there is none."""
    text = results.read_text(encoding="utf-8")
    start = text.find(HEADING)
    if start < 0:
        results.write_text(text.rstrip("\n") + "\n\n" + head, encoding="utf-8")
        return
    rest = text[start + len(HEADING) :]
    ends = [i for i in (rest.find("\n### "), rest.find("\n## ")) if i >= 0]
    end = start + len(HEADING) + (min(ends) + 1 if ends else len(rest))
    results.write_text(text[:start] + head + ("\n" if ends else "") + text[end:], "utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument(
        "--profile", type=Path, help="a recorded run to replicate (default: record)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="analyse each size this many times (medians)"
    )
    parser.add_argument("--write", action="store_true", help="the table into RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = args.profile or record(Path(tmp) / "source")
        rows = []
        for n in args.tasks:
            path = replicate(source, n, Path(tmp) / f"p{n}")
            rows.append(measure(path, args.repeat))
            print(
                f"{rows[-1]['tasks']:>9,} tasks: analyze {rows[-1]['total_s']:.2f} s, "
                f"peak RSS {rows[-1]['rss_runs_mib']} MiB, fired {rows[-1]['fired']}",
                flush=True,
            )
    text = table(rows)
    print(text)
    if args.write:
        write_section(
            f"{HEADING}\n\n"
            f"Command: `.venv/bin/python benchmarks/bench_analyze.py --write` (tasks "
            f"{', '.join(str(n) for n in args.tasks)}; the ResNet sample's steady-state step "
            f"replicated; each size analysed {args.repeat} times, each time in a fresh process "
            "running only `analyze(path)` with every table and all rules: the medians; `load` "
            "is the part of it spent loading the profile).\n\n"
            f"Machine: {platform.machine()} {platform.system()}, Python "
            f"{platform.python_version()}, pandas {pd.__version__}, {date.today()}.\n\n"
            f"{text}\n\n"
            "Reading: analysis time and memory grow linearly with the number of tasks (all\n"
            "per-row work is vectorised; the only Python loops run per distinct string, per\n"
            "pattern match, per rule and per step-and-direction group of small copies).\n"
            "`groupby baseline` is one pandas groupby over the tasks in another process, to\n"
            "compare machines. `peak RSS` is the whole process's (interpreter and libraries\n"
            "included, about 110 MiB).\n"
        )


if __name__ == "__main__":
    main()
