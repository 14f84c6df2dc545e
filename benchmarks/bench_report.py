"""How long the HTML report takes to write, how big it is and how fast it opens, on profiles of up
to 1M device tasks.

The profiles are those of ``bench_analyze.py`` (its ``record()`` and ``replicate()``: the ResNet
sample's steady-state step repeated; 1M tasks by default). Each size is measured in a fresh
process: ``load()``, ``analyze()`` and ``write_report(profile, analysis=...)`` timed apart, the
file's size, the peak resident memory. When Chromium (``/usr/bin/chromium``) and Playwright are
installed, the report is then opened in headless Chromium (network blocked, software WebGL;
the medians of ``--repeats`` fresh pages, :func:`open_page`): the time until the timeline has
drawn (the page's readiness flag, or for revisions without one a probe wrapping
``Plotly.newPlot``), the navigation's ``loadEventEnd``, and the CPU time of the browser's
processes until then (the figure to compare on a shared machine: the two times grow with the
machine's load, the CPU time much less).

The table starts with the pre-timeline report's figures as ``benchmarks/RESULTS.md`` recorded
them (:data:`RECORDED_BASELINE`). With ``--baseline REV ...`` the same profiles' reports are
also written by the ``msprof_py`` of each git revision (``git archive`` into a temporary
folder) and opened the same way, so a change's cost is measured in one run on the same load.
``--open HTML ...`` only opens existing reports (``--trace FILE``: a Chrome trace of the first
page, for profiling).

    python benchmarks/bench_report.py [--tasks 1000000] [--profile DIR] [--baseline REV ...]
                                      [--repeats 3] [--keep DIR] [--no-browser]
                                      [--open HTML ... [--trace FILE]]
                                      [--write]  # append to RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_analyze import record, replicate  # noqa: E402
from peak import PEAK_MIB  # noqa: E402

CHROMIUM = "/usr/bin/chromium"

CHILD = (
    PEAK_MIB
    + r"""
import json, resource, sys, time
from msprof_py.profile import load
from msprof_py.analyzers import analyze
from msprof_py.report import write_report
path, out = sys.argv[1], sys.argv[2]
t0 = time.perf_counter(); p = load(path, categorical=True); t_load = time.perf_counter() - t0
t0 = time.perf_counter(); a = analyze(p); t_analyze = time.perf_counter() - t0
t0 = time.perf_counter(); f = write_report(p, out, analysis=a); t_report = time.perf_counter() - t0
host = p.host_events[p.host_events["kind"].isin(["op", "sync", "python", "annotation"])]
t0 = time.perf_counter()
raw = json.dumps({
    "tasks": [p.tasks["start_ns"].tolist(), p.tasks["end_ns"].tolist(), p.tasks["name"].tolist()],
    "host": [host["start_ns"].tolist(), host["end_ns"].tolist(), host["name"].tolist()],
})
t_raw = time.perf_counter() - t0
print(json.dumps({"tasks": len(p.tasks), "host_spans": len(host), "load_s": t_load,
    "analyze_s": t_analyze, "report_s": t_report, "report_mb": f.stat().st_size / 2**20,
    "raw_json_s": t_raw, "raw_json_mb": len(raw) / 2**20,
    "rss_peak_mib": peak_mib()}))
"""
)


def measure(path: Path, out: Path, root: Path = ROOT) -> dict:
    """One report of ``path`` written by the ``msprof_py`` under ``root``, in a fresh process."""
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(out)],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


#: run before the page's own scripts: wraps ``Plotly.newPlot`` as plotly.js defines it, so
#: that the time each figure has drawn (its promise resolved, then two animation frames: the
#: frame that shows it committed) is known for any revision of the report, with or without
#: a readiness flag
DRAWN_PROBE = r"""
(() => {
  let P;
  window.__drawn = {};
  Object.defineProperty(window, "Plotly", {configurable: true, get() { return P; }, set(v) {
    P = v;
    const newPlot = v.newPlot;
    v.newPlot = function (gd) {
      const id = typeof gd === "string" ? gd : gd && gd.id;
      const r = newPlot.apply(this, arguments);
      Promise.resolve(r).then(() => requestAnimationFrame(() => requestAnimationFrame(() => {
        window.__drawn[id] = performance.now();
      })));
      return r;
    };
  }});
})();
"""


def _cpu_s(root: int) -> float:
    """User + system CPU seconds of the live descendants of process ``root`` (the browser's
    processes: Playwright's driver, Chromium, its renderer and GPU processes); Linux only."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parent[pid] = int(fields[1])
        ticks[pid] = int(fields[11]) + int(fields[12])
    mine, grew = {root}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in mine} - mine
        grew = bool(more)
        mine |= more
    return sum(ticks.get(p, 0) for p in mine - {root}) / os.sysconf("SC_CLK_TCK")


