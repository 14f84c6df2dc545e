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


def test_overwrite_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("keep")
    write_chrome_trace(rich_profile(), path, overwrite=True)
    assert load(path)["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]  # no temporary file left


def test_gzip_holds_the_same_trace(tmp_path: Path) -> None:
    import gzip

    from msprof_py.exporters.sizes import json_size

    plain = write_chrome_trace(rich_profile(), tmp_path / "trace.json")
    packed = write_chrome_trace(rich_profile(), tmp_path / "trace.json.gz")
    text = gzip.decompress(packed.read_bytes())
    assert text == plain.read_bytes()
    assert json_size(packed) == plain.stat().st_size  # the size a viewer loads
    assert packed.stat().st_size < plain.stat().st_size
    # no time stamp in the header: the same profile gives the same bytes
    again = write_chrome_trace(rich_profile(), tmp_path / "again.json.gz")
    assert again.read_bytes()[:4] == packed.read_bytes()[:4]
    assert again.read_bytes()[4:8] == b"\0\0\0\0"


def test_a_step_window_keeps_only_its_steps(tmp_path: Path) -> None:
    from msprof_py.exporters import StepWindow, select_steps

    profile = rich_profile()
    assert set(profile.steps["step"]) == {0, 1}
    events = load(write_chrome_trace(profile, tmp_path / "s1.json", steps=StepWindow(1, 1)))
    tasks = [e for e in events["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    assert {e["args"]["step"] for e in tasks} == {1}
    assert len(tasks) == int((profile.tasks["step"] == 1).sum())
    steps = [e["name"] for e in events["traceEvents"] if e.get("cat") == "step"]
    assert steps == ["Step 1"]
    with pytest.raises(ValueError, match=r"--export-steps 5- holds none .*\(recorded: 0\.\.1\)"):
        select_steps(profile, StepWindow(5))


@pytest.mark.parametrize(
    ("text", "window"),
    [("3-7", (3, 7)), ("3-", (3, None)), ("4", (4, 4)), (" 2 - 9 ", (2, 9))],
)
def test_step_window_text(text: str, window: tuple) -> None:
    from msprof_py.exporters import StepWindow

    parsed = StepWindow.parse(text)
    assert (parsed.first, parsed.last) == window
    assert StepWindow.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["7-3", "a-b", "-3", "1,2", ""])
def test_bad_step_windows_are_refused(text: str) -> None:
    from msprof_py.exporters import StepWindow

    with pytest.raises(ValueError, match="steps"):
        StepWindow.parse(text)


def test_size_warning_names_a_window_that_fits(tmp_path: Path) -> None:
    from msprof_py.exporters.sizes import human_bytes, size_warning

    path = tmp_path / "trace.json"
    path.write_bytes(b" " * 10_000)
    assert size_warning(path, list(range(100)), limit=10_000) is None
    # 100 steps in 10,000 bytes: 100 bytes a step, so 25 steps fit in 2,500
    text = size_warning(path, list(range(100, 200)), limit=2_500, leave_out="--export=ascend")
    assert text is not None
    assert text.startswith("trace.json is 9.8 KiB (100 steps)")
    assert "--export-steps=100-124 (25 steps)" in text and "about 2.4 KiB" in text
    assert text.endswith("; --export=ascend leaves it out")
    assert [human_bytes(n) for n in (512, 1536, 3 * 2**30)] == ["512 B", "1.5 KiB", "3.0 GiB"]
