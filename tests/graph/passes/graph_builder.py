"""Build small IR graphs by hand for the pass tests: nodes costed as eager mode costs them."""

from __future__ import annotations

import math
from collections.abc import Sequence

from msprof_py.device import costmodel
from msprof_py.device.dtypes import itemsize
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Graph, KernelSpec, Node, NodeKind, TensorSpec, ValueRef

VIEWS = {"view", "t", "expand", "permute", "transpose", "_unsafe_view", "detach", "unsqueeze"}
CUBE = {"mm", "addmm", "bmm", "convolution"}
OP_TYPES = {"mm": "MatMul", "addmm": "MatMul", "bmm": "BatchMatMul", "convolution": "Conv2D"}


class Builder:
    """Appends nodes in topological order; ``op`` returns the node's first output."""

    def __init__(self, spec: DeviceSpec, dtype: str = "float16") -> None:
        self.spec = spec
        self.dtype = dtype
        self.nodes: list[Node] = []

    def _node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def input(self, name: str, shape: Sequence[int], kind: NodeKind = NodeKind.INPUT) -> ValueRef:
        self.nodes.append(Node(name, kind, outputs=(TensorSpec(tuple(shape), self.dtype),)))
        return ValueRef(name)

    def param(self, name: str, shape: Sequence[int]) -> ValueRef:
        return self.input(name, shape, NodeKind.PARAM)

    def const(self, name: str, shape: Sequence[int]) -> ValueRef:
        return self.input(name, shape, NodeKind.CONST)

    def op(
        self,
        name: str,
        target: str,
        inputs: Sequence[ValueRef],
        shape: Sequence[int] | None = None,
        *,
        outputs: Sequence[Sequence[int]] | None = None,
        attrs: dict | None = None,
        dtype: str | None = None,
        mnk: tuple[int, int, int, int] | None = None,
    ) -> ValueRef:
        dt = dtype or self.dtype
        if outputs is None:
            if shape is None:
                shape = self.nodes_spec(inputs[0]).shape
            outputs = [shape]
        outs = tuple(TensorSpec(tuple(s), dt) for s in outputs)
        view_of = inputs[0] if target in VIEWS else None
        kernels: tuple[KernelSpec, ...] = ()
        if view_of is None:
            nbytes = sum(self.nodes_spec(r).nbytes for r in inputs) + sum(o.nbytes for o in outs)
            if target in CUBE:
                batch, m, n, k = mnk or (1, outs[0].shape[-2], outs[0].shape[-1], 64)
                cost = costmodel.matmul_cost(
                    self.spec, m, n, k, batch=batch, dtype=dt, bytes_moved=nbytes
                )
            else:
                cost = costmodel.vector_cost(
                    self.spec, elements=outs[0].numel, dtype=dt, bytes_moved=nbytes
                )
            kernels = (KernelSpec(OP_TYPES.get(target, target.capitalize()), cost),)
        self.nodes.append(
            Node(
                name, NodeKind.OP, target, tuple(inputs), outs, dict(attrs or {}), kernels, view_of
            )
        )
        return ValueRef(name)

    def nodes_spec(self, ref: ValueRef) -> TensorSpec:
        return self._node(ref.node).outputs[ref.index]

    def graph(self, *outputs: ValueRef, dynamic: bool = False) -> Graph:
        return Graph("g", list(self.nodes), tuple(outputs), dynamic)


def nbytes(shape: Sequence[int], dtype: str = "float16") -> int:
    return math.prod(shape) * itemsize(dtype)
