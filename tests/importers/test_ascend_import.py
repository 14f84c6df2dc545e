"""Real Ascend profiles: torch_npu ``*_ascend_pt`` folders loaded without ``msprof_raw/``."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from export_helpers import rich_profile  # the exporters' hand-made profiles (conftest)
from import_helpers import one_line_error, without_raw

import msprof_py
from msprof_py.cli import cli
from msprof_py.exporters import naming
from msprof_py.exporters.ascend_pt import export_ascend_pt
from msprof_py.importers import find
from msprof_py.profile import ProfileError
from msprof_py.profile.loading import ProfileWarning

OUT = "ASCEND_PROFILER_OUTPUT"


def _kernels(tasks):
    k = tasks[tasks["kind"] == "kernel"].sort_values("start_ns", kind="stable")
    return k.assign(dur=k["end_ns"] - k["start_ns"])


# ---- round trip: our own export read back ------------------------------------------------


def test_a_folder_with_msprof_raw_still_loads_the_raw_profile(recorded: Path) -> None:
    profile = msprof_py.load(recorded)
    assert "source_format" not in profile.meta[0]
    assert find(recorded) is not None  # it would import, but the raw profile wins


def test_round_trip_tables(recorded: Path, imported: Path) -> None:
    raw = msprof_py.load(recorded)
    got = msprof_py.load(imported)
    meta = got.meta[0]
    assert meta["source_format"] == "ascend_pt" and meta["status"] == "complete"
    assert meta["device"] == "ascend910b" and meta["soc_version"] == "Ascend910B2"
    assert not got.partial and got.warnings == []
    # every task, with its kind
    assert got.tasks["kind"].value_counts().to_dict() == raw.tasks["kind"].value_counts().to_dict()
    rk, gk = _kernels(raw.tasks), _kernels(got.tasks)
    # kernel names as exported, read back to the op that launched them
    assert gk["name"].tolist() == rk["name"].tolist()
    exported = naming.kernel_names(rk.reset_index(drop=True))
    assert set(exported) >= {"TransData", "aclnnConv2D"}
    for column in ("op_type", "task_type", "block_dim", "stream_id", "step", "op_state"):
        assert gk[column].tolist() == rk[column].tolist(), column
    for column in ("input_shapes", "input_dtypes", "input_formats", "output_shapes"):
        assert gk[column].tolist() == rk[column].tolist(), column
    # times exact to the ns (the export writes exact µs text), relative to the same origin
    assert gk["dur"].tolist() == rk["dur"].tolist()
    assert gk["start_ns"].tolist() == rk["start_ns"].tolist()
    assert gk["wait_ns"].tolist() == rk["wait_ns"].tolist()
    assert np.abs(gk["cube_ns"].to_numpy() - rk["cube_ns"].to_numpy()).max() <= 1
    assert np.abs(gk["memory_ns"].to_numpy() - rk["memory_ns"].to_numpy()).max() <= 1
    # copies come from the trace's Ascend Hardware events
    rc = raw.tasks[raw.tasks["kind"] == "memcpy"].sort_values("start_ns")
    gc = got.tasks[got.tasks["kind"] == "memcpy"].sort_values("start_ns")
    assert gc["copy_kind"].tolist() == rc["copy_kind"].tolist()
    assert gc["bytes"].tolist() == rc["bytes"].tolist()
    assert (gc["end_ns"] - gc["start_ns"]).tolist() == (rc["end_ns"] - rc["start_ns"]).tolist()
    assert gc["name"].str.endswith("(value)").sum() == rc["name"].str.endswith("(value)").sum()
    # steps and host events
    assert got.steps[["step", "start_ns", "end_ns"]].equals(
        raw.steps[["step", "start_ns", "end_ns"]]
    )
    assert got.steps["source"].iloc[-1] == raw.steps["source"].iloc[-1] == "end of run"
    for kind in ("op", "annotation", "launch", "sync"):
        r = raw.host_events[raw.host_events["kind"] == kind]
        g = got.host_events[got.host_events["kind"] == kind]
        assert len(g) == len(r), kind
        assert g["start_ns"].tolist() == r["start_ns"].tolist(), kind
    ops = got.host_events[got.host_events["kind"] == "op"]
    raw_ops = raw.host_events[raw.host_events["kind"] == "op"]

    def keyed(frame):  # ops starting together are in no particular order
        return sorted(zip(frame["start_ns"], frame["name"], frame["step"], strict=True))

    assert keyed(ops) == keyed(raw_ops)
    # every task linked to the op that launched it (by name: event ids are renumbered)
    names = got.host_events.set_index("event_id")["name"]
    raw_names = raw.host_events.set_index("event_id")["name"]
    g_op = got.tasks.sort_values("start_ns")["host_op_id"].map(names).tolist()
    r_op = raw.tasks.sort_values("start_ns")["host_op_id"].map(raw_names).tolist()
    assert g_op == r_op
    # each launch and sync made by the op the raw run says (flows, else the time nesting)
    calls = []
    for frame in (raw.host_events, got.host_events):
        c = frame[frame["kind"].isin(["launch", "sync"])].sort_values(["start_ns", "name"])
        calls.append(c["parent_id"].map(frame.set_index("event_id")["name"]).fillna("").tolist())
    assert calls[0] == calls[1]
    # memory: every allocator event (the totals to the byte the MB text keeps)
    rm = raw.memory[raw.memory["action"] != "oom"]
    assert len(got.memory) == len(rm)
    assert got.memory["action"].tolist() == rm["action"].tolist()
    assert np.abs(got.memory["reserved"].to_numpy() - rm["reserved"].to_numpy()).max() <= 2
    assert np.abs(got.memory["allocated"].to_numpy() - rm["allocated"].to_numpy()).max() <= 2


def test_round_trip_analysis(recorded: Path, imported: Path) -> None:
    raw = msprof_py.analyze(recorded)
    got = msprof_py.analyze(imported)
    assert got.profile["steps_analysed"] == raw.profile["steps_analysed"]
    assert got.profile["mean_step_ns"] == raw.profile["mean_step_ns"]
    cols = ["op_type", "task_type", "count", "total_ns"]
    assert got.top_ops["by_type"][cols].equals(raw.top_ops["by_type"][cols])
    cols = ["name", "op_type", "count", "total_ns"]
    assert got.top_ops["by_name"][cols].equals(raw.top_ops["by_name"][cols])
    # host ops: spans, self times (the imported ops nest by time, the raw ones do not) and
    # the shares of the self time, as the raw run's
    cols = ["name", "count", "host_total_ns", "host_self_ns", "launches", "share_of_step"]
    g_host, r_host = got.top_ops["host"][cols], raw.top_ops["host"][cols]
    assert g_host.astype({"name": str}).equals(r_host.astype({"name": str}))
    g_copy, r_copy = got.copy["summary"][0], raw.copy["summary"][0]
    for key in ("copies", "copy_ratio", "exposed_ns", "host_blocked_ns"):
        assert g_copy[key] == pytest.approx(r_copy[key]), key
    raw_status = {f.rule: f.status for f in raw.findings}
    for f in got.findings:
        if f.rule == "dynamic_shapes":  # tiling/compile spans are not in the export
            assert f.status == "skipped" and "runtime API" in f.message
        else:
            assert f.status == raw_status[f.rule], (f.rule, f.message)


def test_a_collective_round_trips_with_its_bytes_and_wait(tmp_path: Path) -> None:
    profile = rich_profile(world_size=4)  # its collective spans 4 ranks
    run = tmp_path / "host_4242_20260102030405678_ascend_pt"
    run.mkdir()
    export_ascend_pt(run, profile)
    got = msprof_py.load(run)
    raw_c = profile.tasks[profile.tasks["kind"] == "collective"]
    got_c = got.tasks[got.tasks["kind"] == "collective"]
    assert len(got_c) == len(raw_c) == 1
    for column in ("name", "collective", "world_size", "bytes", "notify_wait_ns", "algorithm"):
        assert got_c[column].tolist() == raw_c[column].tolist(), column
    assert got_c["task_type"].tolist() == ["HCCL"]
    assert got.meta[0]["world_size"] == 4 and got.meta[0]["hostname"] == "host"


def test_a_run_of_two_ranks_loads_both(tmp_path: Path) -> None:
    for rank in (0, 1):
        run = tmp_path / f"host_{10 + rank}_20260102030405678_ascend_pt"
        run.mkdir()
        export_ascend_pt(run, rich_profile(rank=rank, world_size=2, pid=10 + rank))
    got = msprof_py.load(tmp_path)
    assert got.ranks == [0, 1]
    assert sorted(got.tasks["rank"].unique()) == [0, 1]
    assert (tmp_path / "host_11_20260102030405678_ascend_pt" / "profiler_info_1.json").exists()


# ---- a folder written from the published real-file quirks --------------------------------

KERNEL_HEADER = (
    "Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
    "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,"
    "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,"
    "aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_mte2_time(us),"
    "aic_mte2_ratio,aic_fixpipe_time(us),aiv_vec_time(us),cube_utilization(%)"
)
MATMUL_ROW = (
    "19,4294967295,61653,2,aclnnMatmul_MatMulCommon_MatMulV2,MatMulV2,dynamic,AI_CORE,"
    '"1736413971558972.912\t",185.504,1.087,16,0,NO,"""81920,4096;8192,512""",DT_BF16;DT_BF16,'
    'ND;ND,"""4096,512""",DT_BF16,ND,N/A,183.87,N/A,150.25,0.81,120.5,0.65,3.0,N/A,79.295'
)
HCCL_ROW = (
    "19,4294967295,N/A,N/A,hcom_broadcast__445_0,hcom_broadcast_,N/A,HCCL,"
    "1736413971559200.5,308926.68,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,"
    "N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A"
)
OP_EVENT = {
    "ph": "X",
    "name": "aten::empty",
    "pid": 437675,
    "tid": 437675,
    "ts": "1736413971558900.491",
    "dur": 13.08,
    "cat": "cpu_op",
    "args": {"Sequence number": -1, "Fwd thread id": 0},
}
BASE_NS = 1736413971558900491  # the earliest time in the folder: the op's start


def write_real(parent: Path, kernel_rows: tuple[str, ...] = (MATMUL_ROW, HCCL_ROW)) -> Path:
    """A rank folder as torch_npu writes one on hardware (rank 3 of 8, no msprof_raw)."""
    run = parent / "node1_437675_20250109085251123_ascend_pt"
    (run / OUT).mkdir(parents=True)
    (run / OUT / "kernel_details.csv").write_text(
        "\n".join([KERNEL_HEADER, *kernel_rows]) + "\n", encoding="utf-8"
    )
    trace = [
        {"ph": "M", "name": "process_name", "pid": 437675, "args": {"name": "Python"}},
        OP_EVENT,
    ]
    (run / OUT / "trace_view.json").write_text(json.dumps(trace), encoding="utf-8")
    info = {"rank_id": 3, "world_size": 8, "cann_version": "8.0.RC2", "config": {}}
    (run / "profiler_info_3.json").write_text(json.dumps(info), encoding="utf-8")
    return run


def test_published_quirks_read_to_hand_computed_values(tmp_path: Path) -> None:
    run = write_real(tmp_path)
    got = msprof_py.load(run)
    assert got.ranks == [3]
    meta = got.meta[3]
    assert meta["device"] == "unknown" and meta["world_size"] == 8
    assert meta["hostname"] == "node1" and meta["pid"] == 437675
    t = got.tasks.sort_values("start_ns").reset_index(drop=True)
    mm, hccl = t.iloc[0], t.iloc[1]
    # the trailing TAB and the 19-digit timestamp, exact: start - base in ns
    assert mm["start_ns"] == 1736413971558972912 - BASE_NS == 72421
    assert mm["end_ns"] - mm["start_ns"] == 185504 and mm["wait_ns"] == 1087
    assert (mm["kind"], mm["name"], mm["op_type"], mm["task_type"]) == (
        "kernel",
        "aclnnMatmul_MatMulCommon_MatMulV2",
        "MatMulV2",
        "AI_CORE",
    )
    assert (mm["block_dim"], mm["stream_id"], mm["step"], mm["op_state"]) == (16, 2, 19, "dynamic")
    assert mm["input_shapes"] == "81920,4096;8192,512" and mm["output_shapes"] == "4096,512"
    assert mm["input_dtypes"] == "bfloat16;bfloat16" and mm["input_formats"] == "ND;ND"
    # PMU: cube = aic_mac_time; memory = aic_mte2 + aic_fixpipe; no vector time (N/A)
    assert (mm["cube_ns"], mm["memory_ns"], mm["vector_ns"]) == (150250, 123500, 0)
    assert hccl["kind"] == "collective" and hccl["task_type"] == "HCCL"
    assert hccl["name"] == "hcom_broadcast_" and hccl["collective"] == "broadcast"
    assert hccl["start_ns"] == 1736413971559200500 - BASE_NS
    assert hccl["end_ns"] - hccl["start_ns"] == 308926680
    assert (hccl["stream_id"], hccl["block_dim"], hccl["world_size"]) == (0, 0, 8)
    ops = got.host_events
    assert ops["kind"].tolist() == ["op"] and ops["name"].tolist() == ["aten::empty"]
    assert ops["start_ns"].tolist() == [0] and (ops["end_ns"] - ops["start_ns"]).tolist() == [13081]
    assert got.steps.empty and got.memory.empty


def test_missing_data_rules_are_skipped_not_wrong(tmp_path: Path) -> None:
    run = write_real(tmp_path)
    result = msprof_py.analyze(run)
    by_rule = {f.rule: f for f in result.findings}
    assert all("internal error" not in f.message for f in result.findings)
    # an unknown device: the rules that need its spec say so
    for rule in ("amp_fp32_cube", "amp_overhead"):
        assert by_rule[rule].status == "skipped", (rule, by_rule[rule].message)
        assert "'unknown' is not a preset" in by_rule[rule].message
    # no memory file, no launches, no API spans: skipped, never a finding from missing data
    for rule in ("memory_near_capacity", "host_bound_dispatch", "sync_in_loop", "dynamic_shapes"):
        assert by_rule[rule].status == "skipped", (rule, by_rule[rule].message)
    # what the data does say: the 308.9 ms broadcast is the step, with no compute beside it
    comm = by_rule["exposed_communication"]
    assert comm.status == "fired" and "308926.7 us per step" in comm.message


# ---- the command line on an imported folder ----------------------------------------------


def test_cli_analyze_on_an_imported_folder(imported: Path) -> None:
    analysed = CliRunner().invoke(cli, ["analyze", "--json", str(imported)])
    assert analysed.exit_code == 0, analysed.output
    findings = {f["rule"]: f for f in json.loads(analysed.output)["findings"]}
    assert findings["dynamic_shapes"]["status"] == "skipped"
    assert findings["host_bound_dispatch"]["status"] == "fired"


def test_cli_report_on_an_imported_folder(imported: Path, tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    reported = CliRunner().invoke(cli, ["report", str(imported), "-o", str(html)])
    assert reported.exit_code == 0, reported.output
    assert "aten::nonzero" in html.read_text(encoding="utf-8")  # an op of the run


def test_cli_gate_on_an_imported_folder(imported: Path, tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    init = CliRunner().invoke(cli, ["gate", str(imported), "--init-budget", str(budget)])
    assert init.exit_code == 0, init.output
    tight = budget.read_text(encoding="utf-8").replace("step_time_ms = ", "step_time_ms = 0.0 # ")
    budget.write_text(tight, encoding="utf-8")
    gated = CliRunner().invoke(cli, ["gate", str(imported), "--budget", str(budget)])
    assert gated.exit_code == 1, gated.output  # the imported step time is over a 0 ms limit


def test_cli_diff_of_the_raw_and_the_imported_profile(recorded: Path, imported: Path) -> None:
    diffed = CliRunner().invoke(cli, ["diff", str(recorded), str(imported)])
    assert diffed.exit_code == 0, diffed.output
    assert "no change (every figure and op type is identical)" in " ".join(diffed.output.split())


def test_cli_analyze_on_a_real_layout_folder(tmp_path: Path) -> None:
    run = write_real(tmp_path)
    result = CliRunner().invoke(cli, ["analyze", "--json", str(run)])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.output)["findings"]
    assert {f["status"] for f in findings} <= {"skipped", "ok", "fired"}
    status = {f["rule"]: f["status"] for f in findings}
    assert status["amp_fp32_cube"] == status["memory_near_capacity"] == "skipped"


# ---- damaged files -----------------------------------------------------------------------


def test_a_garbled_header_is_one_line_naming_the_file(tmp_path: Path) -> None:
    run = write_real(tmp_path, ())
    (run / OUT / "kernel_details.csv").write_text("Nm;Tp;x\n1;2;3\n", encoding="utf-8")
    line = one_line_error(run)
    assert "kernel_details.csv" in line and "'Name'" in line


def test_a_bad_number_names_its_row_and_column(tmp_path: Path) -> None:
    bad = MATMUL_ROW.replace(",185.504,", ",18x.5,")
    run = write_real(tmp_path, (HCCL_ROW, bad))
    line = one_line_error(run)
    assert "kernel_details.csv row 3 column 'Duration(us)'" in line and "18x.5" in line


def test_a_truncated_trace_is_one_line(tmp_path: Path) -> None:
    run = write_real(tmp_path)
    trace = run / OUT / "trace_view.json"
    text = trace.read_text(encoding="utf-8")
    trace.write_text(text[: len(text) // 2], encoding="utf-8")
    line = one_line_error(run)
    assert "trace_view.json is not valid JSON (cut short)" in line


def test_a_csv_cut_short_loads_as_partial_with_a_warning(tmp_path: Path) -> None:
    run = write_real(tmp_path)
    path = run / OUT / "kernel_details.csv"
    path.write_text(f"{KERNEL_HEADER}\n{MATMUL_ROW}\n{HCCL_ROW[:60]}", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = msprof_py.load(run)
    assert got.partial and got.meta[3]["status"] == "partial"
    assert len(got.tasks) == 1
    assert any(issubclass(w.category, ProfileWarning) for w in caught)
    assert "line 3 is cut short" in got.warnings[0]


def test_no_profile_here_names_the_formats_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as caught:
        msprof_py.load(tmp_path)
    message = str(caught.value)
    assert "msprof_raw" in message and "ASCEND_PROFILER_OUTPUT" in message


def test_an_output_folder_without_kernels_or_trace_is_an_error(tmp_path: Path) -> None:
    run = write_real(tmp_path)
    shutil.rmtree(run / OUT)
    (run / OUT).mkdir()
    with pytest.raises(ProfileError, match=r"neither kernel_details\.csv nor trace_view\.json"):
        msprof_py.load(run)


def test_a_folder_copied_from_a_recording_loads_by_itself(recorded: Path, tmp_path: Path) -> None:
    copy = without_raw(recorded, tmp_path)
    assert not (copy / "msprof_raw").exists()
    assert msprof_py.load(copy).meta[0]["source_format"] == "ascend_pt"
