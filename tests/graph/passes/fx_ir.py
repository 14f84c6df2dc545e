"""A minimal FX -> IR converter for the pass tests only (the real importer is the backend's).

Shapes and dtypes come from the traced nodes' fake values; views launch nothing; matmuls and
convolutions are costed on the cube, every other op as one vector kernel.
"""

from __future__ import annotations

import math
import operator

import torch
from torch._dynamo.backends.common import aot_autograd

from msprof_py.device import costmodel
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Graph, KernelSpec, Node, NodeKind, TensorSpec, ValueRef

VIEWS = {
    "view", "_unsafe_view", "t", "transpose", "permute", "expand", "detach", "split",
    "unsqueeze", "squeeze", "slice", "select", "alias", "reshape",
}  # fmt: skip
SPEC = DeviceSpec.load("ascend910b")


def _specs(val) -> tuple[TensorSpec, ...]:
    vals = val if isinstance(val, (list, tuple)) else [val]
    return tuple(
        TensorSpec(tuple(int(s) for s in v.shape), str(v.dtype).removeprefix("torch."))
        for v in vals
        if isinstance(v, torch.Tensor)
    )


def _cost(target: str, ins: list[TensorSpec], outs: tuple[TensorSpec, ...]):
    nbytes = sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
    if target in ("mm", "addmm", "bmm", "convolution") and outs:
        o = outs[0]
        k = ins[-1].shape[-2] if target != "convolution" else math.prod(ins[1].shape[1:])
        return costmodel.matmul_cost(SPEC, max(o.numel // o.shape[-1], 1), o.shape[-1], k)
    return costmodel.vector_cost(
        SPEC, elements=max(outs[0].numel if outs else 1, 1), dtype="float32", bytes_moved=nbytes
    )


def _literal(a: object) -> bool:
    if isinstance(a, list):
        return all(isinstance(x, (int, float)) for x in a)
    return isinstance(a, (int, float, bool, str))


def to_ir(gm: torch.fx.GraphModule, name: str) -> Graph:
    refs: dict[str, ValueRef] = {}
    nodes: list[Node] = []
    outputs: list[ValueRef] = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            nodes.append(Node(n.name, NodeKind.INPUT, outputs=_specs(n.meta["val"])))
            refs[n.name] = ValueRef(n.name)
        elif n.op == "call_function" and n.target is operator.getitem:
            base = refs[n.args[0].name]
            refs[n.name] = ValueRef(base.node, n.args[1])
        elif n.op == "call_function":
            target = n.target._opname if hasattr(n.target, "_opname") else str(n.target)
            ins = [refs[a.name] for a in n.args if isinstance(a, torch.fx.Node)]
            ins += [refs[a.name] for a in n.args if isinstance(a, list) for a in a
                    if isinstance(a, torch.fx.Node)]  # fmt: skip
            attrs = {f"arg{i}": a for i, a in enumerate(n.args) if _literal(a)}
            attrs.update({k: v for k, v in n.kwargs.items() if isinstance(v, (int, float, bool))})
            if target in ("mean", "sum", "amax") and "arg1" in attrs:
                attrs["dim"] = attrs["arg1"]
            if target in ("_softmax", "_safe_softmax"):
                attrs["dim"] = attrs.get("arg1", -1)
            if target == "pow":
                attrs["exponent"] = attrs.get("arg1")
            outs = _specs(n.meta.get("val"))
            view = target in VIEWS
            in_specs = [nodes_by(nodes, r) for r in ins]
            kernels = () if view else (KernelSpec(target, _cost(target, in_specs, outs)),)
            nodes.append(
                Node(
                    n.name,
                    NodeKind.OP,
                    target,
                    tuple(ins),
                    outs,
                    attrs,
                    kernels,
                    ins[0] if view else None,
                )
            )
            refs[n.name] = ValueRef(n.name)
        elif n.op == "output":
            for a in n.args[0]:
                if isinstance(a, torch.fx.Node):
                    outputs.append(refs[a.name])
    return Graph(name, nodes, tuple(dict.fromkeys(outputs)))


def nodes_by(nodes: list[Node], ref: ValueRef) -> TensorSpec:
    return next(n for n in nodes if n.name == ref.node).outputs[ref.index]


def trace(fn, *args) -> dict[str, Graph]:
    """The forward (and, when something requires grad, backward) graphs of ``fn(*args)``."""
    graphs: dict[str, Graph] = {}

    def compiler(tag: str):
        def compile_(gm, _inputs):
            graphs[tag] = to_ir(gm, tag)
            return gm.forward

        return compile_

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=compiler("fw"), bw_compiler=compiler("bw"))
    out = torch.compile(fn, backend=backend)(*args)
    if out.requires_grad:
        out.sum().backward()
    return graphs
