"""Property tests over random DAGs in random launch orders: the memory plan never lets two
values live at once share bytes, the stream plan honours every dependency with minimal
backward waits, and both are deterministic."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from planning_helpers import cost

from msprof_py.device.records import TaskType
from msprof_py.graph.ir import (
    Graph,
    GraphKernel,
    KernelSpec,
    Node,
    NodeKind,
    TensorSpec,
    ValueRef,
    unfused_kernels,
)
from msprof_py.graph.memory_plan import plan_memory
from msprof_py.graph.stream_plan import plan_streams, schedule

NUMELS = (1, 25, 256, 300, 1024)
KINDS = ("op", "op", "op", "view", "hccl", "atomic", "multi")


@st.composite
def graphs(draw) -> Graph:
    """A random DAG (inputs, params, ops, views, collectives, atomic and two-kernel ops) with
    its nodes in a random topological order."""
    nodes: list[Node] = []
    values: list[ValueRef] = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from([NodeKind.INPUT, NodeKind.PARAM]))
        nodes.append(Node(f"in{i}", kind, outputs=(TensorSpec((256,), "float32"),)))
        values.append(ValueRef(f"in{i}"))
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(KINDS))
        name = f"n{i}"
        numel = draw(st.sampled_from(NUMELS))
        if kind == "view":
            base = draw(st.sampled_from(values))
            spec = (TensorSpec((numel,), "float32"),)
            nodes.append(Node(name, NodeKind.OP, "view", (base,), spec, view_of=base))
            values.append(ValueRef(name))
            continue
        inputs = tuple(draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)))
        n_out = 2 if kind == "multi" else draw(st.integers(1, 2))
        n_kernels = 2 if kind == "multi" else 1
        op_type = {"hccl": "HcomAllReduce", "atomic": "EmbeddingDenseGrad"}.get(kind, "Add")
        task = TaskType.HCCL if kind == "hccl" else TaskType.AI_VECTOR_CORE
        kernels = tuple(
            KernelSpec(op_type, cost(draw(st.integers(1, 5000)), task)) for _ in range(n_kernels)
        )
        specs = tuple(TensorSpec((numel,), "float32") for _ in range(n_out))
        nodes.append(Node(name, NodeKind.OP, "op", inputs, specs, {}, kernels))
        values.extend(ValueRef(name, k) for k in range(n_out))
    outputs = [values[-1]] + [v for v in values[:-1] if draw(st.booleans()) and draw(st.booleans())]
    # a random topological order of the nodes
    pending = list(nodes)
    placed: set[str] = set()
    order: list[Node] = []
    while pending:
        ready = [n for n in pending if all(r.node in placed for r in n.inputs)]
        pick = ready[draw(st.integers(0, len(ready) - 1))]
        pending.remove(pick)
        placed.add(pick.name)
        order.append(pick)
    return Graph("random", order, tuple(dict.fromkeys(outputs)))


def _base(graph: Graph, ref: ValueRef) -> ValueRef:
    while graph.node(ref.node).view_of is not None:
        ref = graph.node(ref.node).view_of
    return ref


def _deps(graph: Graph, kernels: list[GraphKernel]) -> list[set[int]]:
    """Each kernel's dependencies, computed directly: the writer of every value it reads
    (through views), and the previous kernel of its node."""
    writer: dict[ValueRef, int] = {}
    result = []
    for j, k in enumerate(kernels):
        deps = {writer[_base(graph, r)] for r in k.inputs if _base(graph, r) in writer}
        deps |= {i for i in range(j) if set(kernels[i].members) & set(k.members)}
        result.append(deps)
        for r in k.outputs:
            writer[_base(graph, r)] = j
    return result


def _reach(kernels, j: int, skip: int | None = None) -> set[int]:
    """Kernels certain to have finished before kernel ``j`` starts (stream order and waits),
    optionally ignoring ``j``'s wait on ``skip``."""
    preds = [i for i in range(j) if kernels[i].stream == kernels[j].stream][-1:]
    preds += [w for w in kernels[j].waits if w != skip]
    seen: set[int] = set()
    stack = list(preds)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(w for w in kernels[i].waits)
        stack.extend([p for p in range(i) if kernels[p].stream == kernels[i].stream][-1:])
    return seen


