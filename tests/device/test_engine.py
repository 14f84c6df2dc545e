"""Virtual-time engine: host dispatch, stream order, resources, events, synchronisation."""

from __future__ import annotations

from pathlib import Path

import pytest
from device_helpers import kernel

from msprof_py.device import (
    CopyKind,
    DeviceError,
    DeviceSpec,
    EventNotReadyError,
    HostKind,
    SimulatedNpu,
    TaskKind,
    TaskLog,
    TaskType,
)
from msprof_py.device.engine import Engine

STAGE1, STAGE2, API, SYNC = 6_000, 10_000, 2_000, 5_000  # ascend910b dispatch costs, ns


def npu_with_log(spec: str | Path = "ascend910b") -> tuple[SimulatedNpu, TaskLog]:
    npu = SimulatedNpu(spec)
    log = TaskLog()
    npu.subscribe(log)
    return npu, log


def spec_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text('base = "ascend910b"\n' + body)
    return path


def test_task_queue_pipelines_stage_two_of_dispatch() -> None:
    engine = Engine(DeviceSpec.load())
    s = engine.default_stream
    first = engine.submit_kernel(s, kernel(1_000), name="a", op_type="A")
    second = engine.submit_kernel(s, kernel(1_000), name="b", op_type="B")
    # the host thread pays stage 1 only; stage 2 runs on the queue thread, one launch at a time
    assert engine.host_ns == 2 * STAGE1
    assert first.launch_ns == STAGE1 + STAGE2 == first.start_ns
    assert second.launch_ns == first.launch_ns + STAGE2
    # short kernels leave the device idle between launches: the run is host-bound
    assert second.start_ns == second.launch_ns and second.wait_ns == STAGE2 - 1_000


def test_without_task_queue_the_host_pays_both_stages(tmp_path: Path) -> None:
    engine = Engine(DeviceSpec.load(spec_file(tmp_path, "[dispatch]\ntask_queue = false\n")))
    s = engine.default_stream
    a = engine.submit_kernel(s, kernel(1_000), name="a", op_type="A")
    b = engine.submit_kernel(s, kernel(1_000), name="b", op_type="B")
    assert (a.launch_ns, b.launch_ns, engine.host_ns) == (16_000, 32_000, 32_000)


def test_same_stream_tasks_run_in_order_back_to_back() -> None:
    engine = Engine(DeviceSpec.load())
    s = engine.default_stream
    a = engine.submit_kernel(s, kernel(100_000), name="a", op_type="A")
    b = engine.submit_kernel(s, kernel(50_000, block_dim=1), name="b", op_type="B")
    assert a.end_ns == a.start_ns + 100_000
    assert b.start_ns == a.end_ns and b.wait_ns == 0
    assert b.end_ns == b.start_ns + 50_000


def test_streams_run_concurrently_while_cores_last() -> None:
    engine = Engine(DeviceSpec.load())
    s1, s2, s3 = engine.default_stream, engine.create_stream(), engine.create_stream()
    a = engine.submit_kernel(s1, kernel(100_000, block_dim=12), name="a", op_type="A")
    b = engine.submit_kernel(s2, kernel(100_000, block_dim=12), name="b", op_type="B")
    c = engine.submit_kernel(s3, kernel(100_000, block_dim=1), name="c", op_type="C")
    assert b.start_ns < a.end_ns  # 12 + 12 cube cores fit in 24
    assert c.start_ns == a.end_ns  # no cube core left until a ends (a started first)
    assert engine.pools["aic"].busy_units(a.start_ns + 50_000) == 24


def test_cube_and_vector_overlap_only_when_split() -> None:
    results = {}
    for preset in ("ascend910b", "ascend910a"):
        engine = Engine(DeviceSpec.load(preset))
        cores = engine.spec.cube.cores
        s2 = engine.create_stream()
        mm = engine.submit_kernel(
            engine.default_stream, kernel(100_000, cores), name="mm", op_type="MatMul"
        )
        add = engine.submit_kernel(
            s2, kernel(10_000, cores, TaskType.AI_VECTOR_CORE), name="add", op_type="Add"
        )
        results[preset] = add.start_ns < mm.end_ns
    assert results == {"ascend910b": True, "ascend910a": False}


def test_a_later_task_fills_a_gap_left_by_a_waiting_one() -> None:
    engine = Engine(DeviceSpec.load())
    s1, s2, s3 = engine.default_stream, engine.create_stream(), engine.create_stream()
    long_copy = engine.submit_memcpy(s3, CopyKind.H2D, 25_000_000)  # ~1 ms
    assert long_copy is not None
    event = engine.create_event()
    engine.record_event(event, s3)
    engine.wait_event(s1, event)
    waiting = engine.submit_kernel(s1, kernel(100_000), name="w", op_type="W")
    filler = engine.submit_kernel(s2, kernel(100_000), name="f", op_type="F")
    assert waiting.start_ns == long_copy.end_ns
    assert filler.end_ns <= waiting.start_ns  # used all 24 cores before the waiting kernel


