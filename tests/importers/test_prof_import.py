"""msprof's own ``PROF_*`` folders (``msprof_prof``): our export read back, and real quirks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from import_helpers import one_line_error

import msprof_py
from msprof_py.cli import cli
from msprof_py.exporters import naming
from msprof_py.importers import find
from msprof_py.profile import ProfileError

MSO = "mindstudio_profiler_output"
TS = "20250109101010"


@pytest.fixture(scope="module")
def prof(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run's ``PROF_*`` folder alone (what ``msprof --output`` leaves)."""
    (source,) = recorded.glob("PROF_*")
    target = tmp_path_factory.mktemp("prof") / source.name
    shutil.copytree(source, target)
    return target


def _sorted(tasks, kind):
    t = tasks[tasks["kind"] == kind].sort_values("start_ns", kind="stable")
    return t.reset_index(drop=True)


# ---- round trip: our export read back ----------------------------------------------------


def test_detection_torch_npu_folders_keep_their_importer(imported: Path, prof: Path) -> None:
    assert list(imported.glob("PROF_*"))  # the torch_npu folder holds a PROF_* folder
    assert find(imported).name == "ascend_pt"
    assert find(prof).name == "msprof_prof"
    assert find(prof.parent).name == "msprof_prof"  # a parent of one PROF_* per device
    assert find(prof / MSO) is None


def test_round_trip_tables(recorded: Path, prof: Path) -> None:
    raw = msprof_py.load(recorded)
    got = msprof_py.load(prof)
    meta = got.meta[0]
    assert meta["source_format"] == "msprof_prof" and meta["status"] == "complete"
    assert (meta["device"], meta["soc_version"]) == ("ascend910b", "Ascend910B2")
    assert (meta["ai_core_num"], meta["aiv_num"], meta["aic_frequency_mhz"]) == (24, 48, 1800.0)
    assert got.ranks == [0] and not got.partial and got.warnings == []
    assert got.tasks["kind"].value_counts().to_dict() == raw.tasks["kind"].value_counts().to_dict()
    rk, gk = _sorted(raw.tasks, "kernel"), _sorted(got.tasks, "kernel")
    # CANN's timeline has no framework layer: kernels keep the names op_summary gives them
    assert gk["name"].tolist() == list(naming.kernel_names(rk))
    for column in ("op_type", "task_type", "block_dim", "stream_id", "op_state", "step"):
        assert gk[column].tolist() == rk[column].tolist(), column
    for column in ("input_shapes", "input_dtypes", "input_formats", "output_shapes"):
        assert gk[column].tolist() == rk[column].tolist(), column
    # exact µs text: times to the ns, from the same origin (the first host call)
    assert gk["start_ns"].tolist() == rk["start_ns"].tolist()
    assert (gk["end_ns"] - gk["start_ns"]).tolist() == (rk["end_ns"] - rk["start_ns"]).tolist()
    assert gk["wait_ns"].tolist() == rk["wait_ns"].tolist()
    for column in ("cube_ns", "vector_ns", "memory_ns"):  # PMU µs with 3 decimals
        assert np.abs(gk[column].to_numpy() - rk[column].to_numpy()).max() <= 1, column
    assert (gk["cube_ns"] > 0).any() and (gk["vector_ns"] > 0).any()
    # copies: task_time's rows, their bytes and direction from the trace
    rc, gc = _sorted(raw.tasks, "memcpy"), _sorted(got.tasks, "memcpy")
    assert gc["copy_kind"].tolist() == rc["copy_kind"].tolist()
    assert gc["bytes"].tolist() == rc["bytes"].tolist()
    assert gc["start_ns"].tolist() == rc["start_ns"].tolist()
    assert (gc["end_ns"] - gc["start_ns"]).tolist() == (rc["end_ns"] - rc["start_ns"]).tolist()
    # host: the CANN launches (each linked to its task) and syncs; no ops
    for kind in ("launch", "sync"):
        r = raw.host_events[raw.host_events["kind"] == kind]
        g = got.host_events[got.host_events["kind"] == kind]
        assert g["start_ns"].tolist() == r["start_ns"].tolist(), kind
    launches = got.host_events[got.host_events["kind"] == "launch"]
    starts = got.tasks.set_index("task_id")["start_ns"]
    raw_starts = raw.tasks.set_index("task_id")["start_ns"]
    raw_launches = raw.host_events[raw.host_events["kind"] == "launch"]
    assert (launches["task_id"] >= 0).all()
    assert (
        launches["task_id"].map(starts).tolist() == raw_launches["task_id"].map(raw_starts).tolist()
    )
    assert set(got.host_events["kind"]) == {"launch", "sync"}
    assert got.steps.empty  # the steps are step_trace's iterations: the tasks' step numbers


