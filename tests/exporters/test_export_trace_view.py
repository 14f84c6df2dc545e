"""trace_view.json and msprof_{ts}.json of a hand-made profile."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from export_helpers import base_ns, make_profile, rich_profile, us_text

from msprof_py.exporters.ascend_pt import export_ascend_pt

PID = 4242  # the meta pid of the hand-made profiles


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("rich")
    export_ascend_pt(run, rich_profile())
    return run


def load_array(path: Path) -> list[dict[str, Any]]:
    events = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(events, list), "trace_view must be a bare JSON array"
    return events


def processes(events: list[dict[str, Any]]) -> dict[str, int]:
    return {
        e["args"]["name"]: e["pid"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def meta_of(events: list[dict[str, Any]], kind: str, pid: int) -> dict[int, Any]:
    key = "name" if kind == "thread_name" else "sort_index"
    return {e["tid"]: e["args"][key] for e in events if e["name"] == kind and e["pid"] == pid}


@pytest.fixture(scope="module")
def trace(exported: Path) -> list[dict[str, Any]]:
    return load_array(exported / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")


def test_processes_and_pid_encoding(trace: list[dict[str, Any]]) -> None:
    procs = processes(trace)
    assert procs == {
        "Python": PID,
        "CANN": (PID << 10) | (7 << 5) | 31,
        "Ascend Hardware": (PID << 10) | (14 << 5) | 0,
        "Communication": (PID << 10) | (16 << 5) | 0,
        "Overlap Analysis": (PID << 10) | (31 << 5) | 0,
    }
    labels = {e["pid"]: e["args"]["labels"] for e in trace if e["name"] == "process_labels"}
    assert labels[PID] == "CPU" and labels[procs["CANN"]] == "CPU"
    assert labels[procs["Ascend Hardware"]] == "NPU 0"
    sort = {e["pid"]: e["args"]["sort_index"] for e in trace if e["name"] == "process_sort_index"}
    assert sort[PID] == 0 and sort[procs["Overlap Analysis"]] == 31


def test_python_ops_steps_and_args(trace: list[dict[str, Any]]) -> None:
    ops = [e for e in trace if e["pid"] == PID and e["ph"] == "X"]
    assert {e["cat"] for e in ops} == {"cpu_op"}
    steps = [e for e in ops if e["name"].startswith("ProfilerStep#")]
    assert [e["name"] for e in steps] == ["ProfilerStep#0", "ProfilerStep#1"]
    mm = next(e for e in ops if e["name"] == "aten::mm")
    assert mm["ts"] == us_text(base_ns() + 2_000)
    # host spans [start, end) are written closed: end - 1 ns
    assert mm["dur"] == pytest.approx(0.999)
    assert mm["args"]["Sequence number"] == -1
    assert mm["args"]["Fwd thread id"] == 0
    assert mm["args"]["Input Dims"] == "128,256;\r\n256,512"
    assert mm["args"]["Input type"] == "float16;\r\nfloat16"
    assert meta_of(trace, "thread_name", PID) == {1: "Thread 1"}


def test_hardware_tasks_per_stream(trace: list[dict[str, Any]]) -> None:
    procs = processes(trace)
    hw = procs["Ascend Hardware"]
    assert meta_of(trace, "thread_name", hw) == {0: "Stream 0", 1: "Stream 1"}
    tasks = {e["args"]["Task Id"]: e for e in trace if e["pid"] == hw and e["ph"] == "X"}
    profile = rich_profile()
    assert sorted(tasks) == sorted(profile.tasks["task_id"])
    for task in profile.tasks.itertuples():
        event = tasks[task.task_id]
        assert event["tid"] == task.stream_id
        assert event["ts"] == us_text(base_ns() + task.start_ns)
        assert event["dur"] == pytest.approx((task.end_ns - task.start_ns) / 1000)
        for key in ("Model Id", "Task Type", "Physic Stream Id", "Batch Id", "Subtask Id"):
            assert key in event["args"]
        assert event["args"]["connection_id"] == task.task_id
    assert tasks[1]["name"] == "aclnnMatMul" and tasks[1]["args"]["Task Type"] == "AI_CORE"
    copy = tasks[0]
    assert copy["name"] == "MEMCPY_ASYNC"
    assert copy["args"]["size(B)"] == 64
    assert copy["args"]["operation"] == "host to device"
    assert copy["args"]["bandwidth(GB/s)"] == pytest.approx(64 / 800)


def test_cann_api_events(trace: list[dict[str, Any]]) -> None:
    cann = processes(trace)["CANN"]
    names = [e["name"] for e in trace if e["pid"] == cann and e["ph"] == "X"]
    assert names.count("AscendCL@aclnnMatMul") == 3
    assert names.count("Node@launch") == 7
    assert "AscendCL@aclrtMemcpyAsync" in names
    assert "HCCL@HcclAllReduce" in names
    assert "AscendCL@aclrtSynchronizeDevice" in names
    assert "AscendCL@aclrtSynchronizeStream" in names  # the blocking copy's wait
    assert "AscendCL@aclrtCreateEvent" in names
    host_to_device = [e for e in trace if e.get("cat") == "HostToDevice"]
    assert len(host_to_device) == 2 * 10


def test_torch_to_npu_flows_link_ops_to_their_kernels(trace: list[dict[str, Any]]) -> None:
    procs = processes(trace)
    flows = defaultdict(dict)
    for e in trace:
        if e.get("name") == "torch_to_npu":
            assert e["cat"] == "async_npu"
            flows[e["id"]][e["ph"]] = e
    profile = rich_profile()
    launched = profile.tasks[profile.tasks["host_op_id"] >= 0]
    assert len(flows) == len(launched)
    ops = profile.host_events.set_index("event_id")
    for task in launched.itertuples():
        ts = us_text(base_ns() + task.start_ns)
        flow = flows[ts]  # id = the kernel's timestamp
        assert flow["s"]["pid"] == PID
        assert flow["s"]["ts"] == us_text(base_ns() + ops.loc[task.host_op_id, "start_ns"])
        assert flow["f"]["pid"] == procs["Ascend Hardware"]
        assert (flow["f"]["ts"], flow["f"]["tid"]) == (ts, task.stream_id)


def test_overlap_analysis_threads_and_sections(trace: list[dict[str, Any]]) -> None:
    ov = processes(trace)["Overlap Analysis"]
    assert meta_of(trace, "thread_name", ov) == {
        0: "Computing",
        1: "Communication",
        2: "Communication(Not Overlapped)",
        3: "Free",
    }
    events = [e for e in trace if e["pid"] == ov and e["ph"] == "X"]
    assert {e["name"]: e["tid"] for e in events} == {
        "Computing": 0,
        "Communication": 1,
        "Communication(Not Overlapped)": 2,
        "Free": 3,
    }
    total = defaultdict(float)
    for e in events:
        total[e["name"]] += e["dur"]
    assert total["Computing"] == pytest.approx(84 + 10)
    assert total["Communication"] == pytest.approx(40)
    assert total["Communication(Not Overlapped)"] == pytest.approx(34)
    assert total["Free"] == pytest.approx(1.6 + (91 - 86.6))


def test_communication_process(trace: list[dict[str, Any]]) -> None:
    comm = processes(trace)["Communication"]
    assert meta_of(trace, "thread_name", comm) == {0: "Group hccl_world_group Communication"}
    (op,) = [e for e in trace if e["pid"] == comm and e["ph"] == "X"]
    assert op["name"] == "hcom_allreduce__0" and op["dur"] == 40


def test_msprof_json_is_the_cann_timeline(exported: Path, trace: list[dict[str, Any]]) -> None:
    (path,) = exported.glob("PROF_*/mindstudio_profiler_output/msprof_*.json")
    msprof = load_array(path)
    assert set(processes(msprof)) == {
        "CANN",
        "Ascend Hardware",
        "Communication",
        "Overlap Analysis",
    }
    python_free = [e for e in trace if e["pid"] != PID and e.get("name") != "torch_to_npu"]
    assert msprof == python_free


def test_no_tasks_still_gives_a_valid_array(tmp_path: Path) -> None:
    profile = make_profile(host_events=[{"name": "aten::empty", "start_ns": 0, "end_ns": 5}])
    export_ascend_pt(tmp_path, profile)
    events = load_array(tmp_path / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    assert set(processes(events)) == {"Python"}