def test_copies_overlap_compute_and_share_their_dma_engine() -> None:
    engine = Engine(DeviceSpec.load())
    compute, copy1, copy2, copy3 = (
        engine.default_stream,
        *(engine.create_stream() for _ in range(3)),
    )
    mm = engine.submit_kernel(compute, kernel(1_000_000), name="mm", op_type="MatMul")
    up1 = engine.submit_memcpy(copy1, CopyKind.H2D, 2**20)
    up2 = engine.submit_memcpy(copy2, CopyKind.H2D, 2**20)
    down = engine.submit_memcpy(copy3, CopyKind.D2H, 2**20)
    assert up1 and up2 and down
    assert up1.start_ns < mm.end_ns and up1.end_ns > mm.start_ns  # overlaps compute
    assert up2.start_ns >= up1.end_ns  # one host-to-device engine
    assert down.start_ns < up1.end_ns  # the other direction is independent
    assert engine.host_ns < mm.end_ns  # pinned copies never blocked the host


def test_pageable_copy_blocks_the_host_and_pinned_does_not() -> None:
    engine = Engine(DeviceSpec.load())
    s = engine.default_stream
    pinned = engine.submit_memcpy(s, CopyKind.H2D, 2**20, pinned=True)
    assert pinned and engine.host_ns == API
    pageable = engine.submit_memcpy(s, CopyKind.H2D, 2**20, pinned=False)
    assert pageable and pageable.start_ns == pinned.end_ns
    assert pageable.end_ns - pageable.start_ns == 25_000 + 104_858
    assert engine.host_ns == pageable.end_ns + SYNC


def test_blocking_memcpy_and_host_to_host() -> None:
    npu, log = npu_with_log()
    engine = npu.engine
    task = engine.submit_memcpy(engine.default_stream, CopyKind.D2H, 4096, blocking=True)
    assert task and engine.host_ns == task.end_ns + SYNC
    before = engine.host_ns
    assert engine.submit_memcpy(engine.default_stream, CopyKind.H2H, 10_000_000) is None
    assert engine.host_ns == before + 25_000 + 1_000_000
    assert [h.kind for h in log.host][-2:] == [HostKind.SYNC, HostKind.PYTHON]


def test_events_order_streams_and_time_work() -> None:
    engine = Engine(DeviceSpec.load())
    s1, s2 = engine.default_stream, engine.create_stream()
    start, end = engine.create_event(), engine.create_event()
    engine.record_event(start, s1)
    mm = engine.submit_kernel(s1, kernel(500_000), name="mm", op_type="MatMul")
    engine.record_event(end, s1)
    engine.wait_event(s2, end)
    after = engine.submit_kernel(s2, kernel(1_000, block_dim=1), name="x", op_type="X")
    assert end.recorded_ns == mm.end_ns
    assert after.start_ns >= mm.end_ns
    assert not engine.query_event(end)
    with pytest.raises(EventNotReadyError):
        engine.event_elapsed_ms(start, end)
    engine.synchronize_event(end)
    assert engine.query_event(end)
    assert engine.event_elapsed_ms(start, end) == (mm.end_ns - start.recorded_ns) / 1e6
    # start was recorded at the end of its API call; mm started after both dispatch stages
    assert engine.event_elapsed_ms(start, end) == pytest.approx(0.5 + (STAGE1 + STAGE2) / 1e6)


def test_waiting_on_an_unrecorded_event_is_a_no_op() -> None:
    engine = Engine(DeviceSpec.load())
    event = engine.create_event()
    wait = engine.wait_event(engine.default_stream, event)
    assert wait.end_ns == wait.start_ns and wait.kind is TaskKind.EVENT_WAIT
    assert engine.query_event(event)


def test_event_without_timing_refuses_elapsed_time() -> None:
    engine = Engine(DeviceSpec.load())
    a, b = engine.create_event(timing=False), engine.create_event()
    engine.record_event(a, engine.default_stream)
    engine.record_event(b, engine.default_stream)
    engine.synchronize_device()
    with pytest.raises(DeviceError, match="without timing"):
        engine.event_elapsed_ms(a, b)


def test_synchronize_blocks_until_the_work_is_done() -> None:
    npu, log = npu_with_log()
    engine = npu.engine
    s2 = engine.create_stream()
    a = engine.submit_kernel(engine.default_stream, kernel(300_000, 12), name="a", op_type="A")
    b = engine.submit_kernel(s2, kernel(900_000, 12), name="b", op_type="B")
    engine.synchronize_stream(engine.default_stream)
    assert engine.host_ns == a.end_ns + SYNC
    assert engine.query_stream(engine.default_stream) and not engine.query_stream(s2)
    engine.synchronize_device()
    assert engine.host_ns == b.end_ns + SYNC
    syncs = [h for h in log.host if h.kind is HostKind.SYNC]
    assert [(h.name, h.end_ns) for h in syncs] == [
        ("aclrtSynchronizeStream", a.end_ns + SYNC),
        ("aclrtSynchronizeDevice", b.end_ns + SYNC),
    ]


