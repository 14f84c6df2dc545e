"""The HTML report: self-contained, every section, timeline lanes, escaping, browser smoke."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from report_helpers import CHROMIUM, one_rank_meta, open_report

from msprof_py.profile import TABLES, Profile, load
from msprof_py.profile.schema import default_row
from msprof_py.report import write_report
from msprof_py.report.build import build_html
from msprof_py.report.command import report

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


def test_timeline_lanes(run_dir: Path, report_file: Path) -> None:
    text = report_file.read_text(encoding="utf-8")
    m = re.search(r'id="timeline-lanes">(.*?)</script>', text, re.S)
    assert m
    lanes = json.loads(m.group(1))
    streams = sorted(load(run_dir).tasks["stream_id"].unique())
    assert lanes == ["host"] + [f"stream {s}" for s in streams]
    fig = json.loads(re.search(r'id="fig-timeline-data">(.*?)</script>', text, re.S).group(1))
    drawn = {y for t in fig["data"] if t.get("type") == "scattergl" for y in t.get("y", []) or []}
    assert set(lanes) <= drawn


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
    """Each op link of a finding points at the longest run of that op on the timeline."""
    text = report_file.read_text(encoding="utf-8")
    links = re.findall(r'class="op-link" data-start="([^"]+)" data-end="([^"]+)">([^<]+)<', text)
    assert links
    profile = load(run_dir)
    origin = min(profile.tasks["start_ns"].min(), profile.host_events["start_ns"].min())
    for start, end, name in links:
        name = html.unescape(name)
        tasks = profile.tasks[(profile.tasks["name"] == name) | (profile.tasks["op_type"] == name)]
        rows = tasks if len(tasks) else profile.host_events[profile.host_events["name"] == name]
        longest = rows.loc[(rows["end_ns"] - rows["start_ns"]).idxmax()]
        assert float(start) == pytest.approx((longest["start_ns"] - origin) / 1e3, abs=1e-3)
        assert float(end) == pytest.approx((longest["end_ns"] - origin) / 1e3, abs=1e-3)


def test_browser(run_dir: Path, report_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("playwright.sync_api", reason="pip package playwright missing")
    profile = load(run_dir)
    origin = min(profile.tasks["start_ns"].min(), profile.host_events["start_ns"].min())
    t = profile.tasks[profile.tasks["stream_id"] == profile.tasks["stream_id"].min()]
    longest = t.loc[(t["end_ns"] - t["start_ns"]).idxmax()]
    span = (
        f"stream {longest['stream_id']}",
        (longest["start_ns"] - origin) / 1e3,
        (longest["end_ns"] - origin) / 1e3,
    )
    shot = tmp_path / "report.png"
    seen = open_report(
        report_file, timeout_ms=20_000, screenshot=shot, hover_span=span, click_op_link=True
    )
    assert seen["errors"] == []
    assert set(SECTIONS) <= set(seen["page"]["sections"])
    for fig in ("fig-timeline", "fig-top-ops", "fig-steps", "fig-roofline", "fig-memory"):
        assert fig in seen["page"]["figures"], fig
    # hover works away from a span's middle: near the start of the longest kernel, zoomed in
    assert seen["span_hover"] and str(longest["name"]) in seen["span_hover"]
    assert shot.stat().st_size > 0
    # a recommendation's op link zooms the timeline onto that op
    (s, e), (lo, hi) = seen["op_link"], seen["op_range"]
    assert lo < s <= e < hi and hi - lo < 20 * max(e - s, 5)
