"""Analysis figures of imported profiles add up: nested host ops counted once, CUDA syncs
classified like CANN's, profiles found below a folder (one-line errors for none or several)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from import_helpers import one_line_error
from kineto_fixture import SGEMM, _flow, _gpu, _launch, _x, trace, write
from test_ascend_import import write_real

import msprof_py
from msprof_py.analyzers import context, graphs, ops, syncs
from msprof_py.analyzers.api import resolve
from msprof_py.importers.nesting import enclosing, shortest_holding
from msprof_py.profile import ProfileError


def _doc(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The fixture trace's header with ``events`` instead of its events."""
    doc = trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M"] + events
    return doc


def _on(tid: int, event: dict[str, Any]) -> dict[str, Any]:
    return event | {"tid": tid}


#: one step of 200 us: thread 4242 runs linear [10, 110) around t [15, 20) and addmm
#: [30, 90) (which launches the sgemm), then relu [120, 140); thread 99 runs linear
#: [150, 180) around addmm [155, 175) (us)
NESTED = [
    _x("user_annotation", "ProfilerStep#1", 1000, 200),
    _x("cpu_op", "aten::linear", 1010, 100),
    _x("cpu_op", "aten::t", 1015, 5),
    _x("cpu_op", "aten::addmm", 1030, 60),
    _launch("cudaLaunchKernel", 1040, 10, 31),
    _gpu("kernel", SGEMM, 1060, 20, 7, 31),
    *_flow(31, 1040, 1060, 7),
    _x("cpu_op", "aten::relu", 1120, 20),
    _on(99, _x("cpu_op", "aten::linear", 1150, 30)),
    _on(99, _x("cpu_op", "aten::addmm", 1155, 20)),
]


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("nested") / "n.pt.trace.json", _doc(NESTED))


def test_enclosing_is_the_innermost_span_per_thread() -> None:
    # thread 0: A [0, 10) holds B [2, 5) (C [5, 5] starts where B ends: A's, not B's) and D
    # [6, 9); E [12, 20) overlaps F [15, 25) without holding it; thread 1: G [3, 4) alone
    threads = [0, 0, 0, 0, 0, 0, 1]
    starts = [0, 2, 5, 6, 12, 15, 3]
    ends = [10, 5, 5, 9, 20, 25, 4]
    assert list(enclosing(threads, starts, ends)) == [-1, 0, 0, 0, -1, -1, -1]
    # the same spans in another order: the same links
    order = [6, 3, 5, 0, 2, 4, 1]
    got = enclosing(*(([x[i] for i in order]) for x in (threads, starts, ends)))
    back = {order[k]: (order[int(p)] if p >= 0 else -1) for k, p in enumerate(got)}
    assert [back[i] for i in range(7)] == [-1, 0, 0, 0, -1, -1, -1]


def test_kineto_ops_link_to_the_op_enclosing_them(nested: Path) -> None:
    host = msprof_py.load(nested).host_events.set_index("event_id")
    ops = host[host["kind"] == "op"]

    def parent(name: str, thread: int) -> str:
        pid = ops[(ops["name"] == name) & (ops["thread"] == thread)]["parent_id"].iloc[0]
        return host.loc[pid, "name"] if pid >= 0 else ""

    assert parent("aten::t", 4242) == "aten::linear"
    assert parent("aten::addmm", 4242) == "aten::linear"
    assert parent("aten::addmm", 99) == "aten::linear"  # its own thread's linear
    assert parent("aten::linear", 4242) == "" and parent("aten::relu", 4242) == ""
    launch = host[host["kind"] == "launch"]
    assert host.loc[launch["parent_id"].iloc[0], "name"] == "aten::addmm"


def test_host_ops_self_time_counts_nested_ops_once(nested: Path) -> None:
    data = context.prepare(msprof_py.load(nested), 1)
    table = ops.host_ops(data, None).set_index("name")
    # self: linear 100 - 5 - 60 = 35 us and 30 - 20 = 10 us; addmm 60 + 20; relu 20; t 5
    expected_self = {"aten::linear": 45_000, "aten::addmm": 80_000, "aten::relu": 20_000}
    expected_self["aten::t"] = 5_000
    assert table["host_self_ns"].to_dict() == expected_self
    assert table.loc["aten::linear", "host_total_ns"] == 130_000  # the spans, nested kept
    # self times add up to the top-level ops' spans: 100 + 20 + 30 us
    assert table["host_self_ns"].sum() == 150_000
    assert graphs.split(data)["eager_host_ns_per_step"] == 150_000
    assert table.loc["aten::addmm", "launches"] == 1
    assert table.loc["aten::addmm", "device_total_ns"] == 20_000
    assert table["share_of_step"].sum() == pytest.approx(150_000 / 200_000)  # of self time