def test_round_trip_analysis(recorded: Path, prof: Path) -> None:
    raw = msprof_py.analyze(recorded)
    got = msprof_py.analyze(prof)
    assert got.profile["step_source"] == "task step numbers"
    # every iteration of step_trace is a step: the raw run's two analysed steps and its tail
    assert got.profile["steps_analysed"] == [*raw.profile["steps_analysed"], 3]
    r_steps = raw.step_breakdown["steps"].set_index("step")["step_ns"]
    g_steps = got.step_breakdown["steps"].set_index("step")["step_ns"]
    assert g_steps[r_steps.index].tolist() == r_steps.tolist()
    # top ops: the raw profile's tasks of the same steps, summed by type
    tasks = msprof_py.load(recorded).tasks
    k = tasks[tasks["step"].isin([1, 2, 3])]
    expected = k.assign(d=k["end_ns"] - k["start_ns"]).groupby(["op_type", "task_type"])["d"]
    by_type = got.top_ops["by_type"].set_index(["op_type", "task_type"])
    top = by_type.index[: len(by_type)]
    assert by_type["total_ns"].tolist() == expected.sum()[top].tolist()
    assert by_type["count"].tolist() == expected.count()[top].tolist()
    status = {f.rule: f.status for f in got.findings}
    assert status["aicpu_fallback"] == status["transdata_heavy"] == "fired"
    assert status["exposed_copies"] == "fired"


