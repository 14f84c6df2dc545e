"""A finished graph plan as a device record, for the profile (torch-free).

When the backend plans a graph (its first compile, or a re-plan once its kernels changed), it
calls :func:`publish`: while anything listens on the device's record bus (the collectors'
recorder), a :class:`~msprof_py.device.records.GraphRecord` describing the plan is emitted
there: the graph's size, the kernels the passes left (fused or not, their streams, waits and
workspace offsets), what every pass tried, the workspace with and without reuse, the compile
time and the recompile count of its code object. The recorder writes it to the profile's
``graphs``, ``graph_passes`` and ``graph_kernels`` tables.
"""

from __future__ import annotations

from msprof_py.device.engine import Engine
from msprof_py.device.records import GraphRecord, PlannedKernel, PlannedPass
from msprof_py.graph.ir import GraphKernel, Node
from msprof_py.graph.memory_plan import Block
from msprof_py.graph.pipeline import GraphPlan


def _kernel(kernel: GraphKernel, blocks: dict, nodes: dict[str, Node]) -> PlannedKernel:
    placed: list[Block | None] = [blocks.get(ref) for ref in kernel.outputs]
    owner = next((nodes[m] for m in kernel.members if m in nodes and nodes[m].module_path), None)
    return PlannedKernel(
        kernel.name,
        kernel.op_type,
        kernel.cost.task_type.value,
        tuple(kernel.members),
        kernel.pass_name,
        kernel.stream,
        tuple(kernel.waits),
        int(kernel.cost.duration_ns),
        tuple(b.offset if b is not None else -1 for b in placed),
        tuple(b.size if b is not None else 0 for b in placed),
        owner.module if owner is not None else "",
        owner.module_path if owner is not None else "",
    )


def plan_record(
    plan: GraphPlan,
    *,
    time_ns: int,
    mode: str,
    compile_ns: int = 0,
    code: str = "",
    compiles: int = 0,
    recompile_limit: int = 0,
) -> GraphRecord:
    """The record of ``plan`` (see :class:`~msprof_py.device.records.GraphRecord`)."""
    graph, memory = plan.graph, plan.memory
    blocks = {b.value: b for b in memory.blocks}
    nodes = {n.name: n for n in graph.nodes}
    return GraphRecord(
        time_ns=time_ns,
        graph=graph.name,
        mode=mode,
        dynamic=graph.dynamic,
        nodes=len(graph.nodes),
        op_nodes=len(graph.ops()),
        eager_kernels=sum(len(n.kernels) for n in graph.ops()),
        workspace_bytes=memory.workspace_bytes,
        no_reuse_bytes=memory.no_reuse_bytes,
        live_peak_bytes=memory.live_peak_bytes,
        reused_blocks=memory.reused_blocks,
        streams=plan.streams,
        events=plan.events,
        compile_ns=compile_ns,
        code=code,
        compiles=compiles,
        recompile_limit=recompile_limit,
        passes=tuple(
            PlannedPass(r.pass_name, tuple(r.nodes), r.hit, r.reason) for r in plan.records
        ),
        kernels=tuple(_kernel(k, blocks, nodes) for k in plan.kernels),
    )


def publish(engine: Engine, plan: GraphPlan, **how: object) -> None:
    """Emit the record of ``plan`` on ``engine``'s bus (nothing is built while nobody
    listens). ``how``: :func:`plan_record`'s keywords but ``time_ns`` (the engine's host
    clock now)."""
    if engine.bus.active:
        engine.bus.emit(plan_record(plan, time_ns=engine.host_ns, **how))  # type: ignore[arg-type]
