"""``msprof analyze`` next to Holistic Trace Analysis (HTA) on the same events, 100k to 1M tasks.

The profile of ``bench_analyze.py`` (the ResNet sample's steady-state step replicated to the
requested number of device tasks) is analysed two ways, each size in fresh processes:

* **msprof-py**: ``msprof_py.analyze(path)`` on the stored profile (Parquet): load, every
  table and every rule;
* **HTA**: the same events written as a Kineto (PyTorch profiler) trace by
  ``benchmarks/kineto_trace.py``, then ``TraceAnalysis(trace_dir=...)`` (parse and prepare)
  and its analyses that apply to a single-rank trace: ``get_gpu_kernel_breakdown``,
  ``get_temporal_breakdown``, ``get_idle_time_breakdown``, ``get_comm_comp_overlap``,
  ``get_cuda_kernel_launch_stats``, ``get_queue_length_summary``, ``get_memory_bw_summary``.

Each side reports wall time and peak resident memory (VmHWM of its process: a child's
ru_maxrss starts at its parent's resident size on Linux). HTA runs on
two forms of the trace: with a ``ProfilerStep#<n>`` annotation per step (as the PyTorch
profiler writes it; HTA assigns every CPU event to its step in a Python loop over the steps,
so its time grows with events x steps: only sizes up to ``--steps-upto``) and without them
(HTA's fastest path: no per-step attribution).

HTA is not a dependency of msprof-py: install the ``bench`` extra into a separate
environment and point ``--hta-python`` at it::

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install -c constraints.txt 'holistictraceanalysis==0.5.*' 'pandas<3'
    python benchmarks/bench_hta.py --hta-python /tmp/hta-venv/bin/python \\
        [--tasks 100000 300000 1000000] [--steps-upto 100000] [--profile DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_analyze import record, replicate  # noqa: E402
from kineto_trace import write_kineto  # noqa: E402
from peak import PEAK_MIB  # noqa: E402

MSPROF_CHILD = (
    PEAK_MIB
    + r"""
import json, resource, sys, time
t0 = time.perf_counter()
from msprof_py.analyzers import api
t_import = time.perf_counter() - t0
loaded = {}
resolve = api.resolve
def timed_resolve(*a, **k):
    t = time.perf_counter(); p = resolve(*a, **k); loaded["s"] = time.perf_counter() - t
    return p
api.resolve = timed_resolve
t0 = time.perf_counter(); a = api.analyze(sys.argv[1]); total = time.perf_counter() - t0
print(json.dumps({"import_s": t_import, "load_s": loaded["s"], "total_s": total,
    "rss_mib": peak_mib(),
    "tasks": a.profile["tasks"], "fired": [f.rule for f in a.fired()]}))
"""
)

HTA_CHILD = (
    PEAK_MIB
    + r"""
import json, logging, resource, sys, time, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t_import = time.perf_counter() - t0
logging.getLogger("hta").setLevel(logging.ERROR)
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t_load = time.perf_counter() - t0
rss_loaded = peak_mib()
events = sum(len(df) for df in a.t.traces.values())
analyses = {
    "get_gpu_kernel_breakdown": lambda: a.get_gpu_kernel_breakdown(visualize=False),
    "get_temporal_breakdown": lambda: a.get_temporal_breakdown(visualize=False),
    "get_idle_time_breakdown": lambda: a.get_idle_time_breakdown(visualize=False),
    "get_comm_comp_overlap": lambda: a.get_comm_comp_overlap(visualize=False),
    "get_cuda_kernel_launch_stats": lambda: a.get_cuda_kernel_launch_stats(visualize=False),
    "get_queue_length_summary": lambda: a.get_queue_length_summary(),
    "get_memory_bw_summary": lambda: a.get_memory_bw_summary(),
}
times, failed = {}, {}
for name, fn in analyses.items():
    t = time.perf_counter()
    try:
        fn()
    except Exception as exc:  # report, do not stop: the others still count
        failed[name] = f"{type(exc).__name__}: {exc}"[:200]
    times[name] = time.perf_counter() - t
print(json.dumps({"import_s": t_import, "load_s": t_load, "analyses_s": times,
    "failed": failed, "events": events, "rss_loaded_mib": rss_loaded,
    "rss_mib": peak_mib()}))
"""
)


JSON_CHILD = (
    PEAK_MIB
    + r"""
import json, pathlib, sys, time
t0 = time.perf_counter()
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    with open(path) as fh:
        json.loads(fh.read())  # as HTA's default parser reads a trace