def _holding_by_scan(threads, starts, ends, thread: int, time: int) -> int:
    """The reference: scan every span for the shortest on ``thread`` holding ``time``."""
    best = -1
    for i, (tid, s, e) in enumerate(zip(threads, starts, ends, strict=True)):
        if tid == thread and s <= time <= e and (best < 0 or e - s < ends[best] - starts[best]):
            best = i
    return best


def test_shortest_holding_is_the_scan_of_every_span() -> None:
    # thread 0: A [0, 10] holds B [2, 5]; C [5, 5] (zero-length, B's end); D [0, 10] (A's
    # twin: A, first, wins); E [12, 20] overlaps F [15, 25]; thread 1: G [3, 4]
    threads, starts, ends = (
        [0, 0, 0, 0, 0, 0, 1],
        [0, 2, 5, 0, 12, 15, 3],
        [10, 5, 5, 10, 20, 25, 4],
    )
    at = [0, 0, 0, 0, 0, 0, 0, 1, 1, 2]
    times = [5, 3, 0, 10, 11, 16, 26, 3, 5, 3]
    got = shortest_holding(threads, starts, ends, at, times).tolist()
    assert got == [2, 1, 0, 0, -1, 4, -1, 6, -1, -1]
    rng = np.random.default_rng(7)  # many random spans, ties and zero lengths included
    threads = rng.integers(0, 3, 300)
    starts = rng.integers(0, 200, 300)
    ends = starts + rng.integers(0, 40, 300)
    at, times = rng.integers(0, 4, 500), rng.integers(0, 250, 500)
    got = shortest_holding(threads, starts, ends, at, times).tolist()
    ref = [_holding_by_scan(threads, starts, ends, t, x) for t, x in zip(at, times, strict=True)]
    assert got == ref


