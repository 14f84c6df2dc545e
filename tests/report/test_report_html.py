"""The HTML report: self-contained, every section, timeline lanes, escaping, browser smoke."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from report_helpers import (
    CHROMIUM,
    offline_page,
    one_rank_meta,
    synthetic_profile,
)

from msprof_py.analyzers import analyze
from msprof_py.profile import TABLES, Profile, load
from msprof_py.profile.schema import default_row
from msprof_py.report import timeline, write_report
from msprof_py.report.build import build_html
from msprof_py.report.command import report
from msprof_py.report.lanes import UNIT_COLORS

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = [
    "header",
    "timeline",
    "top-ops",
    "steps",
    "copy",
    "roofline",
    "memory",
    "recommendations",
]
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profile")
    cmd = [sys.executable, "-m", "msprof_py.cli_entry", f"--output={out}", "--no-report"]
    cmd += ["python", "sample_runs/train_resnet.py", "--steps", "3"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=300)
    (run,) = sorted(out.glob("msprof_*"))
    return run


@pytest.fixture(scope="module")
def report_file(run_dir: Path) -> Path:
    return write_report(run_dir)


def _remote_refs(text: str) -> list[str]:
    return re.findall(r"<(?:script|link|img|iframe)\b[^>]*(?:src|href)\s*=\s*[\"']?https?://", text)


def test_default_location_and_no_overwrite(run_dir: Path, report_file: Path) -> None:
    assert report_file == run_dir / "report.html"
    second = write_report(run_dir)
    assert second == run_dir / "report-1.html"
    assert report_file.read_text() != "" and second.exists()
    second.unlink()


def test_self_contained(report_file: Path) -> None:
    text = report_file.read_text(encoding="utf-8")
    assert _remote_refs(text) == []
    assert text.count("* plotly.js v") == 1
    assert text.count("Plotly.newPlot(") == 1


def test_sections_present(report_file: Path) -> None:
    text = report_file.read_text(encoding="utf-8")
    for section in SECTIONS:
        assert f'<section id="{section}">' in text, section
    for fig in ("fig-timeline", "fig-top-ops", "fig-steps", "fig-roofline", "fig-memory"):
        assert f'id="{fig}-data"' in text, fig
    assert "python sample_runs/train_resnet.py --steps 3" in text
    assert "ascend910b" in text
    # an eager run compiled no graph: no graph-mode section, no link to one
    assert 'id="graph-mode"' not in text and 'href="#graph-mode"' not in text


def test_timeline_lanes(run_dir: Path, report_file: Path) -> None:
    text = report_file.read_text(encoding="utf-8")
    m = re.search(r'id="timeline-lanes">(.*?)</script>', text, re.S)
    assert m
    lanes = json.loads(m.group(1))
    profile = load(run_dir)
    streams = sorted(profile.tasks["stream_id"].unique())
    ops = profile.host_events[profile.host_events["kind"] == "op"]
    backward = ops[ops["name"].str.contains("backward")]["thread"].unique()
    assert len(backward) == 1 and ops["thread"].nunique() == 2  # forward + autograd thread
    # the default device runs with the task queue on: launches on its stage-2 thread
    assert profile.meta[0]["device_spec"]["dispatch"]["task_queue"]["value"] is True
    # host lanes by the threads' recorded names (the autograd engine's thread by its OS name)
    main = ops[~ops["thread"].isin(backward)]["thread"].iloc[0]
    assert profile.thread_names(0) == {int(main): "MainThread", int(backward[0]): "pt_autograd_0"}
    assert lanes == ["MainThread", "pt_autograd_0", "task-queue stage 2"] + [
        f"stream {s} · compute" for s in streams
    ]
    fig = json.loads(re.search(r'id="fig-timeline-data">(.*?)</script>', text, re.S).group(1))
    # lanes are numbered, first on top, and named by the y axis' ticks; each has spans
    y = fig["layout"]["yaxis"]
    assert y["tickvals"] == list(range(len(lanes))) and y["ticktext"] == lanes[::-1]
    # the page draws each lane at its y from the span store (the figure holds no copy of them)
    store = json.loads(re.search(r'id="timeline-store">(.*?)</script>', text, re.S).group(1))
    drawn = {L["y"] for L in store["lanes"] if L and L["units"] and len(L["s"])}
    assert drawn == set(range(len(lanes)))
    assert not any(t.get("type") == "scattergl" for t in fig["data"])


def _frame(name: str, rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame([{**default_row(name), **row} for row in rows], columns=TABLES[name].names)
    df.insert(0, "rank", 0)
    return df


def _hostile_profile(path: Path) -> Profile:
    task = {
        "task_id": 0,
        "stream_id": 0,
        "kind": "kernel",
        "task_type": "AI_VECTOR_CORE",
        "name": HOSTILE,
        "op_type": "Add\"'><img src=x>",
        "block_dim": 1,
        "launch_ns": 100,
        "start_ns": 200,
        "end_ns": 1200,
        "flops": 1000.0,
        "bytes": 4000,
        "input_shapes": "8;8",
        "input_dtypes": "float32;float32",
        "input_formats": "ND;ND",
        "output_shapes": "8",
        "output_dtypes": "float32",
        "output_formats": "ND",
        "host_op_id": 0,
        "step": 0,
    }
    host = {
        "event_id": 0,
        "kind": "op",
        "name": HOSTILE,
        "start_ns": 0,
        "end_ns": 150,
        "thread": 1,
        "stream_id": -1,
        "step": 0,
        "input_shapes": "8;8",
        "input_dtypes": "float32;float32",
        "module": "M/</script><b>x",
    }
    mem = {
        "time_ns": 50,
        "action": "malloc",
        "address": 1,
        "size": 512,
        "allocated": 512,
        "reserved": 2048,
        "active": 512,
        "tag": HOSTILE,
        "step": 0,
    }
    steps = {"step": 0, "start_ns": 0, "end_ns": 1500, "source": "optimizer"}
    tables = {
        "tasks": _frame("tasks", [task]),
        "host_events": _frame("host_events", [host]),
        "memory": _frame("memory", [mem]),
        "steps": _frame("steps", [steps]),
    }
    return Profile(path, one_rank_meta(f"python \"evil.py\" --name='{HOSTILE}'"), tables)


def test_hostile_names_escaped(tmp_path: Path) -> None:
    out = write_report(_hostile_profile(tmp_path), tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in text
    assert "<img src=x>" not in text
    assert "</script><b>x" not in text
    assert "&lt;script&gt;alert(1)" in text
    assert "&#34;evil.py&#34;" in text or "&quot;evil.py&quot;" in text


def _lockstep_rank(rank: int, compute_ns: int, wait_ns: int) -> dict[str, pd.DataFrame]:
    """One rank of a 2-rank data-parallel run: 3 steps of 20 us; the all-reduce ends at 18 us
    on both ranks, the fast rank waits inside it."""
    tasks, steps = [], []
    for i in range(3):
        t0 = i * 20_000
        steps.append({"step": i, "start_ns": t0, "end_ns": t0 + 20_000, "source": "optimizer"})
        common = {"step": i, "launch_ns": t0, "block_dim": 1}
        tasks.append(
            {**common, "task_id": 2 * i, "kind": "kernel", "task_type": "AI_CORE",
             "op_type": "MatMul", "name": "aten::mm", "start_ns": t0, "end_ns": t0 + compute_ns}
        )  # fmt: skip
        tasks.append(
            {**common, "task_id": 2 * i + 1, "stream_id": 1, "kind": "collective",
             "task_type": "HCCL", "op_type": "allreduce", "name": "hcom_allreduce_",
             "collective": "allreduce", "world_size": 2, "bytes": 1000,
             "start_ns": t0 + compute_ns, "end_ns": t0 + 18_000, "notify_wait_ns": wait_ns}
        )  # fmt: skip
    tables = {"tasks": _frame("tasks", tasks), "steps": _frame("steps", steps)}
    for name in ("host_events", "memory"):  # none recorded: empty, with the schema's dtypes
        tables[name] = TABLES[name].schema.empty_table().to_pandas()
        tables[name].insert(0, "rank", 0)
    for df in tables.values():
        df["rank"] = rank
    return tables


def test_multi_rank_report_names_the_slow_rank(tmp_path: Path) -> None:
    ranks = [_lockstep_rank(0, 10_000, 6_000), _lockstep_rank(1, 16_000, 0)]
    tables = {k: pd.concat([r[k] for r in ranks], ignore_index=True) for k in ranks[0]}
    base = one_rank_meta("torchrun train.py")[0]
    meta = {r: {**base, "rank": r, "world_size": 2} for r in (0, 1)}
    out = write_report(Profile(tmp_path, meta, tables), tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    assert 'id="ranks"' in text
    assert "&middot; 2 ranks (ranks 0, 1), details for rank " in text
    # rank 1 works 20 us per step, rank 0 14 us (20 minus its 6 us wait): mean 17 us, +17.6%
    assert "Slow rank: rank 1</strong>" in text
    assert "works 20.0 us per step" in text and "+17.6%" in text
    assert "wait 6.0 us per step" in text and "largest excess: compute" in text


def test_command(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.html"
    res = CliRunner().invoke(report, [str(run_dir), "-o", str(target)])
    assert res.exit_code == 0, res.output
    assert target.exists()
    # an explicit -o that exists: refused (one line, exit 2) unless --force, which replaces it
    target.write_text("older")
    res = CliRunner().invoke(report, [str(run_dir), "-o", str(target)])
    assert res.exit_code == 2 and "already exists (--force replaces it)" in res.output
    assert len(res.output.strip().splitlines()) == 1 and target.read_text() == "older"
    res = CliRunner().invoke(report, [str(run_dir), "-o", str(target), "--force"])
    assert res.exit_code == 0, res.output
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.html"]  # nothing beside it
    # -o into a folder that does not exist: created only with --mkdir
    deep = tmp_path / "new" / "dir" / "r.html"
    res = CliRunner().invoke(report, [str(run_dir), "-o", str(deep)])
    assert res.exit_code == 2 and "does not exist (--mkdir creates it)" in res.output
    assert not (tmp_path / "new").exists()
    res = CliRunner().invoke(report, [str(run_dir), "-o", str(deep), "--mkdir"])
    assert res.exit_code == 0 and deep.is_file()
    res = CliRunner().invoke(report, [str(tmp_path / "missing")])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing (apt: chromium)")
def test_a_report_from_categorical_strings_is_the_same(run_dir: Path) -> None:
    """write_report(path) loads strings as categoricals (less memory): same document."""
    assert build_html(load(run_dir, categorical=True)) == build_html(load(run_dir))


def test_recommendations_link_to_their_ops(run_dir: Path, report_file: Path) -> None:
    """Each op link of a finding points at the longest run of that op within the analysed
    steps (never the warm-up step 0) and names the lane it is drawn on."""
    text = report_file.read_text(encoding="utf-8")
    links = re.findall(
        r'class="op-link" data-start="([^"]+)" data-end="([^"]+)" data-lane="([^"]*)">([^<]+)<',
        text,
    )
    assert links
    lanes = json.loads(re.search(r'id="timeline-lanes">(.*?)</script>', text, re.S).group(1))
    profile = load(run_dir)
    origin = min(profile.tasks["start_ns"].min(), profile.host_events["start_ns"].min())
    # the analysed steps: not the warm-up step 0, nor the "end of run" tail after the last step
    analysed = analyze(run_dir).profile["steps_analysed"]
    assert 0 not in analysed
    tasks, host = (df[df["step"].isin(analysed)] for df in (profile.tasks, profile.host_events))
    for start, end, lane, name in links:
        name = html.unescape(name)
        assert html.unescape(lane) in lanes
        hit = tasks[(tasks["name"] == name) | (tasks["op_type"] == name)]
        rows = hit if len(hit) else host[host["name"] == name]
        longest = rows.loc[(rows["end_ns"] - rows["start_ns"]).idxmax()]
        assert float(start) == pytest.approx((longest["start_ns"] - origin) / 1e3, abs=1e-3)
        assert float(end) == pytest.approx((longest["end_ns"] - origin) / 1e3, abs=1e-3)
        assert longest["step"] >= 1


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module's browser tests (network blocked per page)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} missing (apt: chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip package playwright missing")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the browser tests leave their screenshots (a pytest temporary folder)."""
    return tmp_path_factory.mktemp("report-screenshots")


