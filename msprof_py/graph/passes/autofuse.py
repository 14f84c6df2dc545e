"""AutoFuse: groups of elementwise vector ops as one vector kernel, as GE's Autofusion does.

An elementwise op (:data:`ELEMENTWISE`: arithmetic, activations and their gradients, casts,
comparisons, ``where``, copies) that no earlier pass claimed joins the group of its readers
when every reader is such an op and its own value is not returned by the graph: its
intermediate then lives only inside the group (UB). Groups are grown in graph order and kept
only when they stay acyclic with the other kernels; a group of one node is left as it is.
The fused kernel (op type ``AutoFuse``, named ``autofuse_<first>_<last>``) does the members'
vector work once and moves only the group's external inputs and outputs.
"""

from __future__ import annotations

from msprof_py.device.records import TaskType
from msprof_py.graph.ir import Node
from msprof_py.graph.passes.plan import Plan

AUTOFUSE = "AutoFuse"

#: ATen targets AutoFuse treats as elementwise vector work
ELEMENTWISE = frozenset(
    {
        "add", "sub", "mul", "div", "neg", "abs", "exp", "exp2", "log", "log1p", "sqrt",
        "rsqrt", "reciprocal", "pow", "square", "sign", "floor", "ceil", "round", "trunc",
        "relu", "sigmoid", "tanh", "gelu", "silu", "erf", "elu", "leaky_relu", "hardtanh",
        "hardswish", "hardsigmoid", "softplus", "mish", "clamp", "clamp_min", "clamp_max",
        "maximum", "minimum", "where", "masked_fill", "_to_copy", "clone", "copy",
        "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
        "tanh_backward", "native_dropout_backward", "eq", "ne", "lt", "le", "gt", "ge",
        "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or",
        "bitwise_not", "lerp", "addcmul", "addcdiv", "fill",
    }
)  # fmt: skip


def _eligible(plan: Plan, node: Node) -> bool:
    return (
        node.target in ELEMENTWISE
        and plan.free(node)
        and bool(node.kernels)
        and all(k.cost.task_type is TaskType.AI_VECTOR_CORE for k in node.kernels)
    )


def autofuse(plan: Plan) -> None:
    """Group the remaining elementwise ops (module docstring)."""
    ops = [n for n in plan.live_ops() if _eligible(plan, n)]
    group_of: dict[str, list[str]] = {n.name: [n.name] for n in ops}
    for node in reversed(ops):  # readers first: a producer joins its readers' group
        readers = plan.users(node)
        if not readers or any(r.name not in group_of for r in readers):
            continue
        if any(plan.is_graph_output(node.out(i)) for i in range(len(node.outputs))):
            continue
        merged: list[str] = list(group_of[node.name])
        for r in readers:
            for m in group_of[r.name]:
                if m not in merged:
                    merged.append(m)
        if plan.creates_cycle(merged):
            continue
        for m in merged:
            group_of[m] = merged
    seen: set[int] = set()
    for node in ops:
        group = group_of[node.name]
        if id(group) in seen or len(group) < 2:
            continue
        seen.add(id(group))
        ordered = sorted(group, key=plan.order.__getitem__)
        name = f"autofuse_{ordered[0]}_{ordered[-1]}"
        plan.try_fuse(AUTOFUSE, AUTOFUSE, ordered, name=name)