def test_a_full_stream_blocks_the_host(tmp_path: Path) -> None:
    npu, log = npu_with_log(spec_file(tmp_path, "[limits]\nstream_depth = 4\n"))
    engine = npu.engine
    tasks = [
        engine.submit_kernel(engine.default_stream, kernel(1_000_000), name="k", op_type="K")
        for _ in range(6)
    ]
    full = [h for h in log.host if h.name == "stream queue full"]
    assert len(full) == 2
    assert full[0].end_ns == tasks[0].end_ns + SYNC  # waited for the oldest of 4 in flight


def test_records_are_built_only_for_subscribers() -> None:
    npu = SimulatedNpu()
    engine = npu.engine
    assert not npu.bus.active
    engine.submit_kernel(engine.default_stream, kernel(10), name="quiet", op_type="Q")
    log = TaskLog()
    npu.subscribe(log)
    task = engine.submit_kernel(engine.default_stream, kernel(10), name="heard", op_type="H")
    assert log.tasks == [task]
    launch = log.host[0]
    assert (launch.kind, launch.task_id, launch.end_ns - launch.start_ns) == (
        HostKind.LAUNCH,
        task.task_id,
        STAGE1,
    )
    npu.unsubscribe(log)
    engine.submit_kernel(engine.default_stream, kernel(10), name="quiet", op_type="Q")
    assert len(log.tasks) == 1 and not npu.bus.active


def test_collective_runs_on_the_hccl_link() -> None:
    from msprof_py.device.collectives import collective_cost

    engine = Engine(DeviceSpec.load())
    comm = engine.create_stream()
    cost = collective_cost(engine.spec.hccl, "allreduce", 100 * 2**20, 8)
    a = engine.submit_collective(comm, cost, not_before=5_000_000)
    b = engine.submit_collective(engine.create_stream(), cost)
    assert a.task_type is TaskType.HCCL and a.start_ns == 5_000_000
    assert a.end_ns - a.start_ns == cost.duration_ns
    assert b.start_ns < a.start_ns and b.end_ns <= a.start_ns  # b fits before a on the link
    assert a.attrs and a.attrs["algorithm"] == "mesh"


def test_a_rank_ready_before_its_peers_waits_inside_the_collective() -> None:
    from msprof_py.device.collectives import collective_cost

    engine = Engine(DeviceSpec.load())
    comm = engine.create_stream()
    cost = collective_cost(engine.spec.hccl, "allreduce", 2**20, 2)
    ready, peers = 1_000_000, 1_250_000
    task = engine.submit_collective(comm, cost, not_before=ready, peers_ready=peers)
    # begins when this rank is ready, waits 250 us for the peers, then transfers
    assert task.start_ns == ready
    assert task.attrs and task.attrs["notify_wait_ns"] == peers - ready
    assert task.end_ns == peers + cost.duration_ns
    assert task.wait_ns == 0  # the first task on the stream
    late = engine.submit_collective(comm, cost, not_before=task.end_ns, peers_ready=0)
    assert late.attrs is not None and "notify_wait_ns" not in late.attrs
    assert late.end_ns - late.start_ns == cost.duration_ns


def test_stream_lifecycle_errors() -> None:
    engine = Engine(DeviceSpec.load())
    s = engine.create_stream()
    engine.destroy_stream(s)
    with pytest.raises(DeviceError, match="does not exist"):
        engine.submit_kernel(s, kernel(1), name="x", op_type="X")
    with pytest.raises(DeviceError, match="default stream"):
        engine.destroy_stream(engine.default_stream)
    with pytest.raises(ValueError):
        engine.advance_host(-1)


def test_too_many_streams(tmp_path: Path) -> None:
    engine = Engine(DeviceSpec.load(spec_file(tmp_path, "[limits]\nmax_streams = 2\n")))
    engine.create_stream()
    with pytest.raises(DeviceError, match="more than 2 streams"):
        engine.create_stream()


def test_kernel_tasks_carry_the_cost_models_pipe_times() -> None:
    """The pipe times the exporters' PMU columns come from: each term of the roofline, as the
    cost model computed it (the duration is the overhead plus the largest)."""
    from msprof_py.device.costmodel import matmul_cost

    spec = DeviceSpec.load()
    engine = Engine(spec)
    cost = matmul_cost(spec, 256, 256, 512, dtype="float16", vector_elements=256 * 256)
    task = engine.submit_kernel(engine.default_stream, cost, name="mm", op_type="MatMul")
    assert (task.cube_ns, task.vector_ns, task.memory_ns) == (
        round(cost.cube_ns),
        round(cost.vector_ns),
        round(cost.memory_ns),
    )
    assert task.cube_ns > 0 and task.vector_ns > 0 and task.memory_ns > 0
    assert task.duration_ns == cost.sched_ns + max(task.cube_ns, task.vector_ns, task.memory_ns)
