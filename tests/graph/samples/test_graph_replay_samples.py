"""The graph-mode samples print the same figures with the stored-plan replay on and off."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import resnet50_graph
import two_tower_graph

from msprof_py.device import SimulatedNpu
from msprof_py.graph import runner

ROOT = Path(__file__).resolve().parents[3]
TINY = resnet50_graph.Workload(batch=2, image=16, blocks=(1,), width=4, classes=3, steps=2)


@pytest.fixture(autouse=True)
def replay_restored() -> Iterator[None]:
    yield
    runner.set_plan_replay(True)


def _figures() -> tuple:
    earlier = runner.compiled_graphs()  # other tests' graphs (held: their ids stay theirs)
    replayed_before = {id(g): g.replayed for g in earlier}
    graph = resnet50_graph.run_variant("graph", True, False, TINY)
    amp = resnet50_graph.run_variant("graph+AMP", True, True, TINY)
    towers = two_tower_graph.run(False, two_tower_graph.Workload.quick())
    replayed = sum(g.replayed - replayed_before.get(id(g), 0) for g in runner.compiled_graphs())
    figures = tuple(
        (r.step_ns, r.launches, r.graph_launches, r.fused_kernels, r.reuse_ratio, r.peak_bytes)
        for r in (graph, amp)
    )
    return (*figures, towers.step_ns, towers.plans), replayed


@pytest.mark.slow
def test_samples_figures_do_not_change_with_the_replay(npu: SimulatedNpu) -> None:
    runner.set_plan_replay(False)
    _figures()  # warm the op compile cache: both measured runs start from the same state
    interpreted, none = _figures()
    runner.set_plan_replay(True)
    replayed_figures, replayed = _figures()
    assert none == 0 and replayed > 0
    assert replayed_figures == interpreted


_SHAPES_ONLY = """
import dataclasses, sys
sys.path.insert(0, "tests/graph/backend")
import torch
import msprof_py.adapter
from graph_models import cnn
from msprof_py.device import TaskLog
from msprof_py.graph import runner

npu = msprof_py.adapter.install(numerics="none")
model = cnn().to("npu")
step = torch.compile(model, backend="npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
steps = []
for i in range(5):
    runner.set_plan_replay(i >= 3)
    torch.npu.synchronize()
    log = TaskLog()
    npu.subscribe(log)
    host0 = npu.engine.host_ns
    opt.zero_grad()
    step(torch.empty(2, 3, 8, 8).to("npu")).square().mean().backward()
    opt.step()
    torch.npu.synchronize()
    npu.unsubscribe(log)
    first = min(t.task_id for t in log.tasks)
    rows = []
    for r in [*log.tasks, *log.host, *log.memory]:
        f = dataclasses.asdict(r)
        f.pop("wait_ns", None)
        f.pop("address", None)
        for k in ("start_ns", "end_ns", "time_ns", "launch_ns"):
            if k in f:
                f[k] -= host0
        if f.get("task_id", -1) >= 0:
            f["task_id"] -= first
        rows.append(sorted(f.items()))
    steps.append(rows)
replayed = sorted(g.replayed for g in runner.compiled_graphs())
print("replayed", replayed, "same", steps[4] == steps[2], len(steps[4]))
"""


@pytest.mark.slow
def test_shapes_only_replay_keeps_the_timeline() -> None:
    """Shapes only (meta values): a replayed step's records equal an interpreted one's."""
    result = subprocess.run(
        [sys.executable, "-c", _SHAPES_ONLY],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replayed [1, 1] same True" in result.stdout, result.stdout
