"""Small matching helpers the fusion passes share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from msprof_py.graph.ir import Node
from msprof_py.graph.passes.plan import Plan

#: elementwise activations a cube kernel's epilogue (or a vector kernel) can apply
ACTIVATIONS = frozenset(
    {"relu", "gelu", "silu", "sigmoid", "tanh", "leaky_relu", "hardswish", "hardsigmoid", "elu"}
)
#: the softmax ATen emits as one op
SOFTMAX_TARGETS = frozenset({"_softmax", "_safe_softmax", "softmax"})
#: matmul targets (cube kernels)
MATMUL_TARGETS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul"})


def leaks(plan: Plan, members: Sequence[str], sinks: Iterable[str] = ()) -> str:
    """The first member (other than ``sinks``) an op outside ``members`` reads, as a miss
    reason; "" when every intermediate is read only inside (graph outputs are allowed: the
    fused kernel writes them out as extra outputs)."""
    inside = set(members)
    ends = set(sinks)
    for name in members:
        if name in ends:
            continue
        outer = plan.outer_readers(plan.graph.node(name), inside)
        if outer:
            return f"{name} is also read by {outer[0].name}, outside the pattern"
    return ""


def scalar_operand(node: Node) -> bool:
    """A binary op applied to one tensor and a scalar (``mul(x, 0.5)``, ``add(x, 1e-5)``)."""
    return len(node.inputs) == 1


def reduces_last_dim(node: Node) -> bool:
    """A reduction (``mean``, ``sum``, ``amax``) over the last axis only, keeping dims."""
    dims = node.attrs.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    if not node.outputs:
        return False
    rank = len(node.outputs[0].shape)
    if dims is None or len(dims) != 1:
        return False
    return dims[0] in (-1, rank - 1)


def same_input(plan: Plan, a: Node, b: Node, ia: int = 0, ib: int = 0) -> bool:
    """``a``'s input ``ia`` and ``b``'s input ``ib`` are the same value (through views)."""
    if ia >= len(a.inputs) or ib >= len(b.inputs):
        return False
    return plan.resolve(a.inputs[ia]) == plan.resolve(b.inputs[ib])


def other_input(plan: Plan, node: Node, producer: Node) -> Node | None:
    """The producer of ``node``'s tensor input that is not ``producer`` (binary ops)."""
    for i in range(len(node.inputs)):
        p = plan.arg(node, i)
        if p is not None and p.name != producer.name:
            return p
    return None


def user_with(plan: Plan, node: Node, targets: Iterable[str]) -> Node | None:
    """The first free reader of ``node`` whose target is in ``targets``."""
    wanted = set(targets)
    for user in plan.users(node):
        if user.target in wanted and plan.free(user):
            return user
    return None
