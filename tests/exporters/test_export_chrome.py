"""The Chrome / Perfetto trace."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from export_helpers import make_profile, rich_profile

from msprof_py.exporters import write_chrome_trace
from msprof_py.profile import Profile


def load(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and data["displayTimeUnit"] == "ns"
    return data


def test_one_rank(tmp_path: Path) -> None:
    profile = rich_profile()
    path = write_chrome_trace(profile, tmp_path / "trace.json")
    events = load(path)["traceEvents"]
    for e in events:
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {1: "Host", 2: "Device", 3: "Memory"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    assert threads[(2, 0)] == "Stream 0" and threads[(2, 1)] == "Stream 1"
    assert threads[(1, 0)] == "Steps"
    tasks = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert len(tasks) == len(profile.tasks)
    mm = next(e for e in tasks if e["args"]["task_id"] == 1)
    assert (mm["ts"], mm["dur"]) == (2.6, 10.0)  # relative µs
    assert mm["name"] == "aten::mm" and mm["args"]["op_type"] == "MatMul"
    host = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert {e["cat"] for e in host} == {"op", "launch", "sync", "api", "annotation", "step"}
    counters = [e for e in events if e["ph"] == "C"]
    assert len(counters) == len(profile.memory)
    assert counters[-1]["args"]["reserved"] == 22
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(ends)
    assert len(starts) == int((profile.tasks["host_op_id"] >= 0).sum())
    flow = ends[1]  # task 1 (rank 0): aten::mm at 2.0 µs -> kernel at 2.6 µs
    assert (flow["pid"], flow["tid"], flow["ts"], flow["bp"]) == (2, 0, 2.6, "e")
    assert (starts[1]["pid"], starts[1]["ts"]) == (1, 2.0)


def test_several_ranks_and_one_of_them(tmp_path: Path) -> None:
    r0 = rich_profile()
    r1 = rich_profile(rank=1, world_size=2)
    tables = {name: pd.concat([r0.tables[name], r1.tables[name]]) for name in r0.tables}
    both = Profile(Path("."), {**r0.meta, **r1.meta}, tables)
    events = load(write_chrome_trace(both, tmp_path / "all.json"))["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert "Host (rank 1)" in names and "Device (rank 0)" in names
    ids = [e["id"] for e in events if e["ph"] == "s"]
    assert len(ids) == len(set(ids))  # flow ids unique across ranks
    one = load(write_chrome_trace(both, tmp_path / "r1.json", rank=1))["traceEvents"]
    assert {e["pid"] for e in one} == {4, 5, 6}


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("keep")
    with pytest.raises(FileExistsError):
        write_chrome_trace(make_profile(), path)
    assert path.read_text() == "keep"


def test_empty_profile_is_valid(tmp_path: Path) -> None:
    events = load(write_chrome_trace(make_profile(), tmp_path / "e.json"))["traceEvents"]
    assert all(e["ph"] == "M" for e in events)