def _page(browser: Any, report: Path) -> tuple[Any, list[str]]:
    errors: list[str] = []
    page = offline_page(browser, errors)
    page.set_default_timeout(60_000)  # a loaded 2-core CI machine draws slowly
    page.goto(report.as_uri(), wait_until="load")
    page.wait_for_selector("#fig-timeline .main-svg")
    page.wait_for_function("() => window.msprofTimeline && window.msprofTimeline.drawn")
    return page, errors


def _zoom(page: Any, a: float, b: float) -> None:
    page.evaluate(
        "([a, b]) => Plotly.relayout('fig-timeline', {'xaxis.range': [a, b], "
        "'xaxis2.range': [a, b]})",
        [a, b],
    )
    page.wait_for_timeout(500)  # the labels follow the zoom (debounced)


def _click_for_details(page: Any, x: float, y: float, tries: int = 3) -> str:
    """Click at (x, y) until the details panel opens (a click that lands while a loaded
    machine is still redrawing the zoomed figure is lost); the panel's text."""
    for attempt in range(tries):
        page.mouse.click(x, y)
        try:
            page.wait_for_selector("#tl-details:not([hidden])", timeout=15_000)
            break
        except Exception:
            if attempt == tries - 1:
                raise
            page.mouse.move(x - 3, y)
            page.mouse.move(x, y, steps=3)
    page.wait_for_timeout(300)
    return page.locator("#tl-details").inner_text()


