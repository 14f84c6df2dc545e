"""Host threads by name: the recorder notes each thread's name once, meta.json keeps it, the
report's lanes and the Chrome trace's thread_name metadata use it; a profile recorded before
names were still loads and its lanes are named by the role guessed from the ops."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pandas as pd
import pytest
from report_helpers import synthetic_profile

from msprof_py.collectors.recorder import Recorder
from msprof_py.exporters.chrome import write_chrome_trace
from msprof_py.profile import Profile
from msprof_py.profile.meta import MetaError, validate_meta
from msprof_py.report import timeline
from msprof_py.report.lanes import thread_roles


class _Writer:
    """A writer that keeps its metadata and drops rows."""

    def __init__(self) -> None:
        self.meta: dict = {}

    def append(self, table: str, row: tuple) -> None:
        """Rows do not matter here."""


@pytest.mark.parametrize("logical", [False, True])
def test_recorder_names_each_thread_once(logical: bool) -> None:
    writer = _Writer()
    recorder = Recorder(writer, lambda: 0, logical_threads=logical)  # type: ignore[arg-type]
    seen: list[int] = []

    def work() -> None:
        seen.extend(recorder._thread() for _ in range(3))

    helper = threading.Thread(target=work, name="pin worker")
    helper.start()
    helper.join()
    main = recorder._thread()
    assert len(set(seen)) == 1 and seen[0] != main
    expected = {str(seen[0]): "pin worker", str(main): "MainThread"}
    assert recorder.thread_names == expected
    assert writer.meta["threads"] == expected  # what meta.json lists
    if logical:
        assert (seen[0], main) == (1, 2)  # in the order threads first recorded
    validate_meta({"rank": 0, **writer.meta})


def test_meta_threads_checked() -> None:
    validate_meta({"rank": 0, "threads": {"12": "MainThread"}})
    for bad in ({"x": "MainThread"}, {"1": 5}, {"1": "n" * 201}, ["MainThread"]):
        with pytest.raises(MetaError, match="'threads'"):
            validate_meta({"rank": 0, "threads": bad})


def _two_threads(path: Path, names: dict[str, str] | None) -> Profile:
    """The synthetic profile with its backward half of the ops moved to a second thread (7)."""
    profile = synthetic_profile(path, 400)
    h = profile.host_events
    ops = h.index[h["kind"] == "op"]
    back = ops[len(ops) // 2 :]
    h.loc[back, "thread"] = 7
    h.loc[back, "name"] = h.loc[back, "name"].astype(str) + "_backward"
    if names is not None:
        profile.meta[0]["threads"] = names
    return profile


def test_lanes_take_recorded_names(tmp_path: Path) -> None:
    names = {"7": "pt_autograd_0", "1": "MainThread"}
    profile = _two_threads(tmp_path, names)
    assert profile.thread_names(0) == {7: "pt_autograd_0", 1: "MainThread"}
    lanes = [lane.name for lane in timeline.rank_lanes(profile, 0, "")]
    assert lanes[:3] == ["MainThread", "pt_autograd_0", "launches"]
    # the Chrome trace names its host threads the same way (and says their ids)
    trace = json.loads(write_chrome_trace(profile, tmp_path / "trace.json").read_text())
    thread_names = {
        e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"
    }
    assert {"MainThread (1)", "pt_autograd_0 (7)"} <= thread_names


def test_old_profile_falls_back_to_roles(tmp_path: Path) -> None:
    profile = _two_threads(tmp_path, None)
    assert profile.thread_names(0) == {}
    lanes = [lane.name for lane in timeline.rank_lanes(profile, 0, "")]
    assert lanes[:3] == ["main thread", "autograd thread", "launches"]
    # a thread the names leave out is guessed; two of one name are numbered
    h = pd.DataFrame(
        {"kind": ["op"] * 4, "name": ["a", "b", "pin_memory", "c"], "thread": [3, 4, 5, 6]}
    )
    roles = thread_roles(h, {3: "worker", 4: "MainThread", 6: "worker"})
    assert roles == {4: "MainThread", 3: "worker", 5: "DataLoader pin thread", 6: "worker 2"}
