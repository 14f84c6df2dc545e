"""How long the HTML report takes to write, how big it is and how fast it opens, on profiles of up
to 1M device tasks.

The profiles are those of ``bench_analyze.py`` (its ``record()`` and ``replicate()``: the ResNet
sample's steady-state step repeated). Each size is measured in a fresh process: ``load()``,
``analyze()`` and ``write_report(profile, analysis=...)`` timed apart, the file's size, the peak
resident memory. Baselines from the same process: the time of ``analyze()`` (the report's
generation is compared with it), and the plain JSON of every timeline span (start, end and
name of every device task and host span: what a report drawing every span would have to
embed), its ``json.dumps`` time and its size. When Chromium and Playwright are installed, the
report is then opened in headless Chromium (network blocked) and the navigation's
``loadEventEnd`` recorded (the median of three fresh pages): the page parsed and every figure
drawn.

With ``--baseline REV`` the same profiles' reports are also written by the ``msprof_py`` of
git revision ``REV`` (``git archive`` into a temporary folder) and opened the same way, each
size old then new, so a change's cost is measured in one run on the same machine load.

    python benchmarks/bench_report.py [--tasks 100000 300000 1000000] [--profile DIR]
                                      [--baseline REV] [--no-browser]
                                      [--write]  # append to RESULTS.md
"""

from __future__ import annotations

import argparse
import json
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


def open_ms(report: Path, repeats: int = 3) -> float | None:
    """``loadEventEnd`` of ``report`` in headless Chromium (ms; the median of ``repeats`` fresh
    pages), or None without a browser."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).exists():
        return None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            times = []
            for _ in range(repeats):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.route(
                    "**/*",
                    lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort(),
                )
                page.goto(report.as_uri(), timeout=300_000, wait_until="load")
                page.wait_for_selector("#fig-timeline .main-svg", timeout=300_000)
                nav = "performance.getEntriesByType('navigation')[0].loadEventEnd"
                times.append(float(page.evaluate(nav)))
                page.close()
            return statistics.median(times)
        finally:
            browser.close()


def checkout(rev: str, into: Path) -> Path:
    """``msprof_py`` of git revision ``rev`` extracted under ``into`` (returned)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev, "msprof_py"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def table(rows: list[dict]) -> str:
    header = [
        "code",
        "device tasks",
        "host spans",
        "load (s)",
        "analyze (s)",
        "report (s)",
        "report / analyze",
        "load + analyze + report (s)",
        "report file (MiB)",
        "raw spans JSON (MiB)",
        "file / raw JSON",
        "raw JSON dumps (s)",
        "opens in Chromium (s)",
        "peak RSS (MiB)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for r in rows:
        total = r["load_s"] + r["analyze_s"] + r["report_s"]
        opened = "-" if r.get("open_ms") is None else f"{r['open_ms'] / 1e3:.1f}"
        lines.append(
            f"| {r.get('code', 'this tree')} | {r['tasks']:,} | {r['host_spans']:,} "
            f"| {r['load_s']:.2f} | {r['analyze_s']:.2f} "
            f"| {r['report_s']:.2f} | {r['report_s'] / r['analyze_s']:.2f} | {total:.1f} "
            f"| {r['report_mb']:.1f} | {r['raw_json_mb']:.1f} "
            f"| {r['report_mb'] / r['raw_json_mb']:.2f} | {r['raw_json_s']:.2f} | {opened} "
            f"| {r['rss_peak_mib']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument(
        "--profile", type=Path, help="a recorded run to replicate (default: record)"
    )
    parser.add_argument(
        "--baseline", metavar="REV", help="also measure the report of git revision REV"
    )
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium timing")
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source = args.profile or record(Path(tmp) / "source")
        codes = [("this tree", ROOT)]
        if args.baseline:
            codes.insert(0, (args.baseline, checkout(args.baseline, Path(tmp) / "baseline")))
        for n in args.tasks:
            path = replicate(source, n, Path(tmp) / f"p{n}")
            for code, root in codes:
                out = Path(tmp) / f"report-{n}.html"
                row = measure(path, out, root)
                row["code"] = code
                row["open_ms"] = None if args.no_browser else open_ms(out)
                rows.append(row)
                opened = "-" if row["open_ms"] is None else f"{row['open_ms'] / 1e3:.1f} s"
                print(
                    f"{code}: {row['tasks']:>9,} tasks: report {row['report_s']:.2f} s "
                    f"(analyze {row['analyze_s']:.2f} s), {row['report_mb']:.1f} MiB, "
                    f"opens {opened}",
                    flush=True,
                )
                out.unlink()
    text = table(rows)
    print(text)
    if args.write:
        import pandas as pd
        import plotly

        sizes = ", ".join(str(n) for n in args.tasks)
        section = (
            "\n## HTML report (`msprof report`) on large profiles\n\n"
            f"Command: `.venv/bin/python benchmarks/bench_report.py {' '.join(sys.argv[1:])}` "
            f"(tasks {sizes}; "
            "the profiles of `bench_analyze.py`: the ResNet sample's steady-state step "
            "replicated; each size in a fresh process: `load()`, `analyze()` and "
            "`write_report(profile, analysis=a)` timed apart; then the report opened in "
            "headless Chromium, network blocked, software WebGL).\n\n"
            f"Machine: {platform.machine()} {platform.system()}, Python "
            f"{platform.python_version()}, pandas {pd.__version__}, plotly {plotly.__version__}, "
            f"{date.today()}.\n\n"
            f"{text}\n\n"
            "Reading: `report` is the report alone (figures, tables, template, file); the\n"
            "baselines are `analyze()` in the same process and the plain JSON of every\n"
            "timeline span (start, end, name of each device task and host span), which a report\n"
            "drawing every span would have to embed. Above 20,000 spans a lane is aggregated\n"
            "into 10,000 time bins (vectorised), memory is thinned to 20,000 points, step lines\n"
            "to 500 and step bars to 500 (the page notes each), so the file stops growing:\n"
            "about 5 MiB of it is plotly.js. `opens in Chromium` is the navigation's\n"
            "`loadEventEnd` (median of three pages; software WebGL, so a desktop browser with a\n"
            "GPU draws faster).\n"
        )
        with (ROOT / "benchmarks" / "RESULTS.md").open("a", encoding="utf-8") as fh:
            fh.write(section)


if __name__ == "__main__":
    main()
