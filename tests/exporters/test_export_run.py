"""export_run on real recorded runs: the layout, values against the profile, never overwrite,
reproducibility, and the layer rule (no torch, no runtime objects)."""

from __future__ import annotations

import csv
import filecmp
import json
import re
import shutil
from pathlib import Path

import pytest

import msprof_py
from msprof_py.exporters import ExportExistsError, export_run

OUTPUT_FILES = {
    "trace_view.json",
    "kernel_details.csv",
    "operator_details.csv",
    "op_statistic.csv",
    "step_trace_time.csv",
    "api_statistic.csv",
    "communication.json",
    "communication_matrix.json",
    "memory_record.csv",
    "operator_memory.csv",
    "npu_module_mem.csv",
}
CANN_FILES = [
    r"msprof_\d{14}\.json",
    r"op_summary_\d{14}\.csv",
    r"op_statistic_\d{14}\.csv",
    r"api_statistic_\d{14}\.csv",
    r"task_time_\d{14}\.csv",
    r"step_trace_\d{14}\.csv",
    r"npu_module_mem_\d{14}\.csv",
]
EXPORTERS = Path(msprof_py.__file__).parent / "exporters"


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_single_card_layout(recorded_run: Path) -> None:
    assert re.fullmatch(r".+_\d+_\d{17}_ascend_pt", recorded_run.name)
    top = {p.name for p in recorded_run.iterdir()}
    (prof,) = [n for n in top if n.startswith("PROF_")]
    assert re.fullmatch(r"PROF_\d{6}_\d{17}_\w+", prof)
    assert top == {"msprof_raw", "profiler_info.json", "profiler_metadata.json",
                   "ASCEND_PROFILER_OUTPUT", prof}  # fmt: skip
    out = recorded_run / "ASCEND_PROFILER_OUTPUT"
    assert {p.name for p in out.iterdir()} == OUTPUT_FILES
    assert not list(recorded_run.rglob("*.db"))
    cann = {p.name for p in (recorded_run / prof / "mindstudio_profiler_output").iterdir()}
    for pattern in CANN_FILES:
        assert [n for n in cann if re.fullmatch(pattern, n)], pattern
    info = json.loads((recorded_run / prof / "device_0" / "info.json.0").read_text())
    (device,) = info["DeviceInfo"]
    assert (device["ai_core_num"], device["aiv_num"], device["aic_frequency"]) == (24, 48, "1800")
    meta = json.loads((recorded_run / "profiler_metadata.json").read_text())
    assert isinstance(meta["ENV_VARIABLES"], dict)
    profiler_info = json.loads((recorded_run / "profiler_info.json").read_text())
    assert profiler_info["rank_id"] == 0
    assert profiler_info["config"]["experimental_config"]["_profiler_level"] == "Level1"


def test_values_match_the_profile(recorded_run: Path) -> None:
    profile = msprof_py.load(recorded_run)
    tasks = profile.tasks.set_index("task_id")
    out = recorded_run / "ASCEND_PROFILER_OUTPUT"
    kernels = rows(out / "kernel_details.csv")
    expected = tasks[tasks["kind"].isin(["kernel", "collective"])]
    assert len(kernels) == len(expected) > 0
    for row in kernels:
        task = tasks.loc[int(row["Task ID"])]
        assert float(row["Duration(us)"]) == pytest.approx((task.end_ns - task.start_ns) / 1000)
        assert int(row["Step Id"]) == task.step
    cpu = {r["Type"] for r in kernels if r["Accelerator Core"] == "AI_CPU"}
    assert {"NonZero", "Sort"} <= cpu
    steps = rows(out / "step_trace_time.csv")
    assert [int(r["Step"]) for r in steps] == sorted(profile.steps["step"])
    trace = json.loads((out / "trace_view.json").read_text())
    assert isinstance(trace, list)
    flows = [e for e in trace if e.get("name") == "torch_to_npu" and e["ph"] == "f"]
    ops = set(profile.host_events.loc[profile.host_events["kind"] == "op", "event_id"])
    assert len(flows) == int(profile.tasks["host_op_id"].isin(ops).sum()) > 0
    assert json.loads((out / "communication.json").read_text()) == {}  # no communication
    assert json.loads((out / "communication_matrix.json").read_text()) == {}


def test_never_overwrites(recorded_run: Path) -> None:
    out = recorded_run / "ASCEND_PROFILER_OUTPUT"
    before = {p: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ExportExistsError, match="already exported"):
        export_run(recorded_run)
    with pytest.raises(FileExistsError):
        export_run(recorded_run)
    assert {p: p.read_bytes() for p in out.iterdir()} == before


def test_export_is_a_pure_function_of_the_profile(recorded_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / recorded_run.name
    shutil.copytree(recorded_run / "msprof_raw", copy / "msprof_raw")
    export_run(copy)  # another process, another time: the same bytes as the session wrote
    for path in recorded_run.rglob("*"):
        if path.is_file() and "msprof_raw" not in path.parts:
            twin = copy / path.relative_to(recorded_run)
            assert filecmp.cmp(path, twin, shallow=False), path.name


def test_ranks_of_a_distributed_run_name_their_info_file(cluster_runs: Path) -> None:
    runs = sorted(cluster_runs.glob("*_ascend_pt"))
    assert len(runs) == 2
    names = sorted(p.name for run in runs for p in run.glob("profiler_info*.json"))
    assert names == ["profiler_info_0.json", "profiler_info_1.json"]