def _ascend_nested(parent: Path) -> Path:
    """A torch_npu folder of one 200 us step: thread 7 runs linear [10, 110) around t [15, 20)
    and addmm [30, 90) (whose aclnn launch at 40 the flowless trace leaves to the time
    nesting), then relu [120, 140) (a stream sync at 125); thread 8 runs linear [150, 180)
    around addmm [155, 175) (us)."""

    def op(name: str, ts: int, dur: int, tid: int = 7) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 1,
            "tid": tid,
            "ts": ts,
            "dur": dur,
        }

    def cann(name: str, ts: int, dur: int, **args: Any) -> dict[str, Any]:
        return {
            "ph": "X",
            "name": f"AscendCL@{name}",
            "pid": 2,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    events = [
        *(
            {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
            for pid, name in ((1, "Python"), (2, "CANN"), (3, "Ascend Hardware"))
        ),
        {"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 7, "ts": 1000, "dur": 200},
        op("aten::linear", 1010, 100),
        op("aten::t", 1015, 5),
        op("aten::addmm", 1030, 60),
        cann("aclnnAddmm", 1040, 10, connection_id=31),
        op("aten::relu", 1120, 20),
        cann("aclrtSynchronizeStream", 1125, 10),
        op("aten::linear", 1150, 30, tid=8),
        op("aten::addmm", 1155, 20, tid=8),
        {
            "ph": "X",
            "name": "MatMulV2",
            "pid": 3,
            "tid": 2,
            "ts": 1060,
            "dur": 20,
            "args": {"Stream Id": 2, "Task Type": "AI_CORE", "connection_id": 31},
        },
    ]
    run = parent / "node_1_20250109085251123_ascend_pt"
    (run / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(events))
    return run


def test_ascend_pt_ops_nest_and_their_shares_add_up(tmp_path: Path) -> None:
    profile = msprof_py.load(_ascend_nested(tmp_path))
    host = profile.host_events.set_index("event_id")

    def parent(kind: str, name: str, thread: int = 7) -> str:
        row = host[(host["kind"] == kind) & (host["name"] == name) & (host["thread"] == thread)]
        pid = row["parent_id"].iloc[0]
        return host.loc[pid, "name"] if pid >= 0 else ""

    assert parent("op", "aten::t") == parent("op", "aten::addmm") == "aten::linear"
    assert parent("op", "aten::addmm", 8) == "aten::linear"  # its own thread's linear
    assert parent("op", "aten::linear") == parent("op", "aten::relu") == ""
    assert parent("launch", "aclnnAddmm") == "aten::addmm"  # the shortest op holding it
    assert parent("sync", "aclrtSynchronizeStream") == "aten::relu"
    data = context.prepare(profile, 0)
    table = ops.host_ops(data, None).set_index("name")
    # a trace_view span of d us ends d us + 1 ns after its start (the exports' closed
    # intervals): linear self 100.001 - 5.001 - 60.001 us and 30.001 - 20.001 us ...
    assert table["host_self_ns"].to_dict() == {
        "aten::linear": 34_999 + 10_000,
        "aten::addmm": 60_001 + 20_001,
        "aten::relu": 20_001,
        "aten::t": 5_001,
    }
    assert table.loc["aten::linear", "host_total_ns"] == 130_002  # the spans, nested kept
    assert table.loc["aten::addmm", "launches"] == 1
    # shares are of the self time over the 200.001 us step: they add up to the top-level
    # ops' 150.003 us, at most the step (the spans' shares would add up to 1.15)
    assert data.step_time_ns == 200_001
    assert table["share_of_step"].to_dict() == pytest.approx(
        (table["host_self_ns"] / 200_001).to_dict()
    )
    assert table["share_of_step"].sum() == pytest.approx(150_003 / 200_001)
    assert table["share_of_step"].sum() <= 1.0
    assert (table["host_total_ns"].sum() / 200_001) > 1.0  # what the spans would give


def test_cuda_syncs_are_classified_like_their_aclrt_counterparts(tmp_path: Path) -> None:
    copy_dtoh = "Memcpy DtoH (Device -> Pageable)"
    events = [
        _x("user_annotation", "ProfilerStep#1", 1000, 400),
        _launch("cudaDeviceSynchronize", 1010, 10, 40),
        _launch("cudaEventSynchronize", 1030, 10, 41),
        _launch("cudaStreamWaitEvent", 1050, 2, 42),  # a device-side wait: no host sync
        _x("cpu_op", "aten::_local_scalar_dense", 1100, 40),
        _launch("cudaMemcpyAsync", 1105, 5, 43),
        _gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 1112, 2, 7, 43, bytes=4),
        _launch("cudaStreamSynchronize", 1115, 20, 44),
        _x("cpu_op", "aten::copy_", 1200, 60),
        _launch("cudaMemcpy", 1205, 50, 45),  # synchronous: returns when the copy is done
        _gpu("gpu_memcpy", copy_dtoh, 1210, 40, 7, 45, bytes=4096),
        _launch("cudaStreamSynchronize", 1300, 30, 46),
    ]
    p = write(tmp_path / "s.pt.trace.json", _doc(events))
    points = syncs.points(context.prepare(msprof_py.load(p), 1))
    got = sorted(zip(points["name"], points["kind"], points["duration_ns"], strict=True))
    assert got == [
        ("cudaDeviceSynchronize", "synchronize", 10_000),
        ("cudaEventSynchronize", "synchronize", 10_000),
        ("cudaMemcpy", "pageable copy", 50_000),
        ("cudaStreamSynchronize", ".item()", 20_000),
        ("cudaStreamSynchronize", "synchronize", 30_000),
    ]
    # the synchronous copy stays linked to its copy task
    tasks = msprof_py.load(p).tasks
    assert tasks.loc[tasks["op_type"] == "MEMCPY_D2H", "name"].tolist() == [
        "aten::_local_scalar_dense",
        "aten::copy_",
    ]


def test_resolve_finds_an_imported_run_levels_down(tmp_path: Path) -> None:
    # a torch_npu run two levels down: parent/job/<x>_ascend_pt/ASCEND_PROFILER_OUTPUT
    job = tmp_path / "parent" / "job"
    write_real(job)
    p = resolve(tmp_path / "parent")
    assert p.meta[p.ranks[0]]["source_format"] == "ascend_pt"
    assert Path(p.path) == job
    # a Kineto trace three levels down
    deep = tmp_path / "k" / "a" / "b" / "logs"
    deep.mkdir(parents=True)
    write(deep / "w.pt.trace.json")
    assert resolve(tmp_path / "k").meta[1]["source_format"] == "kineto"


def test_several_profiles_below_a_folder_are_an_error(tmp_path: Path) -> None:
    write_real(tmp_path / "a")
    (tmp_path / "b" / "c").mkdir(parents=True)
    write(tmp_path / "b" / "c" / "w.pt.trace.json")
    with pytest.raises(ProfileError, match=r"2 profiles below it \(a, b\); name one"):
        resolve(tmp_path)
    line = one_line_error(tmp_path)
    assert "2 profiles below it" in line


def test_no_profile_below_a_folder_is_one_line_saying_what_was_looked_for(tmp_path: Path) -> None:
    (tmp_path / "x" / "y").mkdir(parents=True)
    line = one_line_error(tmp_path)
    assert "no profile here or in its subfolders up to 3 levels down" in line
    for looked in (
        "msprof_raw/",
        "ASCEND_PROFILER_OUTPUT/",
        "mindstudio_profiler_output",
        ".pt.trace.json",
    ):
        assert looked in line
