"""Hand-checked stream plans: chains, branches, HCCL, pruned waits, the stream cap, single
stream, and the contention-free schedule."""

from __future__ import annotations

import dataclasses

import pytest
from planning_helpers import Builder

from msprof_py.device.costmodel import vector_cost
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import unfused_kernels
from msprof_py.graph.stream_plan import plan_streams, schedule


def _plan(graph, **kw):
    return plan_streams(graph, unfused_kernels(graph), **kw)


def _layout(plan):
    return [(k.name, k.stream, k.waits) for k in plan.kernels]


def _two_branches(ns: int = 1000):
    g = Builder()
    x = g.input("x")
    a1 = g.op("a1", x, ns=ns)
    a2 = g.op("a2", a1, ns=ns)
    b1 = g.op("b1", x, ns=ns)
    b2 = g.op("b2", b1, ns=ns)
    return g, g.op("c", a2, b2, ns=500)


def test_a_chain_stays_on_one_stream_without_events() -> None:
    g = Builder()
    v = g.input("x")
    for i in range(5):
        v = g.op(f"k{i}", v)
    plan = _plan(g.graph(v))
    assert _layout(plan) == [(f"k{i}", 0, ()) for i in range(5)]
    assert (plan.streams, plan.events, plan.inserted_events) == (1, 0, 0)


def test_two_independent_branches_get_two_streams_and_a_join_wait() -> None:
    g, c = _two_branches()
    plan = _plan(g.graph(c))
    assert _layout(plan) == [
        ("a1", 0, ()),
        ("a2", 0, ()),
        ("b1", 1, ()),
        ("b2", 1, ()),
        ("c", 0, (3,)),  # c continues a2's stream and waits for b2
    ]
    assert (plan.streams, plan.events) == (2, 1)


def test_two_streams_finish_a_two_branch_graph_earlier_than_one() -> None:
    g, c = _two_branches(ns=1000)
    graph = g.graph(c)
    two = schedule(_plan(graph), launch_ns=100)
    one = schedule(_plan(graph, single_stream=True), launch_ns=100)
    assert two == [(100, 1100), (1100, 2100), (100, 1100), (1100, 2100), (2100, 2600)]
    assert one[-1] == (4100, 4600)  # 4 x 1000 + 500 in a row


def test_an_hccl_kernel_runs_on_its_own_stream_and_its_successors_wait_for_it() -> None:
    g = Builder()
    x = g.input("x")
    g1 = g.op("g1", x)
    ar = g.hccl("ar", g1)
    g2 = g.op("g2", g1)  # backward goes on while ar runs
    u = g.op("u", ar, g2)  # consumes the reduced gradient
    g3 = g.op("g3", g2)
    plan = _plan(g.graph(u, g3))
    assert plan.comm_stream == 1
    assert _layout(plan) == [
        ("g1", 0, ()),
        ("ar", 1, (0,)),
        ("g2", 0, ()),
        ("u", 2, (1, 2)),  # AllReduceParallelPass: a stream of its own, not g2's
        ("g3", 0, ()),  # the main stream never waits for the all-reduce
    ]
    # hcom_parallel off: u continues g2's stream (its first non-HCCL predecessor's)
    serial = _plan(g.graph(u, g3), allreduce_parallel=False)
    assert [k.stream for k in serial.kernels][:4] == [0, 1, 0, 0]
    assert serial.kernels[3].waits == (1,)


def _two_all_reduces(more: bool):
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)
    b = g.op("b", a)
    r1 = g.hccl("r1", a)
    r2 = g.hccl("r2", b)
    c = g.op("c", b)
    u1 = g.op("u1", r1, c)
    u2 = g.op("u2", r2, c)
    outs = [u1, u2]
    if more:  # backward work launched after them, independent of them
        outs.append(g.op("more", c))
    return _plan(g.graph(*outs))


def test_successors_of_several_all_reduces_share_one_stream() -> None:
    plan = _two_all_reduces(more=True)
    streams = {k.name: k.stream for k in plan.kernels}
    assert streams["r1"] == streams["r2"] == plan.comm_stream
    assert streams["u1"] == streams["u2"] not in {streams["c"], plan.comm_stream}
    assert streams["more"] == streams["c"]
    assert plan.merged_streams == 0
    # without the independent kernel, u1 and u2 run after everything on the main stream
    # anyway: their stream is merged back (OptimizeIneffectiveMultiStream)
    merged = _two_all_reduces(more=False)
    streams = {k.name: k.stream for k in merged.kernels}
    assert streams["u1"] == streams["u2"] == streams["c"]
    assert (merged.streams, merged.merged_streams) == (2, 1)


