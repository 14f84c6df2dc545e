"""Each analysis on small hand-built profiles with answers computed by hand."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder, cluster, steps

from msprof_py.analyzers import (
    aicpu,
    communication,
    compute,
    context,
    copies,
    formats,
    memory,
    ops,
    syncs,
    timeline,
)
from msprof_py.device.spec import DeviceSpec

SPEC = DeviceSpec.load("ascend910b")


def one_step(length: int = 10_000) -> Builder:
    return Builder().step(0, 0, length)


def prepared(b: Builder) -> context.RankData:
    return context.prepare(b.build(), b.rank, warmup=0)


# ---- top ops and op statistic ---------------------------------------------------------------


def test_top_ops_by_type_and_by_name() -> None:
    b = one_step()
    b.task(0, 100, op_type="Add", input_shapes="4", input_dtypes="float32")
    b.task(100, 400, op_type="Add", input_shapes="8", input_dtypes="float32")
    b.task(400, 1400, op_type="MatMul", task_type="AI_CORE", name="aten::mm")
    b.task(1400, 1400, kind="event_record", op_type="EVENT_RECORD")
    data = prepared(b)
    by_type = ops.top_ops_by_type(data)
    assert by_type["op_type"].tolist() == ["MatMul", "Add"]
    add = by_type.iloc[1]
    assert (add["count"], add["total_ns"], add["mean_ns"], add["min_ns"], add["max_ns"]) == (
        2,
        400,
        200,
        100,
        300,
    )
    assert add["share_of_step"] == pytest.approx(400 / 10_000)
    assert add["share_of_device"] == pytest.approx(400 / 1400)
    by_name = ops.top_ops_by_name(data, n=2)
    assert by_name["input_shapes"].tolist() == ["", "8"]
    stat = ops.op_statistic(data)
    assert stat["ratio"].sum() == pytest.approx(1.0)
    assert set(stat["core_type"]) == {"AI_CORE", "AI_VECTOR_CORE"}


def test_host_ops_time_launches_and_device_time() -> None:
    b = one_step()
    b.op("aten::add", 0, 6000, [dict(start=6000, end=9000), dict(start=9000, end=9500)])
    b.op("aten::view", 6000, 6000)
    host = ops.host_ops(prepared(b))
    add = host[host["name"] == "aten::add"].iloc[0]
    assert (add["count"], add["host_total_ns"], add["launches"], add["tasks"]) == (1, 6000, 2, 2)
    assert add["launch_total_ns"] == 2000 and add["device_total_ns"] == 3500


# ---- copies -----------------------------------------------------------------------------


def copy_profile() -> Builder:
    b = one_step()
    b.task(1000, 3000, op_type="Conv2D", task_type="AI_CORE")
    h2d = {"kind": "memcpy", "task_type": "DMA", "copy_kind": "HOST_TO_DEVICE"}
    b.task(3000, 4000, bytes=10_000, pinned=False, op_type="MEMCPY_H2D", **h2d)  # exposed
    b.task(2000, 2500, bytes=25_000, pinned=True, op_type="MEMCPY_H2D", **h2d)  # hidden
    b.task(5000, 5200, kind="memcpy", task_type="DMA", copy_kind="DEVICE_TO_DEVICE", bytes=200_000)
    return b


def test_copy_ratio_hidden_and_exposed() -> None:
    s = copies.summary(prepared(copy_profile()))
    assert s["copy_ns"] == 1000 + 500 + 200
    assert s["copy_ratio"] == pytest.approx(0.17)
    assert (s["hidden_ns"], s["exposed_ns"]) == (500, 1200)
    assert s["exposed_ratio"] == pytest.approx(0.12)
    assert (s["pageable_count"], s["pageable_ns"]) == (1, 1000)
    assert s["small_count"] == 2  # the 200 kB device copy is not small


def test_copy_bandwidth_per_direction() -> None:
    table = copies.by_direction(prepared(copy_profile())).set_index("direction")
    h2d = table.loc["H2D"]
    assert (h2d["count"], h2d["bytes"], h2d["total_ns"]) == (2, 35_000, 1500)
    assert h2d["achieved_gbps"] == pytest.approx(35_000 / 1500)
    assert h2d["peak_gbps"] == pytest.approx(SPEC.host_link.pinned_bandwidth / 1e9)
    assert h2d["efficiency"] == pytest.approx(35_000 / 1500 / 25)
    assert (h2d["hidden_ns"], h2d["exposed_ns"]) == (500, 1000)
    d2d = table.loc["D2D"]
    assert d2d["peak_gbps"] == pytest.approx(SPEC.memory.hbm_bandwidth / 2 / 1e9)
    assert d2d["achieved_gbps"] == pytest.approx(1000.0)


# ---- compute density ----------------------------------------------------------------------


def roofline_profile() -> Builder:
    b = one_step(1_000_000)
    # cube fp16: ceiling 353.9 TFLOP/s x 0.85; 3.008e10 FLOPs take ~100 us, 1.28 MB ~1 us
    b.task(
        0,
        103_000,
        task_type="AI_CORE",
        op_type="MatMul",
        name="aten::mm",
        input_dtypes="float16;float16",
        flops=3.008e10,
        bytes=1_280_000,
    )
    # vector fp16: 1e6 ops take ~0.1 us, 128 MB take 100 us at 1.28 TB/s
    b.task(200_000, 303_000, op_type="Add", input_dtypes="float16", flops=1e6, bytes=128_000_000)
    # tiny: both far below the 3 us scheduling overhead
    b.task(
        400_000,
        403_000,
        op_type="Mul",
        name="aten::mul",
        input_dtypes="float16",
        flops=1000.0,
        bytes=1000,
    )
    return b


def test_roofline_classes() -> None:
    table = compute.density(prepared(roofline_profile())).set_index("op_type")
    assert table.loc["MatMul", "bound"] == "compute-bound"
    assert table.loc["Add", "bound"] == "memory-bound"
    assert table.loc["Mul", "bound"] == "overhead-bound"
    mm = table.loc["MatMul"]
    assert mm["intensity"] == pytest.approx(3.008e10 / 1_280_000)
    ceiling = SPEC.cube_peak_flops("float16") * SPEC.cube.efficiency
    assert mm["ridge_intensity"] == pytest.approx(ceiling / SPEC.memory.effective_bandwidth)
    assert mm["peak_tflops"] == pytest.approx(SPEC.cube_peak_flops("float16") / 1e12)
    assert mm["achieved_tflops"] == pytest.approx(3.008e10 / 103_000 / 1e3)
    assert mm["utilisation"] == pytest.approx(mm["achieved_tflops"] / mm["peak_tflops"])
    classes = compute.by_class(prepared(roofline_profile()))
    assert classes.set_index("bound")["kernels"].to_dict() == {
        "compute-bound": 1,
        "memory-bound": 1,
        "overhead-bound": 1,
    }


def test_fp32_cube_peak_is_half_the_fp16_peak_on_910b() -> None:
    nominal32, _ = compute.peak_rates(SPEC, "AI_CORE", "float32")
    nominal16, _ = compute.peak_rates(SPEC, "AI_CORE", "float16")
    assert nominal16 == pytest.approx(2 * nominal32)
    nominal_a, _ = compute.peak_rates(DeviceSpec.load("ascend910a"), "AI_CORE", "float32")
    assert nominal_a == DeviceSpec.load("ascend910a").cube_peak_flops("float16")


def test_utilisation_per_step() -> None:
    b = one_step()
    b.task(0, 2000, task_type="AI_CORE", op_type="MatMul", block_dim=12)  # half the cube cores
    b.task(1000, 3000, op_type="Add", block_dim=48)
    util = compute.utilisation(prepared(b)).iloc[0]
    assert util["device_busy_ns"] == 3000 and util["utilisation"] == pytest.approx(0.3)
    assert util["cube_utilisation"] == pytest.approx(0.2)
    assert util["cube_occupancy"] == pytest.approx(0.1)
    assert util["vector_utilisation"] == pytest.approx(0.2)
    assert util["vector_occupancy"] == pytest.approx(0.2)


# ---- step breakdown ---------------------------------------------------------------------


def breakdown_profile() -> Builder:
    b = one_step()
    b.task(1000, 4000, op_type="MatMul", task_type="AI_CORE")
    b.task(
        3000,
        6000,
        kind="collective",
        task_type="HCCL",
        op_type="allreduce",
        stream_id=1,
        collective="allreduce",
        world_size=2,
        bytes=3_000_000,
        algorithm="mesh",
    )
    b.task(7000, 8000, op_type="Add")
    b.task(8500, 9000, kind="memcpy", task_type="DMA", copy_kind="DEVICE_TO_HOST", bytes=8)
    return b


def test_step_breakdown_uses_step_trace_time_definitions() -> None:
    row = timeline.step_breakdown(prepared(breakdown_profile())).iloc[0]
    assert row["computing_ns"] == 4000
    assert row["communication_ns"] == 3000
    assert row["comm_not_overlapped_ns"] == 2000
    assert row["overlapped_ns"] == 1000
    # the step's window [0, 10000): [0, 1000], [6000, 7000] and [8000, 10000] (a copy runs
    # in [8500, 9000]: free, not idle)
    assert row["free_ns"] == 4000
    assert row["computing_ns"] + row["comm_not_overlapped_ns"] + row["free_ns"] == 10_000
    assert row["idle_copy_ns"] == 500 and row["idle_ns"] == 3500
    assert row["preparing_ns"] == 1000
    assert row["stage_ns"] == 8000
    assert row["device_busy_ns"] == 6000 and row["utilisation"] == pytest.approx(0.6)


def test_step_breakdown_agrees_with_the_exporters() -> None:
    overlap = pytest.importorskip("msprof_py.exporters.overlap")
    profile = breakdown_profile().build()
    theirs = overlap.step_breakdown(profile).iloc[0]
    ours = timeline.step_breakdown(context.prepare(profile, 0, warmup=0)).iloc[0]
    assert ours["computing_ns"] == theirs["Computing"]
    assert ours["comm_not_overlapped_ns"] == theirs["Communication(Not Overlapped)"]
    assert ours["stage_ns"] == theirs["Stage"]
    # torch_npu's Free spans the first to the last task; the step's window adds what lies
    # before and after them
    assert ours["free_ns"] == theirs["Free"] + ours["step_ns"] - ours["stage_ns"]
    assert ours["preparing_ns"] == theirs["Preparing"]


def idle_profile() -> Builder:
    b = Builder().step(0, 0, 100_000)
    b.op("aten::add", 0, 1000, [dict(start=1000, end=2000)])
    b.op("aten::add", 1000, 2000, [dict(start=2000, end=3000)])
    b.event("sync", "aclrtSynchronizeDevice", 2000, 3500)
    b.op("aten::mul", 3500, 4500, [dict(start=4500, end=5000)])
    b.event(
        "annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5000, 50_000
    )
    b.op("aten::add", 50_000, 51_000, [dict(start=51_000, end=52_000)])
    b.op("aten::add", 52_000, 60_000, [dict(start=60_000, end=61_000)])
    b.op("aten::add", 70_000, 71_000, [dict(start=71_000, end=72_000)])
    return b


def test_idle_gaps_get_their_host_cause() -> None:
    data = prepared(idle_profile())
    gaps = timeline.idle_gaps(data)
    got = list(zip(gaps["start_ns"], gaps["end_ns"], gaps["cause"], strict=True))
    assert got == [
        (0, 1000, "host-bound dispatch"),  # before the first kernel: the host issues it
        (3000, 4500, "synchronisation"),
        (5000, 51_000, "data loading"),
        (52_000, 60_000, "host-bound dispatch"),
        (61_000, 71_000, "other host work"),
        (72_000, 100_000, "other host work"),
    ]
    by_cause = timeline.idle_by_cause(data).set_index("cause")["total_ns"].to_dict()
    assert by_cause == {
        "data loading": 46_000,
        "synchronisation": 1500,
        "host-bound dispatch": 9000,
        "other host work": 38_000,
        "copies": 0,
    }
    row = timeline.step_breakdown(data).iloc[0]
    assert (row["idle_sync_ns"], row["idle_data_loading_ns"]) == (1500, 46_000)
    assert row["idle_ns"] == 94_500 == row["free_ns"]


# ---- syncs ------------------------------------------------------------------------------


def test_sync_points_kinds_and_where() -> None:
    b = one_step()
    b.event("sync", "aclrtSynchronizeDevice", 0, 500)
    item = b.op(
        "aten::_local_scalar_dense",
        500,
        1500,
        [
            dict(
                start=600,
                end=700,
                kind="memcpy",
                copy_kind="DEVICE_TO_HOST",
                bytes=8,
                name="Tensor.item() (aten::_local_scalar_dense) (value)",
            )
        ],
        module="Model",
    )
    b.event(
        "sync",
        "Tensor.item() (aten::_local_scalar_dense) (value) (wait)",
        600,
        1500,
        parent_id=item,
    )
    cp = b.op(
        "aten::copy_",
        2000,
        3000,
        [dict(start=2000, end=2900, kind="memcpy", copy_kind="HOST_TO_DEVICE", pinned=False)],
    )
    b.event("sync", "aten::copy_ (H2D) (wait)", 2000, 3000, parent_id=cp)
    cpu = b.op(
        "aten::copy_",
        4000,
        5000,
        [dict(start=4000, end=4900, kind="memcpy", copy_kind="DEVICE_TO_HOST", pinned=True)],
    )
    b.event("sync", "aten::copy_ (D2H) (wait)", 4000, 5000, parent_id=cpu)
    data = prepared(b)
    pts = syncs.points(data).set_index("name")
    assert pts.loc["aclrtSynchronizeDevice", "kind"] == "synchronize"
    item_row = pts.loc["Tensor.item() (aten::_local_scalar_dense) (value) (wait)"]
    assert (item_row["kind"], item_row["op"], item_row["module"]) == (
        ".item()",
        "aten::_local_scalar_dense",
        "Model",
    )
    assert pts.loc["aten::copy_ (H2D) (wait)", "kind"] == "pageable copy"
    assert pts.loc["aten::copy_ (D2H) (wait)", "kind"] == "blocking copy"
    summary = syncs.summary(data)
    assert summary["total_ns"].sum() == 500 + 900 + 1000 + 1000
    assert copies.host_blocked_ns(data) == 900 + 1000 + 1000


# ---- memory -----------------------------------------------------------------------------


def test_memory_peaks_fragmentation_and_batch_extrapolation() -> None:
    gib = 1024**3
    b = steps(Builder(), 2, 1000)
    b.op(
        "aten::copy_",
        1000,
        1100,
        [
            dict(
                start=1000,
                end=1100,
                kind="memcpy",
                copy_kind="HOST_TO_DEVICE",
                bytes=32 * 3 * 32 * 32 * 4,
                step=1,
            )
        ],
        input_shapes="32,3,32,32;32,3,32,32",
        input_dtypes="float32;float32",
        step=1,
    )
    b.mem(10, 1 * gib, 2 * gib, step=0)
    b.mem(1010, 1 * gib, 2 * gib, step=1)  # floor: 1 GiB persistent
    b.mem(1500, 3 * gib, 4 * gib, step=1)  # peak: +2 GiB of activations
    b.mem(1900, 1 * gib, 4 * gib, action="free", step=1)
    data = context.prepare(b.build(), 0)  # step 0 is warm-up
    m = memory.summary(data)
    usable = SPEC.memory.usable_bytes
    assert (m["peak_allocated"], m["peak_reserved"]) == (3 * gib, 4 * gib)
    assert m["fragmentation_bytes"] == 1 * gib
    assert m["headroom_bytes"] == usable - 4 * gib
    assert (m["persistent_bytes"], m["activation_bytes"]) == (1 * gib, 2 * gib)
    assert m["batch_size"] == 32 and m["batch_size_source"] == "inferred"
    scale = (0.8 * usable - gib) / (2 * gib)
    assert m["max_batch_scale"] == pytest.approx(scale)
    assert m["max_batch_size"] == int(32 * scale)
    assert memory.summary(data, batch_size=10)["max_batch_size"] == int(10 * scale)
    per_step = memory.per_step(data).iloc[0]
    assert (per_step["start_allocated"], per_step["activation_bytes"]) == (gib, 2 * gib)
    assert len(memory.timeline(data, points=2)) == 2


def test_memory_without_events() -> None:
    assert memory.summary(prepared(one_step()))["available"] is False


# ---- formats ----------------------------------------------------------------------------


def test_transdata_causes_and_c0_padding() -> None:
    b = one_step()
    b.op(
        "aten::convolution_overrideable",
        0,
        100,
        [
            dict(
                start=100,
                end=300,
                op_type="TransData",
                input_formats="ND",
                output_formats="NC1HWC0",
                bytes=1000,
            ),
            dict(
                start=300,
                end=700,
                op_type="Conv2D",
                task_type="AI_CORE",
                input_shapes="1,3,4,4",
                input_dtypes="float32",
                input_formats="NC1HWC0",
                output_shapes="1,3,4,4",
                output_dtypes="float32",
                output_formats="ND",
                bytes=704,
            ),
        ],
    )
    data = prepared(b)
    td = formats.transdata(data).iloc[0]
    assert (td["cause_op"], td["src_format"], td["dst_format"]) == (
        "aten::convolution_overrideable",
        "ND",
        "NC1HWC0",
    )
    assert td["total_ns"] == 200 and td["share_of_step"] == pytest.approx(0.02)
    pad = formats.padding(data).set_index("op_type")
    # fp32 C0 = 8: 3 channels padded to 8 -> 512 stored bytes for 192 logical
    assert pad.loc["Conv2D", "padding_bytes"] == 320


# ---- AI CPU ------------------------------------------------------------------------------


def test_aicpu_ops_with_the_dtype_or_op_to_change() -> None:
    b = one_step(1_000_000)
    b.task(0, 30_005, task_type="AI_CPU", op_type="Add", name="aten::add_", input_dtypes="int64")
    b.task(
        40_000,
        90_000,
        task_type="AI_CPU",
        op_type="NonZero",
        name="aten::nonzero",
        input_dtypes="float32",
        input_shapes="1000",
    )
    table = aicpu.table(prepared(b)).set_index("op_type")
    assert table.loc["Add", "reason"] == "dtype int64"
    assert table.loc["Add", "change"] == "run in int32"
    assert table.loc["NonZero", "reason"] == "op"
    assert table.loc["NonZero", "change"] == "replace NonZero"
    assert "torch.where" in table.loc["NonZero", "suggestion"]


# ---- communication ------------------------------------------------------------------------


def test_collective_bandwidth_and_overlap() -> None:
    data = prepared(breakdown_profile())
    c = communication.collectives(data).iloc[0]
    assert c["algbw_gbps"] == pytest.approx(3_000_000 / 3000)
    assert c["busbw_gbps"] == pytest.approx(1000 * 2 * (2 - 1) / 2)
    assert c["hidden_ns"] == 1000
    s = communication.summary(data)
    assert s["overlap_ratio"] == pytest.approx(1 / 3)


def rank_builder(rank: int, compute_ns: int, wait_ns: int) -> Builder:
    b = Builder(rank=rank)
    length = compute_ns + wait_ns + 1000
    for i in range(3):  # step marks follow each other, as a training loop makes them
        t0 = i * length
        b.step(i, t0, t0 + length)
        b.task(t0, t0 + compute_ns, op_type="MatMul", task_type="AI_CORE", step=i)
        b.task(
            t0 + compute_ns,
            t0 + compute_ns + wait_ns + 1000,
            kind="collective",
            task_type="HCCL",
            collective="allreduce",
            world_size=2,
            step=i,
            bytes=1000,
        )
    return b


def test_slow_rank_and_its_cause() -> None:
    profile = cluster(rank_builder(0, 10_000, 0), rank_builder(1, 5_000, 4_000))
    per_rank = {r: context.prepare(profile, r) for r in profile.ranks}
    table = communication.ranks(per_rank)
    slow = communication.slow_rank(table)
    assert slow["slow_rank"] == 0
    assert slow["cause"] == "compute"
    assert slow["excess_ns"] == pytest.approx((11_000 - 10_000) / 2)
    assert communication.slow_rank(table.iloc[:1]) is None


def test_slow_rank_in_lockstep_is_the_one_the_others_wait_for() -> None:
    """Synchronous data parallel: both steps take 20 us, but rank 0 waits 6 us per step inside
    its all-reduce for rank 1, which computes 6 us longer."""

    def rank(r: int, compute_ns: int, wait_ns: int) -> Builder:
        b = Builder(rank=r)
        for i in range(3):
            t0 = i * 20_000
            b.step(i, t0, t0 + 20_000)
            b.task(t0, t0 + compute_ns, op_type="MatMul", task_type="AI_CORE", step=i)
            b.task(
                t0 + compute_ns,
                t0 + 18_000,
                kind="collective",
                task_type="HCCL",
                collective="allreduce",
                world_size=2,
                step=i,
                bytes=1000,
                notify_wait_ns=wait_ns,
            )
        return b

    profile = cluster(rank(0, 10_000, 6_000), rank(1, 16_000, 0))
    per_rank = {r: context.prepare(profile, r) for r in profile.ranks}
    table = communication.ranks(per_rank).set_index("rank")
    assert table["mean_step_ns"].tolist() == [20_000, 20_000]
    assert table["wait_ns"].tolist() == [6_000, 0]
    assert table["own_ns"].tolist() == [14_000, 20_000]
    slow = communication.slow_rank(table.reset_index())
    assert slow["slow_rank"] == 1 and slow["cause"] == "compute"
    assert slow["excess_ns"] == pytest.approx(20_000 - 17_000)
    assert slow["deviation"] == pytest.approx(3_000 / 17_000)
    assert slow["excess_by_cause_ns"]["compute"] == pytest.approx(6_000)
    assert slow["excess_by_cause_ns"]["communication"] == pytest.approx(0)  # same transfer
    coll = communication.collectives(per_rank[0]).iloc[0]
    # bandwidth over the 2 us transfer, not the 8 us task
    assert coll["wait_ns"] == 2 * 6_000  # the 2 analysed steps (step 0 is warm-up)
    assert coll["algbw_gbps"] == pytest.approx(1000 / 2_000)
