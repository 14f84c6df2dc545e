"""Graph IR -> launch plan: passes, static memory plan, stream plan (torch-free).

:func:`plan_graph` runs the passes (fusing in max-autotune, cleaning up only in
reduce-overhead), plans the workspace of the kernels they produce and assigns those kernels to
streams; :func:`graph_tasks` turns the plan into the engine's :class:`GraphTask` list (names,
op types, costs, streams, waits and the shapes of what each kernel reads and writes).
"""

from __future__ import annotations

from dataclasses import dataclass

from msprof_py.device.engine import GraphTask
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Graph, GraphKernel, PassRecord, TensorSpec, ValueRef
from msprof_py.graph.memory_plan import MemoryPlan, plan_memory
from msprof_py.graph.passes import run_passes
from msprof_py.graph.stream_plan import plan_streams


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """How one graph runs: kernels in launch order (stream and waits set), what the passes
    tried, the workspace plan and how many streams and events the stream plan uses."""

    graph: Graph
    kernels: tuple[GraphKernel, ...]
    records: tuple[PassRecord, ...]
    memory: MemoryPlan
    streams: int
    events: int


def plan_graph(
    graph: Graph, spec: DeviceSpec, *, fuse: bool = True, single_stream: bool = False
) -> GraphPlan:
    """Run the passes, the memory planner and the stream planner over ``graph``
    (``single_stream``: every kernel on one stream, GE's ``SINGLE_STREAM_ENABLE``)."""
    passed = run_passes(graph, spec, fuse=fuse)
    # streams first: the memory plan only shares bytes between kernels of different streams
    # when the waits order them
    streams = plan_streams(graph, passed.kernels, single_stream=single_stream)
    memory = plan_memory(graph, streams.kernels)
    return GraphPlan(
        graph,
        tuple(streams.kernels),
        tuple(passed.records),
        memory,
        max(1, streams.streams),
        streams.events,
    )


def _fields(specs: list[TensorSpec]) -> tuple[tuple, tuple, tuple]:
    return (
        tuple(s.shape for s in specs),
        tuple(s.dtype for s in specs),
        tuple(s.format for s in specs),
    )


def _refs(graph: Graph, kernel: GraphKernel, which: str) -> tuple[ValueRef, ...]:
    refs = kernel.inputs if which == "in" else kernel.outputs
    if refs or len(kernel.members) != 1:
        return refs
    node = graph.node(kernel.members[0])  # a middle kernel of a multi-kernel node
    if which == "in":
        return node.inputs
    return tuple(node.out(i) for i in range(len(node.outputs)))


def graph_tasks(plan: GraphPlan) -> list[GraphTask]:
    """The engine tasks of ``plan``, in launch order."""
    graph = plan.graph
    tasks = []
    for kernel in plan.kernels:
        ins = _fields([graph.spec(r) for r in _refs(graph, kernel, "in")])
        outs = _fields([graph.spec(r) for r in _refs(graph, kernel, "out")])
        tasks.append(
            GraphTask(
                kernel.name, kernel.op_type, kernel.cost, kernel.stream, kernel.waits, *ins, *outs
            )
        )
    return tasks
