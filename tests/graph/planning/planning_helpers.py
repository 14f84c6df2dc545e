"""Small graphs for the memory and stream planner tests, built by hand."""

from __future__ import annotations

from msprof_py.device.costmodel import Bound, KernelCost
from msprof_py.device.records import TaskType
from msprof_py.graph.ir import Graph, KernelSpec, Node, NodeKind, TensorSpec, ValueRef


def cost(duration_ns: int = 1000, task_type: TaskType = TaskType.AI_VECTOR_CORE) -> KernelCost:
    """A kernel of a hand-picked duration (no roofline)."""
    return KernelCost(
        task_type=task_type,
        block_dim=1,
        duration_ns=duration_ns,
        sched_ns=0,
        cube_ns=0.0,
        vector_ns=0.0,
        memory_ns=0.0,
        waves=1,
        bound=Bound.OVERHEAD,
        flops=0.0,
        bytes=0,
    )


class Builder:
    """Adds nodes in order; every tensor is float32 of ``numel`` elements (4 bytes each)."""

    def __init__(self, name: str = "g") -> None:
        self.name = name
        self.nodes: list[Node] = []

    def input(self, name: str, numel: int = 256, kind: NodeKind = NodeKind.INPUT) -> ValueRef:
        self.nodes.append(Node(name, kind, outputs=(TensorSpec((numel,), "float32"),)))
        return ValueRef(name)

    def op(
        self,
        name: str,
        *inputs: ValueRef,
        numel: int = 256,
        op_type: str = "Add",
        ns: int = 1000,
        task_type: TaskType = TaskType.AI_VECTOR_CORE,
        kernels: int = 1,
        outputs: int = 1,
        attrs: dict | None = None,
    ) -> ValueRef:
        specs = tuple(TensorSpec((numel,), "float32") for _ in range(outputs))
        ks = tuple(KernelSpec(op_type, cost(ns, task_type)) for _ in range(kernels))
        self.nodes.append(
            Node(name, NodeKind.OP, "op", tuple(inputs), specs, dict(attrs or {}), ks)
        )
        return ValueRef(name)

    def hccl(self, name: str, *inputs: ValueRef, numel: int = 256, ns: int = 1000) -> ValueRef:
        return self.op(
            name, *inputs, numel=numel, op_type="HcomAllReduce", ns=ns, task_type=TaskType.HCCL
        )

    def view(self, name: str, base: ValueRef, numel: int = 256) -> ValueRef:
        self.nodes.append(
            Node(
                name,
                NodeKind.OP,
                "view",
                (base,),
                (TensorSpec((numel,), "float32"),),
                view_of=base,
            )
        )
        return ValueRef(name)

    def graph(self, *outputs: ValueRef, dynamic: bool = False) -> Graph:
        return Graph(self.name, list(self.nodes), tuple(outputs), dynamic)
