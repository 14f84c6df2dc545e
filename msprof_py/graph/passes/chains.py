"""Decomposed vector chains recognised as one fused kernel: LayerNorm, RMSNorm, softmax, GELU.

Each matcher returns a :class:`Chain` (the input value, the members, the sink whose output
the fused kernel produces) or None; the passes fuse what the matchers find and record
precondition misses. Matchers look through views (``view``, ``expand``, ``t`` ...).

* ``LayerNormFusionPass``: ``mean(x)`` -> ``sub(x, mean)`` -> ``pow(., 2)`` (or
  ``mul(d, d)``) -> ``mean`` -> ``add(eps)`` -> ``rsqrt`` -> ``mul(d, .)`` (or ``sqrt`` ->
  ``div(d, .)``), optionally -> ``mul(weight)`` -> ``add(bias)``: one ``LayerNorm`` kernel.
  Reductions over the last axis only; static shapes only (GE skips it for dynamic graphs and
  the miss is recorded).
* ``RMSNormFusionPass``: ``pow(x, 2)`` (or ``mul(x, x)``) -> ``mean`` -> ``add(eps)`` ->
  ``rsqrt`` -> ``mul(x, .)`` (or ``sqrt`` -> ``div(x, .)``), optionally -> ``mul(weight)``:
  one ``RmsNorm`` kernel.
* ``SoftmaxFusionPass``: ``amax(x)`` -> ``sub(x, .)`` -> ``exp`` -> ``sum`` -> ``div(exp,
  sum)`` over the last axis: one ``SoftmaxV2`` kernel.
* ``GeluFusionPass``: the tanh form ``0.5 x (1 + tanh(c (x + 0.044715 x^3)))`` and the erf
  form ``0.5 x (1 + erf(x / sqrt 2))``, as ATen decomposes them: one ``Gelu`` kernel.

Every intermediate of a chain must be read only inside it (graph outputs, e.g. values saved
for the backward, are allowed: the fused kernel writes them as extra outputs).
"""

from __future__ import annotations

from dataclasses import dataclass

from msprof_py.graph.ir import Node, ValueRef
from msprof_py.graph.passes.patterns import (
    SOFTMAX_TARGETS,
    leaks,
    reduces_last_dim,
    same_input,
    scalar_operand,
)
from msprof_py.graph.passes.plan import Plan

LAYER_NORM = "LayerNormFusionPass"
RMS_NORM = "RMSNormFusionPass"
SOFTMAX = "SoftmaxFusionPass"
GELU = "GeluFusionPass"


@dataclass(frozen=True, slots=True)
class Chain:
    """A matched chain: the value it reads, its member nodes, the node giving its result."""

    x: ValueRef
    members: tuple[str, ...]
    sink: str


def _one(plan: Plan, node: Node, target: str, *, scalar: bool | None = None) -> Node | None:
    """``node``'s only reader, if it is a free ``target`` op (with a scalar operand or not)."""
    user = plan.only_user(node)
    if user is None or user.target != target or not plan.free(user):
        return None
    if scalar is not None and scalar_operand(user) != scalar:
        return None
    return user


def _square_of(plan: Plan, node: Node) -> ValueRef | None:
    """The value ``node`` squares (``pow(v, 2)`` or ``mul(v, v)``), or None."""
    if node.target == "pow" and scalar_operand(node) and node.attrs.get("exponent", 2) in (2, 2.0):
        return plan.resolve(node.inputs[0])
    if node.target == "mul" and len(node.inputs) == 2 and same_input(plan, node, node, 0, 1):
        return plan.resolve(node.inputs[0])
    return None


def _normalise(plan: Plan, add: Node, d: ValueRef) -> list[Node] | None:
    """``add`` -> ``rsqrt`` -> ``mul(d, .)`` or ``add`` -> ``sqrt`` -> ``div(d, .)``."""
    root = plan.only_user(add)
    if root is None or not plan.free(root) or root.target not in ("rsqrt", "sqrt"):
        return None
    want = "mul" if root.target == "rsqrt" else "div"
    for user in plan.users(root):
        if user.target != want or not plan.free(user) or len(user.inputs) != 2:
            continue
        refs = [plan.resolve(r) for r in user.inputs]
        if (refs[1] == root.out(0) and refs[0] == d) or (
            want == "mul" and refs == [root.out(0), d]
        ):
            return [root, user]
    return None


def _affine(plan: Plan, node: Node, targets: tuple[str, ...]) -> list[Node]:
    """The optional ``mul(weight)`` (-> ``add(bias)``) after a normalisation."""
    found: list[Node] = []
    cur = node
    for target in targets:
        nxt = _one(plan, cur, target, scalar=False)
        if nxt is None:
            break
        found.append(nxt)
        cur = nxt
    return found


def match_layer_norm(plan: Plan, mean: Node) -> Chain | None:
    """The LayerNorm chain starting at ``mean``, or None."""
    if mean.target != "mean" or not reduces_last_dim(mean) or not plan.free(mean):
        return None
    x = plan.resolve(mean.inputs[0])
    subs = [
        u
        for u in plan.users(mean)
        if u.target == "sub"
        and plan.free(u)
        and len(u.inputs) == 2
        and [plan.resolve(r) for r in u.inputs] == [x, mean.out(0)]
    ]
    for sub in subs:
        for sq in plan.users(sub):
            if not plan.free(sq) or _square_of(plan, sq) != sub.out(0):
                continue
            var = _one(plan, sq, "mean")
            if var is None or not reduces_last_dim(var):
                continue
            add = _one(plan, var, "add", scalar=True)
            if add is None:
                continue
            for d in subs:
                tail = _normalise(plan, add, d.out(0))
                if tail is None:
                    continue
                nodes = [mean, *subs, sq, var, add, *tail]
                nodes += _affine(plan, tail[-1], ("mul", "add"))
                return Chain(x, tuple(n.name for n in nodes), nodes[-1].name)
    return None


