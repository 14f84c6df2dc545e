"""Hand-computed static memory plans: reuse along a chain, a diamond, no-reuse rules, views,
alignment, multi-kernel nodes and stream-aware reuse."""

from __future__ import annotations

import pytest
from planning_helpers import Builder

from msprof_py.graph.ir import NodeKind, ValueRef, unfused_kernels
from msprof_py.graph.memory_plan import (
    REASON_ATOMIC,
    REASON_COMMUNICATION,
    _best_fit,
    plan_memory,
)
from msprof_py.graph.stream_plan import plan_streams

S = 1024  # 256 float32


def _overlap(a, b) -> bool:
    return a.offset < b.end and b.offset < a.end


def _plan(graph, **kw):
    return plan_memory(graph, unfused_kernels(graph), **kw)


def test_chain_reuses_the_block_of_a_dead_value() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)
    b = g.op("b", a)
    c = g.op("c", b)
    d = g.op("d", c)
    plan = _plan(g.graph(d))
    assert [(bl.value.node, bl.first, bl.last) for bl in plan.blocks] == [
        ("a", 0, 1),
        ("b", 1, 2),
        ("c", 2, 3),
    ]
    # a at 0, b above it (both live at kernel 1), c back at a's offset (a died at kernel 1)
    assert [bl.offset for bl in plan.blocks] == [0, S, 0]
    assert plan.workspace_bytes == 2 * S
    assert plan.no_reuse_bytes == 3 * S
    assert plan.live_peak_bytes == 2 * S
    assert plan.reused_blocks == 1
    assert plan.reuse_ratio == pytest.approx(1 / 3)
    assert plan.no_reuse == ()


def test_diamond_keeps_both_branches_live_until_the_join() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)
    b = g.op("b", a)
    c = g.op("c", a)
    d = g.op("d", b, c)
    e = g.op("e", d)
    f = g.op("f", e)
    plan = _plan(g.graph(f))
    lifetimes = {bl.value.node: (bl.first, bl.last) for bl in plan.blocks}
    assert lifetimes == {"a": (0, 2), "b": (1, 3), "c": (2, 3), "d": (3, 4), "e": (4, 5)}
    offsets = {bl.value.node: bl.offset for bl in plan.blocks}
    # a, b, c all live at kernel 2; d takes a's bytes, e takes b's (the lowest free offset)
    assert offsets == {"a": 0, "b": S, "c": 2 * S, "d": 0, "e": S}
    assert plan.workspace_bytes == 3 * S
    assert plan.no_reuse_bytes == 5 * S
    assert plan.live_peak_bytes == 3 * S


def test_larger_values_are_placed_first_and_smaller_ones_fill_gaps() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x, numel=1024)  # 4 KiB
    b = g.op("b", a)  # 1 KiB
    c = g.op("c", b)
    d = g.op("d", c, numel=1024)
    e = g.op("e", d)
    plan = _plan(g.graph(e))
    offsets = {bl.value.node: bl.offset for bl in plan.blocks}
    # a (0..4S) first, d (lives 3..4, disjoint from a) at 0 as well, b above a,
    # c conflicts with b (1..2) and d (3..4): above both
    assert offsets == {"a": 0, "d": 0, "b": 4 * S, "c": 5 * S}
    assert plan.workspace_bytes == 6 * S
    assert plan.live_peak_bytes == 5 * S


def test_best_fit_takes_the_smallest_gap_that_holds_the_value() -> None:
    # gaps [1, 3) (2 wide) and [4, 5) (1 wide) between the taken ranges
    taken = [(5, 6), (0, 1), (3, 4)]
    assert _best_fit(1, taken) == 4
    assert _best_fit(2, taken) == 1
    assert _best_fit(3, taken) == 6  # no gap holds it: above everything
    assert _best_fit(3, []) == 0


def test_a_small_value_fills_the_gap_a_dead_large_value_left() -> None:
    g = Builder()
    x = g.input("x")
    big = g.op("big", x, numel=768)  # 3S, lives 0..3
    small = g.op("small", x, numel=256)  # S, lives 1..3
    hold = g.op("hold", x, numel=1024)  # 4S, lives 2..4 (reads nothing but x)
    tail = g.op("tail", big, small, hold)  # kernel 3
    late = g.op("late", hold, numel=256)  # S, kernel 4: big and small are dead
    out = g.op("out", late, tail)
    plan = _plan(g.graph(out))
    offsets = {bl.value.node: bl.offset for bl in plan.blocks}
    # hold (4S) at 0, big (3S) at 4S, small at 7S; tail (S, lives 3..5) conflicts with all
    # three: above them at 8S; late (S, lives 4..5) conflicts with hold and tail: gaps
    # [4S, 8S) (big and small are dead), so late goes to 4S.
    assert offsets["hold"] == 0 and offsets["big"] == 4 * S and offsets["small"] == 7 * S
    assert offsets["tail"] == 8 * S
    assert offsets["late"] == 4 * S
    assert plan.workspace_bytes == 9 * S