def _point(page: Any, x: float, lane: str) -> tuple[float, float]:
    return page.evaluate(
        """([x, lane]) => {
          const gd = document.getElementById('fig-timeline');
          const r = gd.getBoundingClientRect();
          const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
          const y = gd.layout.yaxis.ticktext.indexOf(lane);
          return [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(y)];
        }""",
        [x, lane],
    )


def _boxes(page: Any, prefix: str) -> list[dict[str, float]]:
    return page.evaluate(
        """(prefix) => [...document.querySelectorAll('#fig-timeline .annotation-text')]
             .filter((t) => t.textContent.startsWith(prefix))
             .map((t) => { const b = t.getBoundingClientRect();
                           return {x: b.left, y: b.top, w: b.width, h: b.height,
                                   text: t.textContent}; })""",
        prefix,
    )


def test_browser(run_dir: Path, report_file: Path, browser: Any, artefacts: Path) -> None:
    """What a person sees: lanes per thread and stream with names, a colour per unit with a
    legend, a label on a span once zoomed in, a click on a kernel showing the launch that
    issued it (and an arrow), a finding's link marking its span, tables without scientific
    notation and no horizontal scroll at 1,400 px; a screenshot of each section."""
    profile = load(run_dir)
    origin = min(profile.tasks["start_ns"].min(), profile.host_events["start_ns"].min())
    page, errors = _page(browser, report_file)
    facts = page.evaluate(
        """() => {
          const gd = document.getElementById('fig-timeline');
          const shown = (el) => el.offsetParent !== null;
          const colors = {};
          gd.data.filter((t) => t.mode === 'lines' && t.showlegend)
            .forEach((t) => { colors[t.name] = t.line.color; });
          return {ticks: [...gd.querySelectorAll('.ytick text')].map((t) => t.textContent),
                  legend: [...gd.querySelectorAll('.legendtext')].map((t) => t.textContent),
                  colors: colors,
                  sections: [...document.querySelectorAll('section')]
                    .filter(shown).map((s) => s.id),
                  figures: [...document.querySelectorAll('.fig')]
                    .filter((f) => f.querySelector('.main-svg')).map((f) => f.id)};
        }"""
    )
    assert set(SECTIONS) <= set(facts["sections"])
    for fig in ("fig-timeline", "fig-top-ops", "fig-steps", "fig-roofline", "fig-memory"):
        assert fig in facts["figures"], fig
    assert set(facts["ticks"]) == {
        "MainThread",
        "pt_autograd_0",
        "task-queue stage 2",
        "stream 0 · compute",
    }
    units = {"cube", "vector", "AI CPU", "DMA H2D", "host op", "launch"}
    assert units <= set(facts["legend"])
    assert len({facts["colors"][u] for u in units}) == len(units)  # one colour per unit
    assert facts["colors"]["cube"] == UNIT_COLORS["cube"]
    # zoomed onto the longest cube kernel: it is labelled with its name, in view
    t = profile.tasks[profile.tasks["task_type"] == "AI_CORE"]
    k = t.loc[(t["end_ns"] - t["start_ns"]).idxmax()]
    s, e = (k["start_ns"] - origin) / 1e3, (k["end_ns"] - origin) / 1e3
    _zoom(page, s - (e - s), e + (e - s))
    page.wait_for_function(
        "(name) => [...document.querySelectorAll('#fig-timeline .annotation-text')]"
        ".some((t) => t.textContent.length > 2 && "
        "name.startsWith(t.textContent.replace('\u2026', '')))",
        arg=str(k["name"]),
        timeout=30_000,
    )
    # a click on it selects it: details name its launch and op, an arrow joins them
    page.locator("#fig-timeline").scroll_into_view_if_needed()
    x, y = _point(page, s + (e - s) / 8, "stream 0 · compute")
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y, steps=3)
    # hovered, it is outlined: a box around it
    page.wait_for_selector("#fig-timeline .tl-hover", state="visible", timeout=30_000)
    box = page.locator("#fig-timeline .tl-hover").bounding_box()
    assert box is not None and box["x"] <= x <= box["x"] + box["width"]
    assert box["y"] <= y <= box["y"] + box["height"]
    details = _click_for_details(page, x, y)
    launch = profile.host_events[
        (profile.host_events["kind"] == "launch") & (profile.host_events["task_id"] == k["task_id"])
    ].iloc[0]
    assert f"Selected: {k['name']}" in details
    assert f"Launched by: {launch['name']} (launch) on task-queue stage 2" in details
    # and the op that launched it, with its module (instance path and class path; a
    # backward op runs outside module hooks: no module line)
    ops = profile.host_events.set_index("event_id")
    op = ops.loc[launch["parent_id"]]
    assert (f"Op module: {op['module_path']} ({op['module']})" in details) == bool(
        op["module_path"]
    ), (op.to_dict(), details)
    assert ("Op module:" in details) == bool(op["module"])
    flows = page.evaluate(
        "() => document.getElementById('fig-timeline').layout.annotations"
        ".filter((a) => a.name === 'flow').length"
    )
    assert flows == 1
    page.locator("#timeline").screenshot(path=str(artefacts / "timeline.png"))
    # a finding's op link zooms there and marks the span
    link = page.locator("a.op-link").first
    a0, b0 = float(link.get_attribute("data-start")), float(link.get_attribute("data-end"))
    link.click()
    page.wait_for_timeout(500)
    lo, hi = page.evaluate("() => document.getElementById('fig-timeline')._fullLayout.xaxis.range")
    mark = page.evaluate(
        "() => document.getElementById('fig-timeline').layout.shapes"
        ".filter((s) => s.name === 'highlight')"
    )
    assert lo < a0 <= b0 < hi and len(mark) == 1
    assert mark[0]["x0"] == pytest.approx(a0) and mark[0]["x1"] == pytest.approx(b0)
    # tables read as a tool's: no scientific notation, nothing wider than the page
    cells = page.evaluate("() => [...document.querySelectorAll('td')].map((c) => c.innerText)")
    assert cells and not [c for c in cells if re.search(r"\d[eE][+-]?\d", c)]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1400
    wide = page.evaluate(
        "() => [...document.querySelectorAll('.tw')].filter((w) => w.scrollWidth > "
        "w.clientWidth + 1).length"
    )
    assert wide == 0
    # a click on a numeric header sorts the rows by it, ascending; again, descending
    head = page.locator("#top-ops table.sortable th[data-numeric='1']").first
    col = page.evaluate("(th) => [...th.parentNode.children].indexOf(th)", head.element_handle())
    keys = (
        "(col) => [...document.querySelector('#top-ops table.sortable').tBodies[0].rows]"
        ".map((r) => parseFloat(r.cells[col].dataset.v))"
    )
    head.click()
    up = page.evaluate(keys, col)
    head.click()
    down = page.evaluate(keys, col)
    assert len(up) > 1 and up == sorted(up) and down == sorted(up, reverse=True)
    for section in SECTIONS:
        page.locator(f"#{section}").screenshot(path=str(artefacts / f"{section}.png"))
    assert errors == []
    page.close()


