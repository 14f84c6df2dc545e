"""Engine.submit_graph: one host launch, tasks on their streams with cross-stream waits
(torch-free, hand-computed times)."""

from __future__ import annotations

from msprof_py.device import Engine, GraphTask, HostKind, TaskLog
from msprof_py.device.costmodel import Bound, KernelCost
from msprof_py.device.records import RecordBus, TaskType
from msprof_py.device.spec import DeviceSpec


def _cost(ns: int) -> KernelCost:
    return KernelCost(
        TaskType.AI_VECTOR_CORE, 1, ns, 0, 0.0, float(ns), 0.0, 1, Bound.VECTOR, 0.0, 0
    )


def test_one_launch_then_tasks_on_their_streams() -> None:
    spec = DeviceSpec.load("ascend910b")
    bus = RecordBus()
    log = TaskLog()
    bus.subscribe(log)
    engine = Engine(spec, bus)
    main, side = engine.default_stream, engine.create_stream()
    tasks = [
        GraphTask("a", "Add", _cost(1000)),
        GraphTask("b", "Mul", _cost(5000), stream=1, waits=(0,)),
        GraphTask("c", "Relu", _cost(2000)),
        GraphTask("d", "Add", _cost(500), waits=(1, 2)),
    ]
    records = engine.submit_graph([main, side], tasks, name="ModelExecute g")
    d = spec.dispatch
    launch = d.stage1_ns + d.stage2_ns  # one launch, whether stage 2 is queued or not
    assert [h.kind for h in log.host] == [HostKind.LAUNCH]
    assert log.host[0].name == "ModelExecute g" and log.host[0].task_id == records[0].task_id
    assert engine.host_ns == d.stage1_ns + (0 if d.task_queue else d.stage2_ns)
    a, b, c, dd = records
    assert a.start_ns == launch and a.end_ns == launch + 1000
    assert b.stream_id == side.stream_id and b.start_ns == a.end_ns  # waits for a
    assert c.start_ns == a.end_ns  # same stream, in order, concurrent with b
    assert dd.start_ns == b.end_ns == launch + 6000  # waits for b on the other stream
    assert main.tail_ns == dd.end_ns
    assert [t.name for t in log.tasks] == ["a", "b", "c", "d"]