def test_cli_analyze_on_a_prof_folder(prof: Path) -> None:
    result = CliRunner().invoke(cli, ["analyze", "--json", str(prof)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    status = {f["rule"]: f["status"] for f in out["findings"]}
    assert status["aicpu_fallback"] == "fired"
    assert status["dynamic_shapes"] == "skipped"  # no framework layer, no tiling spans


# ---- a hand-written folder with the published op_summary quirks --------------------------

OP_HEADER = (
    "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,"
    "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num,"
    "HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Output Formats,Context ID,aicore_time(us),aic_mac_time(us),"
    "aic_mte2_time(us),aic_fixpipe_time(us),aiv_vec_time(us),aiv_mte2_time(us),"
    "aiv_mte3_time(us)"
)
MATMUL = (
    "3,4294967295,61653,2,aclnnMatmul_MatMulCommon_MatMulV2,MatMulV2,dynamic,AI_CORE,"
    '"1736413971558972.912\t",185.504,1.087,16,0,NO,"""81920,4096;8192,512""",'
    'DT_BF16;DT_BF16,ND;ND,"""4096,512""",DT_BF16,ND,N/A,185.504,150.25,100.5,23.0,N/A,N/A,N/A'
)
HCCL = (
    "3,4294967295,N/A,N/A,hcom_broadcast__445_0,hcom_broadcast_,N/A,COMMUNICATION,"
    "1736413971559200.5,308926.68,N/A,0,0,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,"
    "N/A,N/A,N/A,N/A,N/A,N/A,N/A"
)
TT_HEADER = (
    "Device_id,kernel_name,kernel_type,stream_id,task_id,task_time(us),task_start(us),task_stop(us)"
)
TT_ROWS = (
    '3,MEMCPY_ASYNC,SDMA_SQE,2,61650,50.0,"1736413971558900.000\t",1736413971558950.000',
    "3,EVENT_RECORD,EVENT_RECORD_SQE,2,61651,1.0,1736413971558960.000,1736413971558961.000",
    "3,MatMulV2,AI_CORE,2,61653,185.504,1736413971558972.912,1736413971559158.416",
)
BASE_NS = 1736413971558900000


def write_prof(parent: Path, op_rows=(MATMUL, HCCL), tt_rows=TT_ROWS) -> Path:
    """A PROF_* folder as msprof writes it on an A2 (rank 3, device 3; CSVs only)."""
    prof = parent / "PROF_000001_20250109101010123_00437675ABCDEFGH"
    (prof / MSO).mkdir(parents=True)
    (prof / "device_3").mkdir()
    info = {
        "hostname": "node1",
        "pid": "437675",
        "rank_id": 3,
        "devices": "3",
        "soc_version": "Ascend910B2",
        "DeviceInfo": [{"id": 3, "ai_core_num": 24, "aiv_num": 48, "aic_frequency": "1800"}],
    }
    (prof / "device_3" / "info.json.3").write_text(json.dumps(info), encoding="utf-8")
    (prof / MSO / f"op_summary_{TS}.csv").write_text(
        "\n".join([OP_HEADER, *op_rows]) + "\n", encoding="utf-8"
    )
    (prof / MSO / f"task_time_{TS}.csv").write_text(
        "\n".join([TT_HEADER, *tt_rows]) + "\n", encoding="utf-8"
    )
    return prof


def test_published_quirks_read_to_hand_computed_values(tmp_path: Path) -> None:
    got = msprof_py.load(write_prof(tmp_path))
    assert got.ranks == [3]
    meta = got.meta[3]
    assert (meta["device"], meta["device_id"], meta["hostname"], meta["pid"]) == (
        "ascend910b",
        3,
        "node1",
        437675,
    )
    t = got.tasks.sort_values("start_ns").reset_index(drop=True)
    # the op_summary row task_time repeats (stream 2, task 61653, same start) counts once
    assert t["kind"].tolist() == ["memcpy", "event_record", "kernel", "collective"]
    copy, event, mm, hccl = (t.iloc[i] for i in range(4))
    assert (copy["start_ns"], copy["end_ns"], copy["task_type"]) == (0, 50000, "DMA")
    assert (event["start_ns"], event["end_ns"]) == (60000, 61000)
    # the trailing TAB and the 19-digit timestamp, exact
    assert mm["start_ns"] == 1736413971558972912 - BASE_NS == 72912
    assert mm["end_ns"] - mm["start_ns"] == 185504 and mm["wait_ns"] == 1087
    assert (mm["name"], mm["op_type"], mm["task_type"]) == (
        "aclnnMatmul_MatMulCommon_MatMulV2",
        "MatMulV2",
        "AI_CORE",
    )
    assert (mm["block_dim"], mm["stream_id"], mm["op_state"]) == (16, 2, "dynamic")
    assert mm["input_shapes"] == "81920,4096;8192,512" and mm["output_shapes"] == "4096,512"
    assert mm["input_dtypes"] == "bfloat16;bfloat16" and mm["input_formats"] == "ND;ND"
    # PMU: cube = aic_mac_time; memory = aic_mte2 + aic_fixpipe; no vector time (N/A)
    assert (mm["cube_ns"], mm["memory_ns"], mm["vector_ns"]) == (150250, 123500, 0)
    assert (hccl["name"], hccl["collective"], hccl["task_type"]) == (
        "hcom_broadcast_",
        "broadcast",
        "HCCL",
    )
    assert hccl["start_ns"] == 1736413971559200500 - BASE_NS
    assert hccl["end_ns"] - hccl["start_ns"] == 308926680
    # no step_trace, no trace: no steps, no host events; every task launched as it started
    assert got.steps.empty and got.host_events.empty
    assert (t["step"] == -1).all() and (t["launch_ns"] == t["start_ns"]).all()
    result = msprof_py.analyze(got)
    assert result.profile["step_source"] == "whole run (no steps)"


# ---- damaged files -----------------------------------------------------------------------


def test_a_bad_number_names_the_file_row_and_column(tmp_path: Path) -> None:
    prof = write_prof(tmp_path, (HCCL, MATMUL.replace(",185.504,", ",18x.5,")))
    line = one_line_error(prof)
    assert f"op_summary_{TS}.csv row 3 column 'Task Duration(us)'" in line and "18x.5" in line


def test_a_bad_task_time_row_names_the_file(tmp_path: Path) -> None:
    prof = write_prof(tmp_path, tt_rows=(TT_ROWS[0].replace(",2,61650,", ",two,61650,"),))
    line = one_line_error(prof)
    assert f"task_time_{TS}.csv row 2 column 'stream_id'" in line


def test_a_garbled_header_names_the_file(tmp_path: Path) -> None:
    prof = write_prof(tmp_path)
    (prof / MSO / f"op_summary_{TS}.csv").write_text("Nm;Tp\n1;2\n", encoding="utf-8")
    line = one_line_error(prof)
    assert f"op_summary_{TS}.csv" in line and "'Op Name'" in line


def test_a_truncated_msprof_json_is_one_line(prof: Path, tmp_path: Path) -> None:
    copy = tmp_path / prof.name
    shutil.copytree(prof, copy)
    (trace,) = (copy / MSO).glob("msprof_*.json")
    text = trace.read_text(encoding="utf-8")
    trace.write_text(text[: len(text) // 2], encoding="utf-8")
    line = one_line_error(copy)
    assert trace.name in line and "not valid JSON (cut short)" in line


def test_an_empty_output_folder_is_an_error(tmp_path: Path) -> None:
    prof = write_prof(tmp_path)
    for path in (prof / MSO).iterdir():
        path.unlink()
    with pytest.raises(ProfileError, match=r"no op_summary_\*\.csv, task_time_\*\.csv"):
        msprof_py.load(prof)


def test_two_folders_of_one_rank_are_an_error(tmp_path: Path) -> None:
    prof = write_prof(tmp_path)
    shutil.copytree(prof, tmp_path / (prof.name[:-1] + "X"))
    with pytest.raises(ProfileError, match="two profiles for rank 3"):
        msprof_py.load(tmp_path)