def test_browser_two_ranks(tmp_path: Path, browser: Any, artefacts: Path) -> None:
    """Two ranks: a group of lanes each, the slow one marked, step labels in a row per rank
    that never overlap, however far out the view is."""
    ranks = [_lockstep_rank(0, 10_000, 6_000), _lockstep_rank(1, 16_000, 0)]
    tables = {k: pd.concat([r[k] for r in ranks], ignore_index=True) for k in ranks[0]}
    base = one_rank_meta("torchrun train.py")[0]
    meta = {r: {**base, "rank": r, "world_size": 2} for r in (0, 1)}
    out = write_report(Profile(tmp_path, meta, tables), tmp_path / "r.html")
    page, errors = _page(browser, out)
    ticks = page.evaluate(
        "() => [...document.querySelectorAll('#fig-timeline .ytick text')]"
        ".map((t) => t.textContent)"
    )
    assert set(ticks) == {
        "rank 0 stream 0 · compute",
        "rank 0 stream 1 · HCCL",
        "rank 1 (slow) stream 0 · compute",
        "rank 1 (slow) stream 1 · HCCL",
    }
    for view in (None, (0.0, 60.0), (-500.0, 600.0)):
        if view is not None:
            _zoom(page, *view)
        boxes = _boxes(page, "step ")
        assert len(boxes) >= (2 if view != (-500.0, 600.0) else 1)
        for i, p in enumerate(boxes):
            for q in boxes[i + 1 :]:
                apart = (
                    p["x"] + p["w"] <= q["x"]
                    or q["x"] + q["w"] <= p["x"]
                    or p["y"] + p["h"] <= q["y"]
                    or q["y"] + q["h"] <= p["y"]
                )
                assert apart, (p, q)
    rows = {round(b["y"]) for b in _boxes(page, "step ")}
    assert len(rows) == 2  # one row per rank
    page.locator("#timeline").screenshot(path=str(artefacts / "timeline-two-ranks.png"))
    assert errors == []
    page.close()


