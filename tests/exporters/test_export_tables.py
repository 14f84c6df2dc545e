"""The Ascend CSV tables of a hand-made profile: exact headers, values checked against it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from export_helpers import base_ns, big_profile, make_profile, rich_profile, us_text

from msprof_py.exporters.ascend_pt import export_ascend_pt

OUT = "ASCEND_PROFILER_OUTPUT"

#: the modelled PipeUtilization columns (A2 order; mte1 and icache miss rates not modelled)
PMU = (
    ",aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),"
    "aic_scalar_ratio,aic_mte2_time(us),aic_mte2_ratio,aic_fixpipe_time(us),aic_fixpipe_ratio,"
    "aiv_time(us),aiv_total_cycles,aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),"
    "aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,"
    "cube_utilization(%)"
)
HEADERS = {
    "kernel_details.csv": "Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,"
    "Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim,Mix Block Dim,"
    "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats"
    + PMU,
    "op_statistic.csv": "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),"
    "Avg Time(us),Max Time(us),Ratio(%)",
    "step_trace_time.csv": "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,"
    "Communication,Free,Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing",
    "api_statistic.csv": "Device_id,Level,API Name,Time(us),Count,Avg(us),Min(us),Max(us),Variance",
    "operator_details.csv": "Name,Input Shapes,Call Stack,Host Self Duration(us),"
    "Host Total Duration(us),Device Self Duration(us),Device Total Duration(us),"
    "Device Self Duration With AICore(us),Device Total Duration With AICore(us)",
    "memory_record.csv": "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),"
    "Total Active(MB),Stream Ptr,Device Type",
    "operator_memory.csv": "Name,Size(KB),Allocation Time(us),Release Time(us),"
    "Active Release Time(us),Duration(us),Active Duration(us),Allocation Total Allocated(MB),"
    "Allocation Total Reserved(MB),Allocation Total Active(MB),Release Total Allocated(MB),"
    "Release Total Reserved(MB),Release Total Active(MB),Stream Ptr,Device Type",
    "npu_module_mem.csv": "Device_id,Component,Timestamp(us),Total Reserved(MB),Device",
}
CANN_HEADERS = {
    "op_summary": "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,"
    "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,"
    "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats"
    + PMU,
    "op_statistic": HEADERS["op_statistic.csv"],
    "api_statistic": HEADERS["api_statistic.csv"],
    "task_time": "Device_id,kernel_name,kernel_type,stream_id,task_id,task_time(us),"
    "task_start(us),task_stop(us)",
    "step_trace": "Device_id,Iteration ID,FP Start(us),BP End(us),Iteration End(us),"
    "Iteration Time(us),FP to BP Time(us),Iteration Refresh(us),Data Aug Bound(us),Model ID,"
    "Reduce Start(us),Reduce Duration(us)",
    "npu_module_mem": "Device_id,Component,Timestamp(us),Total Reserved(KB),Device",
    "communication_statistic": "Device_id,OP Type,Count,Total Time(us),Min Time(us),"
    "Avg Time(us),Max Time(us),Ratio(%)",
}


def read(path: Path) -> tuple[str, list[dict[str, str]]]:
    """The header line and the rows of a CSV file."""
    text = path.read_text(encoding="utf-8")
    header = text.split("\n", 1)[0]
    return header, list(csv.DictReader(text.splitlines()))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("rich")
    export_ascend_pt(run, rich_profile())
    return run


def cann(run: Path, name: str) -> Path:
    (path,) = run.glob(f"PROF_*/mindstudio_profiler_output/{name}_*.csv")
    return path


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_ascend_profiler_output_headers(exported: Path, name: str) -> None:
    assert read(exported / OUT / name)[0] == HEADERS[name]


@pytest.mark.parametrize("name", sorted(CANN_HEADERS))
def test_cann_headers(exported: Path, name: str) -> None:
    assert read(cann(exported, name))[0] == CANN_HEADERS[name]


def test_kernel_details_rows_are_the_kernels_and_collectives(exported: Path) -> None:
    profile = rich_profile()
    tasks = profile.tasks[profile.tasks["kind"].isin(["kernel", "collective"])]
    tasks = tasks.sort_values("start_ns")
    _, rows = read(exported / OUT / "kernel_details.csv")
    base = base_ns()
    assert [int(r["Task ID"]) for r in rows] == tasks["task_id"].tolist()
    for row, task in zip(rows, tasks.itertuples(), strict=True):
        assert float(row["Duration(us)"]) == pytest.approx((task.end_ns - task.start_ns) / 1000)
        assert row["Start Time(us)"] == us_text(base + task.start_ns)
        assert float(row["Wait Time(us)"]) == pytest.approx(task.wait_ns / 1000)
        assert int(row["Step Id"]) == task.step
        assert int(row["Block Dim"]) == task.block_dim
        assert int(row["Stream ID"]) == task.stream_id
        assert row["Model ID"] == "4294967295"
    by_id = {int(r["Task ID"]): r for r in rows}
    mm = by_id[1]
    assert (mm["Name"], mm["Type"], mm["Accelerator Core"]) == ("aclnnMatMul", "MatMul", "AI_CORE")
    assert mm["Input Shapes"] == '"128,256;256,512"'  # literal quotes, as torch_npu writes
    assert mm["Input Data Types"] == "FLOAT16;FLOAT16"
    assert mm["Input Formats"] == "ND;FRACTAL_NZ"
    assert mm["OP State"] == "static"
    assert (by_id[2]["Accelerator Core"], by_id[2]["Mix Block Dim"]) == ("MIX_AIC", "24")
    assert mm["Mix Block Dim"] == "0"
    assert by_id[3]["Accelerator Core"] == "AI_CPU"
    assert by_id[3]["Input Shapes"] == '""'  # 0-d tensors
    assert by_id[4]["Input Data Types"] == "DOUBLE"
    assert by_id[8]["Input Data Types"] == "DT_BF16;DT_BF16"
    coll = by_id[9]
    assert (coll["Name"], coll["Type"], coll["Accelerator Core"], coll["OP State"]) == (
        "hcom_allreduce__0",
        "hcom_allreduce_",
        "COMMUNICATION",
        "N/A",
    )


def test_op_summary_is_kernel_details_under_cann_names(exported: Path) -> None:
    _, details = read(exported / OUT / "kernel_details.csv")
    _, summary = read(cann(exported, "op_summary"))
    rename = {
        "Op Name": "Name",
        "OP Type": "Type",
        "Task Type": "Accelerator Core",
        "Task Start Time(us)": "Start Time(us)",
        "Task Duration(us)": "Duration(us)",
        "Task Wait Time(us)": "Wait Time(us)",
    }
    assert [{rename.get(k, k): v for k, v in r.items()} for r in summary] == [
        {k: v for k, v in r.items() if k != "Step Id"} for r in details
    ]


def test_task_time_lists_every_task(exported: Path) -> None:
    profile = rich_profile()
    _, rows = read(cann(exported, "task_time"))
    assert sorted(int(r["task_id"]) for r in rows) == sorted(profile.tasks["task_id"])
    base = base_ns()
    copy = next(r for r in rows if r["task_id"] == "0")
    assert (copy["kernel_name"], copy["kernel_type"]) == ("MEMCPY_ASYNC", "PCIE_DMA_SQE")
    assert copy["task_start(us)"] == us_text(base + 1_000)
    assert copy["task_stop(us)"] == us_text(base + 1_800)
    assert float(copy["task_time(us)"]) == 0.8
    event = next(r for r in rows if r["task_id"] == "7")
    assert event["kernel_type"] == "EVENT_RECORD_SQE"


def test_op_statistic_sums_kernels_by_type_and_core(exported: Path) -> None:
    _, rows = read(exported / OUT / "op_statistic.csv")
    stats = {(r["OP Type"], r["Core Type"]): r for r in rows}
    assert set(stats) == {
        ("MatMul", "AI_CORE"),
        ("MatMul", "MIX_AIC"),
        ("Add", "AI_CPU"),
        ("NonZero", "AI_CPU"),
        ("Mul", "AI_VECTOR_CORE"),
        ("Add", "AI_VECTOR_CORE"),
    }
    mm = stats[("MatMul", "AI_CORE")]
    assert (int(mm["Count"]), float(mm["Total Time(us)"])) == (2, 20.0)
    total = 10 + 8 + 30 + 30 + 3 + 3 + 10
    assert float(mm["Ratio(%)"]) == pytest.approx(100 * 20 / total, abs=1e-3)
    assert sum(float(r["Ratio(%)"]) for r in rows) == pytest.approx(100, abs=0.01)
    # largest total first
    totals = [float(r["Total Time(us)"]) for r in rows]
    assert totals == sorted(totals, reverse=True)


def test_step_trace_time_matches_independent_unions(exported: Path) -> None:
    _, rows = read(exported / OUT / "step_trace_time.csv")
    by_step = {r["Step"]: {k: float(v) for k, v in r.items() if k != "Step"} for r in rows}
    # step 0: kernels 2.6-86.6 µs back to back; copy 1.0-1.8 and the free gap until the first
    # kernel; device range of the step: first task (1.0) to its last end (86.6)
    assert by_step["0"]["Computing"] == pytest.approx(84.0)
    assert by_step["0"]["Free"] == pytest.approx(1.6)
    assert by_step["0"]["Communication"] == 0
    assert by_step["0"]["Preparing"] == pytest.approx(2.6)
    # step 1: MatMul 91-101, allreduce 95-135 -> 6 µs of the collective hidden by compute
    step1 = by_step["1"]
    assert step1["Computing"] == pytest.approx(10)
    assert step1["Communication"] == pytest.approx(40)
    assert step1["Communication(Not Overlapped)"] == pytest.approx(34)
    assert step1["Overlapped"] == pytest.approx(6)
    assert step1["Stage"] == pytest.approx(135 - 91)
    assert step1["Preparing"] == pytest.approx(91 - 9)
    assert step1["Communication(Not Overlapped and Exclude Receive)"] == pytest.approx(34)


def test_step_trace_of_cann(exported: Path) -> None:
    base = base_ns()
    _, rows = read(cann(exported, "step_trace"))
    first, second = rows
    assert first["Iteration ID"] == "1" and second["Iteration ID"] == "2"
    assert first["FP Start(us)"] == us_text(base + 1_000)
    # the last kernel launched before Optimizer.step (6.0 µs host) is the NonZero: 80.6 µs
    assert first["BP End(us)"] == us_text(base + 80_600)
    assert first["Iteration End(us)"] == us_text(base + 86_600)
    assert first["Data Aug Bound(us)"] == "N/A"
    assert float(second["Data Aug Bound(us)"]) == pytest.approx(91 - 86.6)
    assert second["Reduce Start(us)"] == us_text(base + 95_000)
    assert float(second["Reduce Duration(us)"]) == 40


def test_api_statistic_counts_launches_and_syncs(exported: Path) -> None:
    _, rows = read(exported / OUT / "api_statistic.csv")
    stats = {(r["Level"], r["API Name"]): r for r in rows}
    assert all(r["Device_id"] == "host" for r in rows)
    assert int(stats[("acl", "aclnnMatMul")]["Count"]) == 3
    assert int(stats[("node", "launch")]["Count"]) == 7  # one per kernel launch
    assert int(stats[("communication", "HcclAllReduce")]["Count"]) == 1
    assert float(stats[("acl", "aclrtSynchronizeDevice")]["Time(us)"]) == pytest.approx(43.5)
    assert float(stats[("acl", "aclrtSynchronizeStream")]["Time(us)"]) == pytest.approx(1.4)
    assert float(stats[("acl", "aclrtCreateEvent")]["Time(us)"]) == pytest.approx(0.7)
    assert not any("queue full" in name for _, name in stats)


def test_operator_details_device_times(exported: Path) -> None:
    _, rows = read(exported / OUT / "operator_details.csv")
    by_name: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_name.setdefault(r["Name"], []).append(r)
    mm = by_name["aten::mm"][0]
    assert float(mm["Device Self Duration(us)"]) == 10
    assert float(mm["Device Total Duration With AICore(us)"]) == 10
    cpu = by_name["aten::nonzero"][0]
    assert float(cpu["Device Total Duration(us)"]) == 30
    assert float(cpu["Device Total Duration With AICore(us)"]) == 0
    opt = by_name["Optimizer.step#SGD.step"][0]
    assert float(opt["Host Total Duration(us)"]) == 3
    assert float(opt["Host Self Duration(us)"]) == 1  # minus mul_ and add_ inside it
    assert float(opt["Device Total Duration(us)"]) == 6
    assert float(opt["Device Self Duration(us)"]) == 0


def test_memory_tables(exported: Path) -> None:
    base = base_ns()
    _, record = read(exported / OUT / "memory_record.csv")
    assert len(record) == 7
    assert {r["Component"] for r in record} == {"PTA"}
    assert record[-1]["Timestamp(us)"] == us_text(base + 91_000)
    assert float(record[-1]["Total Reserved(MB)"]) == 22
    _, blocks = read(exported / OUT / "operator_memory.csv")
    # the first block at the address is freed at 7 µs, the second (same address) at 91 µs
    assert [(b["Name"], b["Release Time(us)"]) for b in blocks] == [
        ("aten::empty", us_text(base + 7_000)),
        ("aten::mm", ""),
        ("aten::add_", us_text(base + 91_000)),
    ]
    assert float(blocks[0]["Duration(us)"]) == 7
    assert float(blocks[0]["Size(KB)"]) == 1
    assert float(blocks[2]["Release Total Reserved(MB)"]) == 22
    _, module = read(exported / OUT / "npu_module_mem.csv")
    assert [float(r["Total Reserved(MB)"]) for r in module] == [2, 22]
    _, module_kb = read(cann(exported, "npu_module_mem"))
    assert [float(r["Total Reserved(KB)"]) for r in module_kb] == [2048, 22528]


def test_communication_statistic(exported: Path) -> None:
    _, rows = read(cann(exported, "communication_statistic"))
    assert [(r["OP Type"], r["Count"], float(r["Total Time(us)"])) for r in rows] == [
        ("hcom_allreduce_", "1", 40.0)
    ]


def test_without_steps_there_is_no_step_id_and_an_empty_step(tmp_path: Path) -> None:
    profile = make_profile(tasks=[{"start_ns": 10, "end_ns": 20}, {"start_ns": 30, "end_ns": 45}])
    export_ascend_pt(tmp_path, profile)
    header, rows = read(tmp_path / OUT / "kernel_details.csv")
    assert header.startswith("Device_id,Model ID,")
    assert len(rows) == 2
    _, steps = read(tmp_path / OUT / "step_trace_time.csv")
    assert len(steps) == 1 and steps[0]["Step"] == ""
    assert float(steps[0]["Computing"]) == pytest.approx(0.025)
    assert not (tmp_path / OUT / "memory_record.csv").exists()  # no memory recorded


def test_a_larger_synthetic_profile_exports_consistently(tmp_path: Path) -> None:
    profile = big_profile(20_000, n_steps=20)
    export_ascend_pt(tmp_path, profile)
    _, kernels = read(tmp_path / OUT / "kernel_details.csv")
    summary = profile.tasks["kind"].isin(["kernel", "collective"])
    assert len(kernels) == int(summary.sum())
    _, steps = read(tmp_path / OUT / "step_trace_time.csv")
    assert [int(s["Step"]) for s in steps] == list(range(20))
    _, ops = read(tmp_path / OUT / "operator_details.csv")
    assert len(ops) == int((profile.host_events["kind"] == "op").sum())