def test_communication_output_is_never_shared() -> None:
    def build(collective: bool):
        g = Builder()
        x = g.input("x")
        p = g.op("p", x)
        q = g.op("q", p)
        r = g.hccl("r", q) if collective else g.op("r", q)
        s = g.op("s", r)
        t = g.op("t", s)
        return g.graph(t)

    plain = _plan(build(False))
    # control: r (2..3) reuses p's bytes (0..1) when it is a plain op
    assert plain.block(ValueRef("r")).offset == plain.block(ValueRef("p")).offset
    plan = _plan(build(True))
    r = plan.block(ValueRef("r"))
    assert r.reason == REASON_COMMUNICATION
    assert (r.offset, r.size, r.first, r.last) == (0, S, 2, 3)
    assert all(not _overlap(r, bl) for bl in plan.blocks if bl.value != r.value)
    assert plan.no_reuse == ((ValueRef("r"), REASON_COMMUNICATION),)
    # p and s still share (lifetimes 0..1 and 3..4), above r's bytes
    assert plan.block(ValueRef("p")).offset == plan.block(ValueRef("s")).offset == S
    assert plan.workspace_bytes == 3 * S
    assert plan.live_peak_bytes == 3 * S  # r counts as live for the whole graph


def test_atomic_output_is_never_shared_and_the_set_is_replaceable() -> None:
    g = Builder()
    x = g.input("x")
    p = g.op("p", x)
    q = g.op("q", p)
    e = g.op("e", q, op_type="EmbeddingDenseGrad")
    f = g.op("f", e)
    graph = g.graph(f)
    plan = _plan(graph)
    assert plan.block(ValueRef("e")).reason == REASON_ATOMIC
    assert plan.block(ValueRef("e")).offset == 0
    assert plan.workspace_bytes == 3 * S
    relaxed = _plan(graph, atomic_op_types=frozenset())
    assert relaxed.block(ValueRef("e")).reason == ""
    assert relaxed.block(ValueRef("e")).offset == relaxed.block(ValueRef("p")).offset
    assert relaxed.workspace_bytes == 2 * S


def test_a_view_keeps_its_base_alive() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)  # kernel 0
    v = g.view("v", a)
    w = g.view("w", v)  # a view of a view
    b = g.op("b", x)  # kernel 1
    c = g.op("c", b)  # kernel 2
    d = g.op("d", w, c)  # kernel 3 reads a through two views
    plan = _plan(g.graph(d))
    assert {bl.value.node for bl in plan.blocks} == {"a", "b", "c"}  # views own no bytes
    blk = plan.block(ValueRef("a"))
    assert (blk.first, blk.last) == (0, 3)
    assert all(not _overlap(blk, o) for o in plan.blocks if o.value != blk.value)
    # a, b and c are all live at kernel 2 (without the views a would die at kernel 0 and c
    # would take its bytes)
    assert plan.workspace_bytes == plan.live_peak_bytes == 3 * S


def test_a_value_returned_through_a_view_is_not_in_the_workspace() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)
    b = g.op("b", a)
    v = g.view("v", b)
    plan = _plan(g.graph(v))
    assert [bl.value.node for bl in plan.blocks] == ["a"]


def test_parameters_and_outputs_are_not_planned() -> None:
    g = Builder()
    w = g.input("w", kind=NodeKind.PARAM)
    x = g.input("x")
    a = g.op("a", x, w)
    b = g.op("b", a, w)
    plan = _plan(g.graph(b))
    assert [bl.value.node for bl in plan.blocks] == ["a"]


def test_sizes_and_offsets_are_aligned() -> None:
    g = Builder()
    x = g.input("x", numel=25)
    a = g.op("a", x, numel=25)  # 100 bytes
    b = g.op("b", a, numel=200)  # 800 bytes
    c = g.op("c", b, numel=25)
    graph = g.graph(c)
    plan = _plan(graph)
    assert [bl.size for bl in plan.blocks] == [512, 1024]
    assert plan.no_reuse_bytes == 1536
    small = _plan(graph, alignment=32)
    assert [bl.size for bl in small.blocks] == [128, 800]
    assert all(bl.offset % 32 == 0 for bl in small.blocks)
    with pytest.raises(ValueError, match="alignment"):
        _plan(graph, alignment=0)


def test_a_multi_kernel_node_keeps_its_inputs_until_its_last_kernel() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)  # kernel 0
    b = g.op("b", a, kernels=2, outputs=2)  # kernels 1 and 2; reads a in both
    c = g.op("c", b, ValueRef("b", 1))  # kernel 3
    plan = _plan(g.graph(c))
    assert (plan.block(a).first, plan.block(a).last) == (0, 2)
    assert (plan.block(b).first, plan.block(b).last) == (1, 3)
    assert not _overlap(plan.block(a), plan.block(b))
    assert not _overlap(plan.block(a), plan.block(ValueRef("b", 1)))


def test_reuse_respects_kernels_that_run_concurrently_on_other_streams() -> None:
    g = Builder()
    x = g.input("x")
    a = g.op("a", x)  # kernel 0, stream A
    b = g.op("b", a)  # kernel 1, stream A: a dies here
    c = g.op("c", x)  # kernel 2, stream B: may run while b still reads a
    d = g.op("d", c)  # kernel 3, stream B
    out = g.op("out", b, d)
    graph = g.graph(out)
    kernels = unfused_kernels(graph)
    one_stream = plan_memory(graph, kernels)
    assert one_stream.block(c).offset == one_stream.block(a).offset  # launch order: a is dead
    streams = plan_streams(graph, kernels)
    assert streams.streams == 2
    planned = plan_memory(graph, streams.kernels)
    assert not _overlap(planned.block(a), planned.block(c))
    assert planned.workspace_bytes > one_stream.workspace_bytes


def test_same_input_same_plan() -> None:
    def build():
        g = Builder()
        x = g.input("x")
        a = g.op("a", x, numel=300)
        b = g.op("b", a, x, numel=700)
        c = g.op("c", a, b, numel=300)
        return g.graph(g.op("d", c, b))

    first, second = build(), build()
    assert _plan(first) == _plan(second)
