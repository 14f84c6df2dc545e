"""Property tests of the engine: stream order, event order, resource capacity, determinism."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from device_helpers import kernel
from hypothesis import given, settings
from hypothesis import strategies as st

from msprof_py.device import CopyKind, DeviceSpec, SimulatedNpu, TaskKind, TaskLog, TaskType
from msprof_py.device.collectives import collective_cost

STREAMS, EVENTS = 4, 3
KERNEL_TYPES = [TaskType.AI_CORE, TaskType.AI_VECTOR_CORE, TaskType.MIX_AIC, TaskType.AI_CPU]
streams = st.integers(0, STREAMS - 1)
events = st.integers(0, EVENTS - 1)

operation = st.one_of(
    st.tuples(
        st.just("kernel"),
        streams,
        st.integers(0, 300_000),
        st.integers(1, 60),
        st.sampled_from(KERNEL_TYPES),
    ),
    st.tuples(
        st.just("copy"),
        streams,
        st.sampled_from([CopyKind.H2D, CopyKind.D2H, CopyKind.D2D]),
        st.integers(0, 8_000_000),
        st.booleans(),
    ),
    st.tuples(st.just("memset"), streams, st.integers(0, 8_000_000)),
    st.tuples(st.just("collective"), streams, st.integers(0, 50_000_000)),
    st.tuples(st.just("record"), events, streams),
    st.tuples(st.just("wait"), streams, events),
    st.tuples(st.just("sync_stream"), streams),
    st.tuples(st.just("sync_device")),
    st.tuples(st.just("host"), st.integers(0, 200_000)),
)
programs = st.lists(operation, min_size=1, max_size=60)


def run(
    program: list[tuple],
    *,
    launch: bool = False,
    subscribe: bool = True,
    spec: DeviceSpec | None = None,
    engine_type: type | None = None,
) -> tuple[SimulatedNpu, TaskLog, dict[int, int]]:
    """Run ``program``; return the device, its log, and for each wait task the event time.
    ``launch``: kernels go through ``launch_kernel`` (the adapter's), not ``submit_kernel``;
    ``subscribe``: the log listens (else nobody does, and it stays empty); ``engine_type``:
    the engine class (an engine on another scheduling core)."""
    npu = SimulatedNpu(spec)
    if engine_type is not None:
        npu.replace_engine(engine_type(npu.spec, npu.bus))
    log = TaskLog()
    if subscribe:
        npu.subscribe(log)
    engine = npu.engine
    stream_list = [engine.default_stream] + [engine.create_stream() for _ in range(STREAMS - 1)]
    event_list = [engine.create_event() for _ in range(EVENTS)]
    waited_for: dict[int, int] = {}
    for op in program:
        name = op[0]
        if name == "kernel":
            _, s, duration, bd, task_type = op
            if launch:
                engine.launch_kernel(stream_list[s], kernel(duration, bd, task_type), "k", "K")
            else:
                engine.submit_kernel(
                    stream_list[s], kernel(duration, bd, task_type), name="k", op_type="K"
                )
        elif name == "copy":
            _, s, kind, nbytes, pinned = op
            engine.submit_memcpy(stream_list[s], kind, nbytes, pinned=pinned)
        elif name == "memset":
            engine.submit_memset(stream_list[op[1]], op[2])
        elif name == "collective":
            cost = collective_cost(npu.spec.hccl, "allreduce", op[2], 8)
            engine.submit_collective(stream_list[op[1]], cost)
        elif name == "record":
            engine.record_event(event_list[op[1]], stream_list[op[2]])
        elif name == "wait":
            event = event_list[op[2]]
            task = engine.wait_event(stream_list[op[1]], event)
            if event.recorded_ns is not None:
                waited_for[task.task_id] = event.recorded_ns
        elif name == "sync_stream":
            engine.synchronize_stream(stream_list[op[1]])
        elif name == "sync_device":
            engine.synchronize_device()
        else:
            engine.advance_host(op[1], "python")
    return npu, log, waited_for


@settings(max_examples=150, deadline=None)
@given(programs)
def test_same_stream_tasks_never_overlap_and_keep_order(program: list[tuple]) -> None:
    _, log, _ = run(program)
    by_stream = defaultdict(list)
    for task in log.tasks:
        assert task.start_ns >= task.launch_ns
        assert task.end_ns >= task.start_ns
        by_stream[task.stream_id].append(task)
    for tasks in by_stream.values():
        ids = [t.task_id for t in tasks]
        assert ids == sorted(ids)
        for before, after in pairwise(tasks):
            assert after.start_ns >= before.end_ns
            assert after.wait_ns == after.start_ns - before.end_ns


@settings(max_examples=150, deadline=None)
@given(programs)
def test_a_waited_event_was_recorded_earlier(program: list[tuple]) -> None:
    _, log, waited_for = run(program)
    records = {t.task_id: t for t in log.tasks if t.kind is TaskKind.EVENT_RECORD}
    for task in log.tasks:
        if task.kind is not TaskKind.EVENT_WAIT or task.task_id not in waited_for:
            continue
        event_time = waited_for[task.task_id]
        assert task.end_ns >= event_time
        earlier = [r for r in records.values() if r.task_id < task.task_id]
        assert any(r.end_ns == event_time for r in earlier)


def _pool_demands(task, spec) -> list[tuple[str, int]]:
    bd = task.block_dim
    if task.task_type is TaskType.AI_CORE:
        return [("aic", min(bd, spec.cube.cores))]
    if task.task_type is TaskType.AI_VECTOR_CORE:
        return [("aiv", min(bd, spec.vector.cores))]
    if task.task_type is TaskType.MIX_AIC:
        return [("aic", min(bd, spec.cube.cores)), ("aiv", min(2 * bd, spec.vector.cores))]
    if task.task_type is TaskType.AI_CPU:
        return [("aicpu", min(bd, spec.aicpu.cores))]
    if task.task_type is TaskType.HCCL:
        return [("hccl", 1)]
    if task.task_type is TaskType.DMA:
        pool = {"MEMCPY_H2D": "h2d", "MEMCPY_D2H": "d2h"}.get(task.op_type, "sdma")
        return [(pool, 1)]
    return []


@settings(max_examples=150, deadline=None)
@given(programs)
def test_no_engine_is_ever_oversubscribed(program: list[tuple]) -> None:
    npu, log, _ = run(program)
    capacity = {"aic": 24, "aiv": 48, "aicpu": 6, "h2d": 1, "d2h": 1, "sdma": 1, "hccl": 1}
    changes = defaultdict(list)
    for task in log.tasks:
        if task.end_ns == task.start_ns:
            continue
        for pool, units in _pool_demands(task, npu.spec):
            changes[pool] += [(task.start_ns, units), (task.end_ns, -units)]
    for pool, deltas in changes.items():
        in_use = 0
        for _, delta in sorted(deltas, key=lambda d: (d[0], d[1])):  # ends before starts
            in_use += delta
            assert in_use <= capacity[pool], pool


@settings(max_examples=100, deadline=None)
@given(programs)
def test_the_host_is_one_thread_and_the_timeline_is_deterministic(program: list[tuple]) -> None:
    _, first, _ = run(program)
    _, second, _ = run(program)
    assert first.tasks == second.tasks
    assert first.host == second.host
    for before, after in pairwise(first.host):
        assert after.start_ns >= before.end_ns


def clocks(npu: SimulatedNpu) -> tuple:
    engine = npu.engine
    streams = sorted(engine.streams.items())
    return (
        engine.host_ns,
        engine.tasks_submitted,
        [(i, s.tail_ns, list(s.inflight)) for i, s in streams],
    )


@settings(max_examples=60, deadline=None)
@given(programs)
def test_launch_kernel_places_tasks_as_submit_kernel_does(program: list[tuple]) -> None:
    """The adapter launches through ``launch_kernel``, which builds no task record while
    nobody listens: with a listener every record, and without one every clock, task count and
    stream queue, must be what ``submit_kernel`` gives."""
    submitted, submitted_log, _ = run(program)
    launched, launched_log, _ = run(program, launch=True)
    assert launched_log.tasks == submitted_log.tasks
    assert launched_log.host == submitted_log.host
    assert clocks(launched) == clocks(submitted)
    quiet_submitted = run(program, subscribe=False)[0]
    quiet_launched = run(program, launch=True, subscribe=False)[0]
    assert clocks(quiet_launched) == clocks(quiet_submitted) == clocks(submitted)