def _users(graph: Graph, kernels, value: ValueRef) -> set[int]:
    """Launch indices of the kernels that write or read ``value``, a node's kernels as one."""
    direct = {
        i
        for i, k in enumerate(kernels)
        if any(_base(graph, r) == value for r in (*k.inputs, *k.outputs))
    }
    members = {m for i in direct for m in kernels[i].members}
    return {i for i, k in enumerate(kernels) if set(k.members) & members}


def _shares(a, b) -> bool:
    return a.size > 0 and b.size > 0 and a.offset < b.end and b.offset < a.end


@settings(max_examples=150, deadline=None)
@given(graphs(), st.sampled_from([1, 32, 512]))
def test_memory_plan_properties(graph: Graph, alignment: int) -> None:
    kernels = unfused_kernels(graph)
    plan = plan_memory(graph, kernels, alignment=alignment)
    escaping = {_base(graph, r) for r in graph.outputs}
    expected = {
        _base(graph, r)
        for k in kernels
        for r in k.outputs
        if graph.node(_base(graph, r).node).kind is NodeKind.OP and _base(graph, r) not in escaping
    }
    assert {b.value for b in plan.blocks} == expected
    for b in plan.blocks:
        assert b.size % alignment == 0 and b.offset % alignment == 0
        assert b.size >= graph.spec(b.value).nbytes
        users = _users(graph, kernels, b.value)
        assert (b.first, b.last) == (min(users), max(users))
    for i, a in enumerate(plan.blocks):
        for b in plan.blocks[i + 1 :]:
            if a.reason or b.reason or (a.first <= b.last and b.first <= a.last):
                assert not _shares(a, b), (a, b)
    assert plan.live_peak_bytes <= plan.workspace_bytes <= plan.no_reuse_bytes
    assert plan.no_reuse_bytes == sum(b.size for b in plan.blocks)
    assert plan.workspace_bytes == max((b.end for b in plan.blocks), default=0)
    assert plan_memory(graph, list(kernels), alignment=alignment) == plan


@settings(max_examples=150, deadline=None)
@given(graphs(), st.integers(2, 5))
def test_stream_plan_properties(graph: Graph, max_streams: int) -> None:
    kernels = unfused_kernels(graph)
    plan = plan_streams(graph, kernels, max_streams=max_streams)
    out = list(plan.kernels)
    assert [dataclasses.replace(k, stream=0, waits=()) for k in out] == kernels
    used = {k.stream for k in out}
    assert used == set(range(plan.streams))
    assert plan.streams <= max_streams
    for s in used:  # a stream holds communication or compute, never both
        kinds = {k.cost.task_type is TaskType.HCCL for k in out if k.stream == s}
        assert len(kinds) == 1
    deps = _deps(graph, kernels)
    for j, k in enumerate(out):
        assert all(0 <= w < j and out[w].stream != k.stream for w in k.waits)
        reach = _reach(out, j)
        assert deps[j] <= reach, (j, deps[j], reach)
        for w in k.waits:  # no wait is implied by the others and stream order
            assert w not in _reach(out, j, skip=w)
    assert plan.events == sum(len(k.waits) for k in out) <= plan.inserted_events
    assert plan_streams(graph, list(kernels), max_streams=max_streams) == plan
    times = schedule(plan)
    for j, d in enumerate(deps):
        assert all(times[i][1] <= times[j][0] for i in d)
    total = sum(k.cost.duration_ns for k in kernels)
    assert max((t[1] for t in times), default=0) <= total


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_stream_aware_memory_plan_never_shares_bytes_in_use_at_once(graph: Graph) -> None:
    plan = plan_streams(graph, unfused_kernels(graph))
    memory = plan_memory(graph, plan.kernels)
    times = schedule(plan)
    spans = {}
    for b in memory.blocks:
        users = _users(graph, plan.kernels, b.value)
        spans[b.value] = (min(times[i][0] for i in users), max(times[i][1] for i in users))
    for i, a in enumerate(memory.blocks):
        for b in memory.blocks[i + 1 :]:
            if _shares(a, b):
                (s1, e1), (s2, e2) = spans[a.value], spans[b.value]
                assert e1 <= s2 or e2 <= s1, (a, b)
    assert memory.workspace_bytes <= memory.no_reuse_bytes