print(json.dumps({"parse_s": time.perf_counter() - t0}))
"""
)


def child(python: str, code: str, path: Path, timeout: float) -> dict:
    """Run ``code`` on ``path`` in a fresh ``python``; its JSON line, or why there is none."""
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [python, "-c", code, str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"not done after {timeout:.0f} s"}
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def hta_version(python: str) -> str:
    """``holistictraceanalysis X, pandas Y`` of the HTA environment."""
    code = (
        "import importlib.metadata as m; "
        "print(f\"holistictraceanalysis {m.version('holistictraceanalysis')}, "
        "pandas {m.version('pandas')}\")"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def measure(source: Path, tasks: int, work: Path, args: argparse.Namespace) -> dict:
    profile = replicate(source, tasks, work / f"p{tasks}")
    row: dict = {"requested": tasks}
    row["msprof"] = child(sys.executable, MSPROF_CHILD, profile, args.timeout)
    print(f"{tasks:>9,} tasks: msprof-py {row['msprof']}", flush=True)
    forms = {"no_steps": False} | ({"steps": True} if tasks <= args.steps_upto else {})
    for form, steps in forms.items():
        trace = work / f"kineto{tasks}_{form}"
        files = write_kineto(profile, trace, steps=steps)
        row[f"json_mib_{form}"] = sum(p.stat().st_size for p in files) / 2**20
        with files[0].open(encoding="utf-8") as fh:  # one event a line, between two lines
            row[f"events_{form}"] = sum(1 for _ in fh) - 2
        row[f"hta_{form}"] = child(args.hta_python, HTA_CHILD, trace, args.timeout)
        if form == "no_steps":
            row["json_parse"] = child(args.hta_python, JSON_CHILD, trace, args.timeout)
        print(f"{tasks:>9,} tasks: HTA ({form}) {row[f'hta_{form}']}", flush=True)
        for p in trace.glob("*.json"):
            p.unlink()  # up to a GB each
    return row


def _hta_cells(h: dict | None) -> list[str]:
    if h is None:
        return ["not run"] * 4
    if "error" in h:
        return [h["error"], "", "", ""]
    analyses = sum(h["analyses_s"].values())
    return [
        f"{h['load_s']:.1f}",
        f"{analyses:.1f}",
        f"{h['load_s'] + analyses:.1f}",
        f"{h['rss_mib']:,.0f}",
    ]


def table(rows: list[dict]) -> str:
    header = [
        "device tasks",
        "Kineto events",
        "msprof-py load (s)",
        "msprof-py load + analyze (s)",
        "msprof-py peak RSS (MiB)",
        "HTA trace (MiB JSON)",
        "HTA load (s)",
        "... of which json.loads (s)",
        "HTA analyses (s)",
        "HTA total (s)",
        "HTA peak RSS (MiB)",
        "HTA / msprof-py time",
        "HTA / msprof-py memory",
        "HTA total with ProfilerStep (s)",
        "... its peak RSS (MiB)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for r in rows:
        m, h, hs = r["msprof"], r.get("hta_no_steps"), r.get("hta_steps")
        cells = [f"{m.get('tasks', r['requested']):,}"]
        cells.append(f"{r['events_no_steps']:,}")
        if "error" in m:
            cells += [m["error"], "", ""]
        else:
            cells += [f"{m['load_s']:.2f}", f"{m['total_s']:.2f}", f"{m['rss_mib']:,.0f}"]
        cells.append(f"{r['json_mib_no_steps']:,.0f}")
        hta = _hta_cells(h)
        parse = r.get("json_parse", {})
        cells += [hta[0], f"{parse['parse_s']:.1f}" if "parse_s" in parse else "", *hta[1:]]
        if h and "error" not in h and "error" not in m:
            total = h["load_s"] + sum(h["analyses_s"].values())
            cells += [f"{total / m['total_s']:.0f}x", f"{h['rss_mib'] / m['rss_mib']:.1f}x"]
        else:
            cells += ["", ""]
        steps = _hta_cells(hs)
        cells += [steps[2] if hs and "error" not in hs else steps[0], steps[3]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--profile", type=Path, help="a recorded run to replicate")
    parser.add_argument(
        "--hta-python",
        default=sys.executable,
        help="a Python with holistictraceanalysis installed (default: this one)",
    )
    parser.add_argument(
        "--steps-upto",
        type=int,
        default=100_000,
        help="also run HTA on the trace with ProfilerStep annotations up to this many tasks",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    args = parser.parse_args()
    version = hta_version(args.hta_python)
    with tempfile.TemporaryDirectory() as tmp:
        source = args.profile or record(Path(tmp) / "source")
        rows = [measure(source, n, Path(tmp), args) for n in args.tasks]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(table(rows))
    print(
        f"\nMachine: {platform.machine()} {platform.system()}, Python "
        f"{platform.python_version()}; msprof-py with pandas {pd.__version__}, HTA with "
        f"{version}; {date.today()}."
    )


if __name__ == "__main__":
    main()
