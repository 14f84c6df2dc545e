"""The real msprof-analyze (PyPI ``msprof-analyze``) reading our exports."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from msprof_analyze_cli import advisor_report, msprof_analyze

pytest.importorskip("msprof_analyze")


@pytest.mark.slow  # the compute-split test below runs the advisor on two samples by default
def test_advisor_reads_a_single_card_run(recorded_run: Path, tmp_path: Path) -> None:
    report = advisor_report(recorded_run, tmp_path)
    assert report["status"] == "success"
    problems = {row[0]: row for row in report["message"]["problems"]["data"]}
    summary = problems["Overall Summary"][1]
    assert "Computing Time" in summary and "Free Time" in summary
    assert "The Model E2E Time is 0.0ms" not in summary
    aicpu = problems["AICPU Issues"]
    assert "NonZero" in aicpu[1] and "Sort" in aicpu[1]
    # every eager kernel on the default 910B preset is a binary (OP State "dynamic") kernel:
    # the advisor reports that, and skips its Block Dim check for dynamic-shape profiles (the
    # compiled run's static kernels get it: tests/graph/backend/test_graph_profile.py)
    assert "Operator Dynamic Shape Issues" in problems
    assert "Block Dim Issues" not in problems


# slow: records two ranks (the cluster exports: tests/exporters/test_export_communication.py)
@pytest.mark.slow
def test_cluster_step_trace_time_of_two_ranks(cluster_runs: Path, tmp_path: Path) -> None:
    msprof_analyze("cluster", "-d", str(cluster_runs), "-m", "all", "-o", str(tmp_path),
                   cwd=tmp_path)  # fmt: skip
    out = tmp_path / "cluster_analysis_output" / "cluster_step_trace_time.csv"
    with open(out, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        cluster = list(reader)
    assert header == [
        "Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Overlapped",
        "Communication", "Free", "Stage", "Bubble",
        "Communication(Not Overlapped and Exclude Receive)", "Preparing",
    ]  # fmt: skip
    ranks = {}
    for run in cluster_runs.glob("*_ascend_pt"):
        (info,) = run.glob("profiler_info_*.json")
        rank = int(info.stem.rsplit("_", 1)[1])
        with open(run / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
            ranks[rank] = {r["Step"]: r for r in csv.DictReader(f)}
    assert sorted(ranks) == [0, 1]
    rows = [r for r in cluster if r["Type"] == "rank"]
    assert {int(r["Index"]) for r in rows} == {0, 1}
    assert len(rows) == sum(len(steps) for steps in ranks.values())
    for row in rows:
        mine = ranks[int(row["Index"])][row["Step"]]
        assert float(row["Computing"]) == pytest.approx(float(mine["Computing"]))
        assert float(row["Free"]) == pytest.approx(float(mine["Free"]))


def _overall_split(run: Path, cwd: Path) -> dict[str, float]:
    """The advisor's Overall Summary table: index name -> duration (ms)."""
    rows = advisor_report(run, cwd)["message"]["Overall Summary"]["data"]
    return {name.strip(" -"): float(ms) for name, ms, _ in rows}


@pytest.mark.parametrize(("sample", "cube"), [("resnet", "Conv"), ("transformer", "Matmul")])
def test_advisor_compute_split_from_modelled_pipes(
    sample_runs: dict[str, Path], sample: str, cube: str, tmp_path: Path
) -> None:
    """With the modelled PMU columns the advisor splits computing time into cube and vector
    work (it skips kernels without ``aiv_vec_time``/``mac_time``: all 0.000 before)."""
    split = _overall_split(sample_runs[sample], tmp_path)
    assert split[cube] > 0 and split["Vector"] > 0
    parts = ("Flash Attention", "Conv", "Matmul", "Vector", "SDMA(Tensor Move)", "Other Cube")
    assert sum(split[p] for p in parts) <= split["Computing Time"] + 1e-3
    (details,) = sample_runs[sample].glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    with open(details, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    kernels = [r for r in rows if r["Accelerator Core"] in ("AI_CORE", "AI_VECTOR_CORE")]
    assert kernels and all(r["aiv_vec_time(us)"] != "N/A" for r in kernels)
    # every Conv* / *MatMul* kernel lands in the advisor's Conv / Matmul rows (so do the
    # vector kernels those ops launch, by the host op they came from)
    typed = sum(
        float(r["Duration(us)"])
        for r in kernels
        if r["Type"].lower().startswith("conv") or "matmul" in r["Type"].lower()
    )
    assert split["Conv"] + split["Matmul"] >= typed / 1000 - 0.002
    assert typed > 0
