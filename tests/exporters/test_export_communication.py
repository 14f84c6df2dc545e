"""communication.json and communication_matrix.json from hand-made collectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from export_helpers import base_ns, make_profile, rich_profile

from msprof_py.exporters.ascend_pt import export_ascend_pt
from msprof_py.exporters.communication import bus_factor

MB = 1024 * 1024
GROUP = "hccl_world_group"


def collective(task_id: int, step: int, start: int, dur: int, op: str, nbytes: int, **row):
    return {
        "task_id": task_id,
        "kind": "collective",
        "task_type": "HCCL",
        "name": f"hcom_{op}_",
        "op_type": op,
        "stream_id": 1,
        "start_ns": start,
        "end_ns": start + dur,
        "step": step,
        "bytes": nbytes,
        "collective": op,
        "algorithm": row.pop("algorithm", "mesh"),
        "world_size": row.pop("world_size", 4),
        **row,
    }


def export(tmp_path: Path, tasks: list[dict], **meta) -> tuple[dict, dict]:
    steps = [
        {"step": 0, "start_ns": 0, "end_ns": 50_000},
        {"step": 1, "start_ns": 50_000, "end_ns": 200_000},
    ]
    export_ascend_pt(tmp_path, make_profile(tasks=tasks, steps=steps, **meta))
    out = tmp_path / "ASCEND_PROFILER_OUTPUT"
    comm = json.loads((out / "communication.json").read_text())
    matrix = json.loads((out / "communication_matrix.json").read_text())
    return comm, matrix


def test_bus_factors() -> None:
    assert bus_factor("allreduce", 4) == 1.5
    assert bus_factor("allgather", 4) == 0.75
    assert bus_factor("reducescatter", 2) == 0.5
    assert bus_factor("broadcast", 8) == 1.0
    assert bus_factor("allreduce", 1) == 0.0


def test_communication_json_per_step_with_total_op_info(tmp_path: Path) -> None:
    tasks = [
        collective(0, 0, 10_000, 20_000, "allreduce", 8 * MB),
        collective(1, 1, 60_000, 40_000, "allgather", 16 * MB),
        collective(2, 1, 120_000, 10_000, "allreduce", 4 * MB, algorithm="ring"),
    ]
    comm, _ = export(tmp_path, tasks, rank=1, world_size=4)
    assert list(comm) == ["step0", "step1"]
    assert comm["step1"]["p2p"] == {}
    step1 = comm["step1"]["collective"]
    assert list(step1) == [
        f"hcom_allgather__1@{GROUP}",
        f"hcom_allreduce__2@{GROUP}",
        "Total Op Info",
    ]
    op = step1[f"hcom_allgather__1@{GROUP}"]
    time = op["Communication Time Info"]
    assert time["Start Timestamp(us)"] == pytest.approx((base_ns() + 60_000) / 1000, abs=0.01)
    assert time["Elapse Time(ms)"] == time["Transit Time(ms)"] == pytest.approx(0.04)
    assert time["Wait Time(ms)"] == 0
    bw = op["Communication Bandwidth Info"]
    assert set(bw) == {"RDMA", "HCCS", "PCIE", "SDMA", "SIO"}
    assert bw["HCCS"]["Transit Size(MB)"] == pytest.approx(16 * 0.75)
    assert bw["HCCS"]["Bandwidth(GB/s)"] == pytest.approx(round(12 / 0.04, 4))
    assert bw["HCCS"]["Size Distribution"] == {"12": [1, 0.04]}
    assert bw["SDMA"] == bw["HCCS"]
    assert bw["RDMA"]["Transit Size(MB)"] == 0 and bw["RDMA"]["Size Distribution"] == {}
    total = step1["Total Op Info"]
    assert total["Communication Time Info"]["Elapse Time(ms)"] == pytest.approx(0.05)
    hccs = total["Communication Bandwidth Info"]["HCCS"]
    assert hccs["Transit Size(MB)"] == pytest.approx(12 + 4 * 1.5)
    assert hccs["Transit Time(ms)"] == pytest.approx(0.05)
    assert hccs["Bandwidth(GB/s)"] == pytest.approx(round(18 / 0.05, 4))


def test_hierarchical_collectives_are_rdma(tmp_path: Path) -> None:
    tasks = [collective(0, 0, 1_000, 10_000, "allreduce", MB, algorithm="hierarchical(mesh+hd)")]
    comm, matrix = export(tmp_path, tasks)
    bw = comm["step0"]["collective"][f"hcom_allreduce__0@{GROUP}"]["Communication Bandwidth Info"]
    assert bw["RDMA"]["Transit Size(MB)"] == pytest.approx(1.5)
    assert bw["HCCS"]["Transit Size(MB)"] == 0
    links = matrix["step0"]["collective"][f"allreduce-total@{GROUP}"]
    assert {k: v["Transport Type"] for k, v in links.items()} == {
        "0-0": "LOCAL",
        "0-1": "RDMA",
        "0-2": "RDMA",
        "0-3": "RDMA",
    }


def test_matrix_links_and_integration(tmp_path: Path) -> None:
    tasks = [
        collective(0, 1, 60_000, 40_000, "allreduce", 8 * MB),  # 12 MB over 3 peers
        collective(1, 1, 110_000, 10_000, "allreduce", 8 * MB),
        collective(2, 1, 130_000, 20_000, "allreduce", 8 * MB, algorithm="ring"),  # next rank
    ]
    _, matrix = export(tmp_path, tasks, rank=2, world_size=4)
    step = matrix["step1"]["collective"]
    assert set(step) == {
        f"allreduce-{k}@{GROUP}"
        for k in ("top1", "middle", "bottom1", "bottom2", "bottom3", "total")
    }
    total = step[f"allreduce-total@{GROUP}"]
    assert set(total) == {"2-2", "2-0", "2-1", "2-3"}
    assert total["2-2"]["Transport Type"] == "LOCAL"
    # mesh ops send 4 MB to each peer; the ring op sends all 12 MB to rank 3
    assert total["2-0"]["Transit Size(MB)"] == pytest.approx(8)
    assert total["2-3"]["Transit Size(MB)"] == pytest.approx(4 + 4 + 12)
    assert total["2-3"]["Transit Time(ms)"] == pytest.approx(0.04 + 0.01 + 0.02)
    top = step[f"allreduce-top1@{GROUP}"]["2-3"]
    assert top["Op Name"] == "hcom_allreduce__2"  # 12 MB in 0.02 ms: the fastest link
    assert step[f"allreduce-bottom1@{GROUP}"]["2-3"]["Op Name"] == "hcom_allreduce__0"


def test_no_collectives_give_empty_objects(tmp_path: Path) -> None:
    comm, matrix = export(tmp_path, [{"start_ns": 0, "end_ns": 10, "step": 0}])
    assert comm == {} and matrix == {}


def test_rich_profile_collective_is_in_step1(tmp_path: Path) -> None:
    export_ascend_pt(tmp_path, rich_profile())
    comm = json.loads((tmp_path / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    assert list(comm) == ["step1"]
    assert "Total Op Info" in comm["step1"]["collective"]
