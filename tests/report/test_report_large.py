"""Large profile: the report of a million-task profile is written in seconds, stays small and
opens in the browser within a bounded time, saying what it aggregated."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from report_helpers import CHROMIUM, open_report, synthetic_profile

from msprof_py.report import write_report

#: bounds, generous for a loaded 2-core CI machine (measured: see benchmarks/RESULTS.md)
WRITE_S = 60
SIZE_MB = 50
OPEN_MS = 30_000


# slow: the 1M-task report is measured by benchmarks/bench_report.py; this checks it opens
@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing (apt: chromium)")
def test_million_task_report_opens(tmp_path: Path) -> None:
    pytest.importorskip("playwright.sync_api", reason="pip package playwright missing")
    profile = synthetic_profile(tmp_path, 1_000_000)
    assert len(profile.tasks) == 1_000_000
    t0 = time.perf_counter()
    out = write_report(profile, tmp_path / "report.html")  # analysis included
    written_s = time.perf_counter() - t0
    del profile
    size_mb = out.stat().st_size / 2**20
    seen = open_report(out, timeout_ms=2 * OPEN_MS, hover=(0.5, 0.625))  # on lane 1 of 0..3
    print(f"write {written_s:.1f} s, {size_mb:.1f} MiB, open {seen['load_ms']:.0f} ms")
    assert written_s < WRITE_S
    assert size_mb < SIZE_MB
    assert seen["errors"] == []
    assert seen["load_ms"] < OPEN_MS
    lanes = ["stream 1 · copy", "stream 0 · compute", "launches", "main thread"]
    assert seen["page"]["lanes"] == lanes
    assert seen["page"]["gl"] > 0  # WebGL
    notes = " | ".join(seen["notes"])
    for lane, n in (
        ("main thread", "1,000,000"),
        ("stream 0 · compute", "800,000"),
        ("stream 1 · copy", "200,000"),
    ):
        assert f"Level of detail: {lane}: {n} spans aggregated into " in notes
    assert seen["hover"] and "spans aggregated" in seen["hover"]
