"""Stored-plan replay: a compiled graph's later calls compute values with one generated host
function and launch the stored plan; the timeline and the values are those of interpreting."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from graph_models import cnn, train
from torch import nn

from msprof_py.device import SimulatedNpu, TaskLog
from msprof_py.graph import runner

#: record fields that depend on what ran before the step (the idle gap before a stream's
#: first task, the allocator's addresses), not on the step itself
_HISTORY = ("wait_ns", "address")
_TIMES = ("start_ns", "end_ns", "time_ns", "launch_ns")


@pytest.fixture(autouse=True)
def replay_restored() -> Iterator[None]:
    yield
    runner.set_plan_replay(True)


def _relative(log: TaskLog, host0: int) -> list[tuple]:
    """Every record of one step with times relative to the step's start and task ids
    relative to its first task."""
    first_task = min(t.task_id for t in log.tasks)
    rows = []
    for record in [*log.tasks, *log.host, *log.memory, *log.graphs]:
        fields = dataclasses.asdict(record)
        for key in _HISTORY:
            fields.pop(key, None)
        for key in _TIMES:
            if key in fields:
                fields[key] -= host0
        if fields.get("task_id", -1) >= 0:
            fields["task_id"] -= first_task
        rows.append((type(record).__name__, sorted(fields.items(), key=lambda kv: kv[0])))
    return rows


def test_replayed_steps_have_the_interpreted_timeline_and_values(npu: SimulatedNpu) -> None:
    """Steps 1-3 interpret every call (replay off; step 1 compiles and converts the weights,
    step 2 creates the momentum buffers), step 4 interprets and stores, step 5 replays: each
    record of the replayed step equals step 3's (relative to the step start), and
    the losses and parameters equal eager CPU bitwise (the conv's input is converted to
    NC1HWC0 in place every step: the replay repeats that TransData's retag and memory)."""
    torch.manual_seed(0)
    base = cnn()
    inputs = [torch.randn(2, 3, 8, 8) for _ in range(5)]
    cpu_losses, cpu_model = train(base, inputs, "cpu")
    model = cnn()
    model.load_state_dict(base.state_dict())
    model = model.to("npu")
    step = torch.compile(model, backend="npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    steps, losses = [], []
    for i, x in enumerate(inputs):
        runner.set_plan_replay(i >= 3)
        torch.npu.synchronize()
        log = TaskLog()
        npu.subscribe(log)
        host0 = npu.engine.host_ns
        opt.zero_grad()
        loss = step(x.to("npu")).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
        torch.npu.synchronize()
        npu.unsubscribe(log)
        steps.append(_relative(log, host0))
    graphs = runner.compiled_graphs()
    assert sorted(g.name for g in graphs) == ["graph0_backward", "graph0_forward"]
    for g in graphs:
        assert g.calls == 5 and g.replayed == 1, (g.name, g.replay_reason, g.replay_misses)
    assert any(kind == "GraphRecord" for kind, _ in steps[0])  # compile-time records
    assert len(steps[4]) > 50
    assert steps[4] == steps[2]
    for a, b in zip(cpu_losses, losses, strict=True):
        assert torch.equal(a, b)
    cpu_state = cpu_model.state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(value.cpu(), cpu_state[name]), name


def test_random_ops_keep_a_graph_interpreted(npu: SimulatedNpu) -> None:
    """A graph drawing random numbers (dropout) is never replayed: the values would need
    the adapter's generator; it still runs, interpreted, with its reason recorded."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).to("npu")
    step = torch.compile(model, backend="npu")
    x = torch.ones(2, 4).to("npu")
    with torch.no_grad():
        for _ in range(3):
            step(x)
    [graph] = runner.compiled_graphs()
    assert graph.calls == 3 and graph.replayed == 0
    assert "random numbers" in graph.replay_reason
