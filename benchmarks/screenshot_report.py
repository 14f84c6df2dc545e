"""The README's picture of the HTML report (``docs/report.png``): the ResNet sample recorded
(3 steps), its report written, opened in headless Chromium (network blocked), the timeline
zoomed onto the first analysed step with its longest cube kernel selected (details and the
launch-to-kernel arrow shown), and the page from its header to the end of the timeline saved as
a palette PNG (small enough for a README).

    python benchmarks/screenshot_report.py [--out docs/report.png] [--profile DIR]

Needs ``/usr/bin/chromium``, the ``playwright`` and ``Pillow`` pip packages; no network.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_analyze import record  # noqa: E402

from msprof_py.profile import load  # noqa: E402
from msprof_py.report import write_report  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
WIDTH = 1400


def _kernel(run: Path) -> tuple[float, float, float, float]:
    """The first analysed step (1) and its longest cube kernel, in us on the timeline's axis."""
    p = load(run)
    origin = min(p.tasks["start_ns"].min(), p.host_events["start_ns"].min())
    step = p.steps[p.steps["step"] == 1].iloc[0]
    t = p.tasks[(p.tasks["step"] == 1) & (p.tasks["task_type"] == "AI_CORE")]
    k = t.loc[(t["end_ns"] - t["start_ns"]).idxmax()]
    return tuple(  # type: ignore[return-value]
        float((v - origin) / 1e3)
        for v in (step["start_ns"], step["end_ns"], k["start_ns"], k["end_ns"])
    )


def shoot(report: Path, run: Path, out: Path) -> int:
    """Screenshot ``report`` (of the run ``run``) into ``out``; returns its size in bytes."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    s0, s1, k0, k1 = _kernel(run)
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.route(
                "**/*",
                lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort(),
            )
            page.goto(report.as_uri(), wait_until="load", timeout=300_000)
            page.wait_for_selector("#fig-timeline .main-svg", timeout=300_000)
            # the first analysed step in view, its longest cube kernel selected
            page.evaluate(
                "([a, b]) => Plotly.relayout('fig-timeline', "
                "{'xaxis.range': [a, b], 'xaxis2.range': [a, b]})",
                [s0, s1],
            )
            page.wait_for_timeout(800)
            x, y = page.evaluate(
                """([x]) => {
                  const gd = document.getElementById('fig-timeline');
                  gd.scrollIntoView({block: 'center'});  // a click off the viewport hits nothing
                  const r = gd.getBoundingClientRect();
                  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
                  const y = gd.layout.yaxis.ticktext.findIndex((t) => t.includes('compute'));
                  return [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(y)];
                }""",
                [(k0 + k1) / 2],
            )
            page.mouse.click(x, y)
            page.wait_for_timeout(800)
            bottom = page.evaluate(
                "() => { const b = document.getElementById('timeline').getBoundingClientRect();"
                " return b.bottom + window.scrollY; }"
            )
            png = page.screenshot(
                full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": bottom + 10}
            )
        finally:
            browser.close()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    return out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--profile", type=Path, help="a recorded run (default: record)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.profile or record(Path(tmp) / "run")
        report = write_report(run, Path(tmp) / "report.html")
        size = shoot(report, run, args.out)
    print(f"{args.out}: {size / 1024:,.0f} KiB")


if __name__ == "__main__":
    main()
