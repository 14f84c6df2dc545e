"""GE's dynamic gears (``torchair.inference.set_dim_gears``): every gear compiled with the
graph (one build, the op nodes per gear), a call on a gear compiles nothing and runs a
static plan, a size outside the gears is a one-line error; without gears each new size of a
dynamic graph compiles again."""

from __future__ import annotations

import pytest
import torch
from graph_models import mlp

from msprof_py.device import HostKind, SimulatedNpu, TaskLog
from msprof_py.graph import gears
from msprof_py.graph.config import COMPILE_BASE_NS, COMPILE_NODE_NS
from msprof_py.graph.runner import compiled_graphs


def _compiles(log: TaskLog) -> list[tuple[str, int]]:
    return [
        (h.name, h.end_ns - h.start_ns)
        for h in log.host
        if h.kind is HostKind.API and h.name.startswith("compile graph")
    ]


def _run(model, rows: int) -> torch.Tensor:
    x = torch.randn(rows, 8).to("npu")
    if rows == 2:
        import torchair

        torchair.inference.set_dim_gears(x, dim_gears={0: [2, 4, 6]})
    with torch.no_grad():
        return model(x)


@pytest.mark.slow  # a Dynamo compile: seconds
def test_gears_compile_once_and_run_static_plans(npu: SimulatedNpu, log: TaskLog) -> None:
    compiled = torch.compile(mlp().to("npu"), backend="npu", dynamic=True)
    for rows in (2, 4, 6, 4):
        assert _run(compiled, rows).shape[0] == rows
    (graph,) = compiled_graphs()
    ops = sum(1 for n in graph.gm.graph.nodes if n.op == "call_function")
    # one build, then the op nodes of each of the 3 gears; no compile for the later calls
    expected = COMPILE_BASE_NS + COMPILE_NODE_NS * ops * 3
    assert _compiles(log) == [(f"compile {graph.name} (3 gears)", expected)]
    assert graph.gears is not None and graph.gears.combos == {(2,), (4,), (6,)}
    assert all(not plan.graph.dynamic for plan in graph.plans) and len(graph.plans) == 3
    with pytest.raises(gears.GearError) as exc:
        _run(compiled, 5)
    assert "\n" not in str(exc.value) and "dim 0 = 5" in str(exc.value)


@pytest.mark.slow  # a Dynamo compile: seconds
def test_without_gears_each_new_size_compiles(npu: SimulatedNpu, log: TaskLog) -> None:
    compiled = torch.compile(mlp().to("npu"), backend="npu", dynamic=True)
    for rows in (3, 4, 6):
        with torch.no_grad():
            compiled(torch.randn(rows, 8).to("npu"))
    (graph,) = compiled_graphs()
    assert graph.gears is None and len(_compiles(log)) == 3
    assert all(plan.graph.dynamic for plan in graph.plans)


def test_gear_merging_and_limits() -> None:
    a, b = torch.ones(2, 3), torch.ones(2, 5)
    gears.set_dim_gears(a, {0: [2, 4]})
    gears.set_dim_gears(b, {0: [2, 4], 1: [5, 10]})
    zipped = gears.collect([a, b])
    assert zipped is not None and zipped.axes == ((0, 0), (1, 0), (1, 1))
    assert zipped.combos == {(2, 2, 5), (4, 4, 10)}
    product = gears.collect([a, b], "product")
    assert product is not None and len(product.combos) == 8
    assert gears.collect([torch.ones(2)]) is None
    with pytest.raises(gears.GearError, match=">= 2"):
        gears.set_dim_gears(torch.ones(2), {0: [1, 2]})
    with pytest.raises(gears.GearError, match="more than 100"):
        gears.set_dim_gears(torch.ones(2, 2), {0: list(range(2, 13)), 1: list(range(2, 12))})
    with pytest.raises(gears.GearError, match="different gears"):
        gears.set_dim_gears(a, {0: [2, 8]})
    uneven = torch.ones(2, 2)
    gears.set_dim_gears(uneven, {0: [2, 4, 6], 1: [2, 4]})
    with pytest.raises(gears.GearError, match="same number of gears"):
        gears.collect([uneven])