@pytest.mark.slow  # the LOD tests check the embedded detail without a browser
def test_browser_bins_split_on_zoom(
    tmp_path: Path, browser: Any, artefacts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binned lane zoomed in far enough is drawn span by span from the page's own data:
    its bins give way to spans with labels and a click; zoomed out, bins again. (Lanes of
    more than 2,000 spans binned, so that the page is small.)"""
    monkeypatch.setattr(timeline, "MAX_SPANS_PER_LANE", 2_000)
    monkeypatch.setattr(timeline, "DETAIL_CHUNK", 500)
    monkeypatch.setattr(timeline, "TOTAL_BINS", 3_000)
    profile = synthetic_profile(tmp_path, 6_000)  # 30 steps: 4,800 kernels on stream 0
    out = write_report(profile, tmp_path / "r.html")
    page, errors = _page(browser, out)
    lane = "stream 0 · compute"
    y = page.evaluate(
        f"() => document.getElementById('fig-timeline').layout.yaxis.ticktext.indexOf('{lane}')"
    )
    shown = """(y) => document.getElementById('fig-timeline').data
        .filter((t) => t.mode === 'lines' && t.yaxis === 'y')
        .map((t) => [t.name, Array.from(t.y).filter((v) => v === y).length])
        .filter((p) => p[1] > 0)"""

    def labels() -> list[str]:
        return page.evaluate(
            """(y) => (document.getElementById('fig-timeline').layout.annotations || [])
                 .filter((a) => a.name === 'span-label' && a.y === y).map((a) => a.text)""",
            y,
        )

    binned = page.evaluate(shown, y)
    assert binned and labels() == []  # all 4,800 kernels in view: bins, no labels
    # zoomed onto 60 us of step 20: its first kernels, one by one (the profile's own times)
    t = profile.tasks
    origin = min(t["start_ns"].min(), profile.host_events["start_ns"].min())
    step = t[(t["step"] == 20) & (t["stream_id"] == 0)].sort_values("start_ns")
    a = (step["start_ns"].iloc[0] - origin) / 1e3
    _zoom(page, a - 5, a + 60)
    page.wait_for_function(
        "(y) => (document.getElementById('fig-timeline').layout.annotations || [])"
        ".some((a) => a.name === 'span-label' && a.y === y)",
        arg=y,
        timeout=30_000,
    )
    inside = step[(step["end_ns"] - origin) / 1e3 <= a + 60]
    seen = labels()
    assert seen and all(html.unescape(s).rstrip("\u2026") for s in seen)
    assert {html.unescape(s) for s in seen if "\u2026" not in s} <= set(inside["name"])
    detail = page.evaluate(shown, y)
    segments = sum(n for _, n in detail) // 3
    visible = step[
        ((step["end_ns"] - origin) / 1e3 >= a - 5) & ((step["start_ns"] - origin) / 1e3 <= a + 60)
    ]
    assert segments == len(visible)
    assert {name for name, _ in detail} == {"cube", "vector"}
    # a click on the first kernel selects it
    k = step.iloc[0]
    s, e = (k["start_ns"] - origin) / 1e3, (k["end_ns"] - origin) / 1e3
    page.locator("#fig-timeline").scroll_into_view_if_needed()
    x, py = _point(page, (s + e) / 2, lane)
    page.mouse.move(x - 3, py)
    page.mouse.move(x, py, steps=3)
    details = _click_for_details(page, x, py)
    assert f"Selected: {k['name']} (cube) on {lane}" in details
    # as on a lane drawn span by span: its launch and op (spans drawn from detail data too),
    # an arrow from the launch to it
    h = profile.host_events
    launch = h[(h["kind"] == "launch") & (h["task_id"] == k["task_id"])].iloc[0]
    op = h[h["event_id"] == k["host_op_id"]].iloc[0]
    assert f"Launched by: {launch['name']} (launch) on launches at " in details
    assert f"Op: {op['name']} (host op) on main thread at " in details
    assert "Op module: Model/Block" in details
    flows = page.evaluate(
        "() => document.getElementById('fig-timeline').layout.annotations"
        ".filter((a) => a.name === 'flow')"
    )
    assert len(flows) == 1 and flows[0]["x"] == pytest.approx(s, abs=1e-3)
    assert flows[0]["ax"] == pytest.approx((launch["end_ns"] - origin) / 1e3, abs=1e-3)
    # the op's link in the panel selects the op: it lists the kernel it launched
    page.locator("#tl-details a.tl-jump", has_text="(host op)").first.click()
    page.wait_for_timeout(500)
    details = page.locator("#tl-details").inner_text()
    assert f"Selected: {op['name']} (host op) on main thread" in details
    assert "Kernels launched: 1" in details and f"kernel: {k['name']} (cube) on {lane}" in details
    page.locator("#timeline").screenshot(path=str(artefacts / "timeline-detail.png"))
    # zoomed out again: bins
    _zoom(page, 0, (t["end_ns"].max() - origin) / 1e3)
    page.wait_for_function(
        "(y) => !(document.getElementById('fig-timeline').layout.annotations || [])"
        ".some((a) => a.name === 'span-label' && a.y === y)",
        arg=y,
        timeout=30_000,
    )
    assert page.evaluate(shown, y) == binned
    assert errors == []
    page.close()


def _table_after(text: str, heading: str) -> tuple[list[str], list[list[str]]]:
    """The header names and the cell texts of the first table after ``heading``."""
    part = text[text.index(heading) :]
    part = part[: part.index("</table>")]
    head = re.findall(r"<th [^>]*>([^<]*)</th>", part)
    rows = [re.findall(r"<td [^>]*>([^<]*)</td>", r) for r in part.split("<tr>")[2:]]
    return head, rows


def test_operator_table_reads_like_an_operator_view(report_file: Path) -> None:
    """Type, name, shapes, unit, count, total/avg/max, share, bound (MindStudio Insight's
    operator view); the mean is the total over the count, shares are percentages."""
    head, rows = _table_after(
        report_file.read_text(encoding="utf-8"), "<h3>Operators (by name and shapes)</h3>"
    )
    assert head == [
        "Op type",
        "Name",
        "Input shapes",
        "Input dtypes",
        "Unit",
        "Count",
        "Total (us)",
        "Avg (us)",
        "Max (us)",
        "Share of step",
        "Bound",
    ]
    assert rows
    for op_type, name, _, _, unit, count, total, avg, peak, share, bound in rows:
        assert op_type and name and unit, (op_type, name, unit)
        n, t, a, m = (float(v.replace(",", "")) for v in (count, total, avg, peak))
        assert a == pytest.approx(t / n, abs=0.051) and m >= a - 0.051
        assert share.endswith("%") and "e" not in total + avg + peak
        assert bound.endswith("-bound") or (not bound and "AI_" not in unit), (unit, bound)


def test_step_bars_add_up_to_the_step(run_dir: Path) -> None:
    """The step chart's stacked parts (computing, communication not overlapped, idle by
    cause, copies only) partition each step: their sum is the step's time, never more."""
    import msprof_py
    from msprof_py.report.build import _STEP_COLUMNS, _step_groups

    steps = msprof_py.analyze(run_dir).step_breakdown["steps"]
    bars, k = _step_groups(steps)
    assert k == 1 and len(bars) == len(steps) > 0
    parts = bars[[c for c, _, _ in _STEP_COLUMNS if c in bars]].sum(axis=1).to_numpy()
    total = steps.sort_values("step")["step_ns"].to_numpy()
    assert parts == pytest.approx(total, rel=1e-9, abs=1.0)