def match_rms_norm(plan: Plan, mean: Node) -> Chain | None:
    """The RMSNorm chain around ``mean`` (the mean of squares), or None."""
    if mean.target != "mean" or not reduces_last_dim(mean) or not plan.free(mean):
        return None
    sq = plan.arg(mean, 0)
    if sq is None or not plan.free(sq):
        return None
    x = _square_of(plan, sq)
    if x is None:
        return None
    add = _one(plan, mean, "add", scalar=True)
    if add is None:
        return None
    tail = _normalise(plan, add, x)
    if tail is None:
        return None
    nodes = [sq, mean, add, *tail, *_affine(plan, tail[-1], ("mul",))]
    return Chain(x, tuple(n.name for n in nodes), nodes[-1].name)


def match_softmax(plan: Plan, node: Node) -> Chain | None:
    """A softmax: one ``_softmax`` node, or the decomposed chain starting at ``amax``."""
    if not plan.free(node):
        return None
    if node.target in SOFTMAX_TARGETS:
        return Chain(plan.resolve(node.inputs[0]), (node.name,), node.name)
    if node.target != "amax" or not reduces_last_dim(node):
        return None
    x = plan.resolve(node.inputs[0])
    sub = _one(plan, node, "sub", scalar=False)
    if sub is None or [plan.resolve(r) for r in sub.inputs] != [x, node.out(0)]:
        return None
    exp = _one(plan, sub, "exp")
    if exp is None:
        return None
    total = next((u for u in plan.users(exp) if u.target == "sum" and plan.free(u)), None)
    if total is None or not reduces_last_dim(total):
        return None
    div = _one(plan, total, "div", scalar=False)
    if div is None or [plan.resolve(r) for r in div.inputs] != [exp.out(0), total.out(0)]:
        return None
    nodes = (node.name, sub.name, exp.name, total.name, div.name)
    return Chain(x, nodes, div.name)


def _scaled(plan: Plan, node: Node | None) -> Node | None:
    """``node`` if it is a free ``mul`` by a scalar."""
    if node is None or node.target != "mul" or not scalar_operand(node) or not plan.free(node):
        return None
    return node


def match_gelu(plan: Plan, core: Node) -> Chain | None:
    """The decomposed GELU around its ``tanh`` or ``erf`` node, or None."""
    if core.target not in ("tanh", "erf") or not plan.free(core):
        return None
    inner = _scaled(plan, plan.arg(core, 0))
    if inner is None:
        return None
    front: list[Node] = [inner]
    if core.target == "erf":
        x = plan.resolve(inner.inputs[0])
    else:
        s = plan.arg(inner, 0)
        if s is None or s.target != "add" or len(s.inputs) != 2 or not plan.free(s):
            return None
        x = None
        for i, j in ((0, 1), (1, 0)):
            cube = _scaled(plan, plan.arg(s, j))
            pw = plan.arg(cube, 0) if cube is not None else None
            if (
                pw is not None
                and pw.target == "pow"
                and plan.free(pw)
                and pw.attrs.get("exponent", 3) in (3, 3.0)
                and plan.resolve(pw.inputs[0]) == plan.resolve(s.inputs[i])
            ):
                x = plan.resolve(s.inputs[i])
                front = [pw, cube, s, inner]
                break
        if x is None:
            return None
    one = _one(plan, core, "add", scalar=True)
    if one is None:
        return None
    out = _one(plan, one, "mul", scalar=False)
    if out is None:
        return None
    other = [plan.resolve(r) for r in out.inputs if plan.resolve(r) != one.out(0)]
    if len(other) != 1:
        return None
    back: list[Node] = [one, out]
    half = _scaled(plan, plan.graph.node(other[0].node))
    if half is not None and plan.resolve(half.inputs[0]) == x:
        back.insert(0, half)
    elif other[0] == x:
        tail = _scaled(plan, plan.only_user(out))
        if tail is None:
            return None
        back.append(tail)
    else:
        return None
    nodes = [*front, core, *back]
    return Chain(x, tuple(n.name for n in nodes), nodes[-1].name)


def _fuse_chains(plan: Plan, pass_name: str, op_type: str, matcher, *, static: bool) -> None:
    for node in plan.live_ops():
        chain = matcher(plan, node)
        if chain is None:
            continue
        if static and plan.graph.dynamic:
            plan.miss(pass_name, chain.members, f"dynamic shapes: {pass_name} needs static shapes")
            continue
        why = leaks(plan, chain.members, (chain.sink,))
        if why:
            plan.miss(pass_name, chain.members, why)
            continue
        plan.try_fuse(pass_name, op_type, chain.members, name=chain.sink)


def layer_norm(plan: Plan) -> None:
    """LayerNormFusionPass (module docstring)."""
    _fuse_chains(plan, LAYER_NORM, "LayerNorm", match_layer_norm, static=True)


def rms_norm(plan: Plan) -> None:
    """RMSNormFusionPass (module docstring)."""
    _fuse_chains(plan, RMS_NORM, "RmsNorm", match_rms_norm, static=False)


def _decomposed_softmax(plan: Plan, node: Node) -> Chain | None:
    return match_softmax(plan, node) if node.target == "amax" else None


def softmax(plan: Plan) -> None:
    """SoftmaxFusionPass (module docstring)."""
    _fuse_chains(plan, SOFTMAX, "SoftmaxV2", _decomposed_softmax, static=False)


def gelu(plan: Plan) -> None:
    """GeluFusionPass (module docstring)."""
    _fuse_chains(plan, GELU, "Gelu", match_gelu, static=False)