def open_page(report: Path, repeats: int = 3, profile: Path | None = None) -> dict | None:
    """``report`` opened in ``repeats`` fresh pages of headless Chromium (network blocked);
    the medians (ms from navigation start) of: ``drawn_ms``, the timeline drawn (the page's
    ``window.msprofTimelineReady`` when it sets one, else the probe's time for
    ``fig-timeline``: the same moment), ``probe_ms`` the probe's time, and ``load_ms`` the
    navigation's ``loadEventEnd`` (every figure's first draw done), ``cpu_s`` the CPU time the
    browser's processes spent from navigation until both (robust to other load on the
    machine, unlike the two times). None without a browser.
    ``profile``: a Chrome trace (CDP ``Tracing``) of the first page is written there."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).exists():
        return None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    rows: list[dict] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            for i in range(repeats):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.add_init_script(DRAWN_PROBE)
                page.route(
                    "**/*",
                    lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort(),
                )
                if profile is not None and i == 0:
                    browser.start_tracing(page=page, path=str(profile), screenshots=False)
                cpu0 = _cpu_s(os.getpid())
                page.goto(report.as_uri(), timeout=300_000, wait_until="load")
                page.wait_for_function(
                    "() => window.__drawn['fig-timeline'] !== undefined", timeout=300_000
                )
                cpu = _cpu_s(os.getpid()) - cpu0
                if profile is not None and i == 0:
                    browser.stop_tracing()
                got = page.evaluate(
                    """() => ({probe: window.__drawn['fig-timeline'],
                        flag: window.msprofTimelineReady,
                        load: performance.getEntriesByType('navigation')[0].loadEventEnd})"""
                )
                rows.append(
                    {
                        "probe_ms": float(got["probe"]),
                        "drawn_ms": float(got["flag"] or got["probe"]),
                        "load_ms": float(got["load"]),
                        "cpu_s": cpu,
                    }
                )
                page.close()
        finally:
            browser.close()
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def checkout(rev: str, into: Path) -> Path:
    """``msprof_py`` of git revision ``rev`` extracted under ``into`` (returned)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev, "msprof_py"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


#: the report before the new timeline (single grey host lane), as benchmarks/RESULTS.md
#: recorded it ("HTML report timeline", run 2: ab14c75 on the 1M-task profile, 2026-12-01;
#: its open time is the navigation's loadEventEnd, the timeline drawn just before it)
RECORDED_BASELINE = {
    "code": "ab14c75 (recorded)",
    "tasks": 1_000_155,
    "report_s": 3.01,
    "report_mb": 10.9,
    "open": {"drawn_ms": None, "load_ms": 9_200.0},
    "rss_peak_mib": 1156,
}


def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1e3:.1f}"


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table (``-``: not measured)."""
    header = [
        "code",
        "device tasks",
        "report (s)",
        "report file (MiB)",
        "timeline drawn in Chromium (s)",
        "loadEventEnd (s)",
        "browser CPU to drawn (s)",
        "peak RSS (MiB)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for r in rows:
        o = r.get("open") or {}
        report_s = "-" if r.get("report_s") is None else f"{r['report_s']:.2f}"
        rss = "-" if r.get("rss_peak_mib") is None else f"{r['rss_peak_mib']:.0f}"
        tasks = f"{r['tasks']:,}" if r.get("tasks") else "-"
        lines.append(
            f"| {r.get('code', 'this tree')} | {tasks} | {report_s} | {r['report_mb']:.1f} "
            f"| {_s(o.get('drawn_ms'))} | {_s(o.get('load_ms'))} "
            f"| {'-' if o.get('cpu_s') is None else format(o['cpu_s'], '.1f')} | {rss} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[1_000_000])
    parser.add_argument(
        "--profile", type=Path, help="a recorded run to replicate (default: record)"
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        nargs="+",
        default=[],
        help="also measure the reports of these git revisions",
    )
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium timing")
    parser.add_argument("--repeats", type=int, default=3, help="pages opened per report")
    parser.add_argument("--keep", type=Path, help="keep the reports in this folder")
    parser.add_argument(
        "--open", type=Path, nargs="+", metavar="HTML", help="only open these reports"
    )
    parser.add_argument(
        "--trace", type=Path, help="write a Chrome trace of the first page opened here"
    )
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    rows: list[dict] = [RECORDED_BASELINE]
    if args.open:
        for html in args.open:
            row = {"code": html.name, "tasks": None, "report_mb": html.stat().st_size / 2**20}
            row["open"] = open_page(html, args.repeats, args.trace)
            rows.append(row)
            print(html, row["open"], flush=True)
        print(table(rows))
        return
    with tempfile.TemporaryDirectory() as tmp:
        source = args.profile or record(Path(tmp) / "source")
        codes = [(rev, checkout(rev, Path(tmp) / f"rev-{rev}")) for rev in args.baseline]
        codes.append(("this tree", ROOT))
        keep = args.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        for n in args.tasks:
            path = replicate(source, n, Path(tmp) / f"p{n}")
            for code, root in codes:
                out = keep / f"report-{n}-{code.replace(' ', '-')}.html"
                out.unlink(missing_ok=True)
                row = measure(path, out, root)
                row["code"] = code
                row["open"] = None if args.no_browser else open_page(out, args.repeats)
                rows.append(row)
                o = row["open"] or {}
                print(
                    f"{code}: {row['tasks']:>9,} tasks: report {row['report_s']:.2f} s "
                    f"(analyze {row['analyze_s']:.2f} s), {row['report_mb']:.1f} MiB, "
                    f"timeline drawn {_s(o.get('drawn_ms'))} s, load {_s(o.get('load_ms'))} s, "
                    f"browser CPU {o.get('cpu_s', 0):.1f} s",
                    flush=True,
                )
    text = table(rows)
    print(text)
    if args.write:
        import pandas as pd
        import plotly

        section = (
            "\n## HTML report (`msprof report`): size and open time\n\n"
            f"Command: `.venv/bin/python benchmarks/bench_report.py {' '.join(sys.argv[1:])}`\n\n"
            f"Machine: {platform.machine()} {platform.system()}, Python "
            f"{platform.python_version()}, pandas {pd.__version__}, plotly {plotly.__version__}, "
            f"{date.today()}.\n\n{text}\n"
        )
        with (ROOT / "benchmarks" / "RESULTS.md").open("a", encoding="utf-8") as fh:
            fh.write(section)


if __name__ == "__main__":
    main()