def test_a_stream_that_never_runs_in_parallel_is_merged_back() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)
    r = g.hccl("r", a)
    u = g.op("u", r)  # opens the post-all-reduce stream ...
    v = g.op("v", u)
    plan = _plan(g.graph(v))
    # ... but everything on it runs after a anyway: merged into a's stream
    assert _layout(plan) == [("a", 0, ()), ("r", 1, (0,)), ("u", 0, (1,)), ("v", 0, ())]
    assert (plan.streams, plan.merged_streams, plan.events) == (2, 1, 2)


def test_redundant_waits_are_pruned() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)  # 0, stream 0
    b1 = g.op("b1", x)  # 1, stream 1
    b2 = g.op("b2", b1)  # 2, stream 1
    d = g.op("d", b2, x)  # 3: b2's successor on stream 1
    e = g.op("e", a, b1, b2, d)  # 4: needs b1, b2, d on stream 1: waiting for d implies all
    plan = _plan(g.graph(e))
    assert _layout(plan)[4] == ("e", 0, (3,))
    assert (plan.inserted_events, plan.events) == (3, 1)


def test_a_wait_implied_through_a_third_stream_is_pruned() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)  # 0, s0
    b = g.op("b", x)  # 1, s1
    c = g.op("c", x)  # 2, s2
    d = g.op("d", c, b)  # 3, s2: waits b
    e = g.op("e", a, d, b)  # 4, s0: needs d (waits) and b (implied through d's wait)
    plan = _plan(g.graph(e))
    layout = _layout(plan)
    assert layout[3] == ("d", 2, (1,))
    assert layout[4] == ("e", 0, (3,))
    assert (plan.inserted_events, plan.events) == (3, 2)


def _fan(width: int):
    g = Builder()
    x = g.input("x")
    heads = [g.op(f"h{i}", x, ns=1000 * (i + 1)) for i in range(width)]
    return g.graph(g.op("join", *heads))


def test_the_stream_cap_folds_extra_streams() -> None:
    graph = _fan(5)
    free = _plan(graph)
    assert free.streams == 5
    capped = _plan(graph, max_streams=3)
    assert (capped.streams, capped.folded_streams) == (3, 2)
    # h3 ties (one unordered pair with each kept stream): the lowest; h4 then loses least
    # parallelism on stream 1 (stream 0 holds two heads now)
    assert [k.stream for k in capped.kernels][:5] == [0, 1, 2, 0, 1]
    times = schedule(capped)
    assert [t[1] for t in times[:5]] == [1000, 2000, 3000, 1000 + 4000, 2000 + 5000]
    assert times[-1][0] == 7000


def test_the_cap_keeps_communication_apart() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)
    b = g.op("b", x)
    r = g.hccl("r", a)
    plan = _plan(g.graph(r, b), max_streams=2)
    streams = {k.name: k.stream for k in plan.kernels}
    assert streams["a"] == streams["b"] != streams["r"] == plan.comm_stream
    assert plan.streams == 2


def test_a_stream_label_groups_kernels() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x, attrs={"_stream_label": "aux"})
    b = g.op("b", x)
    c = g.op("c", a, attrs={"_stream_label": "aux"})
    d = g.op("d", b, c)
    plan = _plan(g.graph(d))
    streams = {k.name: k.stream for k in plan.kernels}
    assert streams["a"] == streams["c"] != streams["b"]
    assert streams["d"] == streams["b"]  # the label stream is not continued by others


@pytest.mark.parametrize("case", ["dynamic", "single_stream", "max_streams"])
def test_single_stream_cases(case: str) -> None:
    g, c = _two_branches()
    graph = g.graph(c, dynamic=case == "dynamic")
    kw = {"single_stream": True} if case == "single_stream" else {}
    if case == "max_streams":
        kw = {"max_streams": 1}
    plan = _plan(graph, **kw)
    assert {k.stream for k in plan.kernels} == {0}
    assert all(k.waits == () for k in plan.kernels)
    assert (plan.streams, plan.events) == (1, 0)
    assert plan.reason


def test_invalid_cap_and_empty_list() -> None:
    g, c = _two_branches()
    with pytest.raises(ValueError, match="max_streams"):
        _plan(g.graph(c), max_streams=0)
    assert plan_streams(g.graph(c), []).streams == 0


def test_schedule_with_cost_model_kernels() -> None:
    spec = DeviceSpec.load("ascend910b")
    branch = vector_cost(spec, elements=1 << 20, dtype="float16", bytes_moved=4 << 20)
    join = vector_cost(spec, elements=1 << 20, dtype="float16", bytes_moved=6 << 20)
    g, c = _two_branches()
    graph = g.graph(c)
    kernels = [
        dataclasses.replace(k, cost=join if k.name == "c" else branch)
        for k in unfused_kernels(graph)
    ]
    d, j = branch.duration_ns, join.duration_ns
    assert d > 0 and j > d
    two = schedule(plan_streams(graph, kernels))
    one = schedule(plan_streams(graph, kernels, single_stream=True))
    assert two[-1] == (2 * d, 2 * d + j)
    assert one[-1] == (4 * d, 4 * d + j)
