"""The graph-mode samples print the same figures with the stored-plan replay on and off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import resnet50_graph
import two_tower_graph

from msprof_py.device import SimulatedNpu
from msprof_py.graph import runner

TINY = resnet50_graph.Workload(batch=2, image=16, blocks=(1,), width=4, classes=3, steps=2)


@pytest.fixture(autouse=True)
def replay_restored() -> Iterator[None]:
    yield
    runner.set_plan_replay(True)


def _figures() -> tuple:
    graph = resnet50_graph.run_variant("graph", True, False, TINY)
    amp = resnet50_graph.run_variant("graph+AMP", True, True, TINY)
    towers = two_tower_graph.run(False, two_tower_graph.Workload.quick())
    replayed = sum(g.replayed for g in runner.compiled_graphs())
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
