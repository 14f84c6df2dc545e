"""Cleanup passes (always run, also without fusion): CSE, constant folding, dead code.

* ``CSEPass``: two op nodes with the same target, the same inputs (through views and earlier
  aliases), the same attributes and the same output tensors compute the same values: the
  later one launches nothing and its readers read the first. Random ops (dropout, rand ...)
  and in-place ops (``copy_``, ``add_`` ...) are never merged.
* ``ConstantFoldingPass``: an op node whose tensor inputs are all known at compile time
  (CONST inputs or folded nodes, transitively; an op with no tensor input such as ``full``
  counts) is computed at compile time and launches nothing; its values are constants.
* ``DeadCodeEliminationPass``: an op node none of whose outputs reaches a graph output or an
  in-place op launches nothing.
"""

from __future__ import annotations

from msprof_py.graph.ir import PassRecord, ValueRef
from msprof_py.graph.passes.plan import RANDOM_TARGETS, Plan, attrs_key, is_mutating, is_view

CSE = "CSEPass"
CONSTANT_FOLDING = "ConstantFoldingPass"
DCE = "DeadCodeEliminationPass"


def _pure(target: str) -> bool:
    return target not in RANDOM_TARGETS and not is_mutating(target)


def cse(plan: Plan) -> None:
    """Merge duplicate op nodes (see the module docstring)."""
    seen: dict[tuple[object, ...], str] = {}
    for node in plan.graph.nodes:
        if not plan.live(node) or not _pure(node.target):
            continue
        key = (
            node.target,
            tuple(plan.resolve(r) for r in node.inputs),
            attrs_key(node.attrs),
            node.outputs,
        )
        first = seen.get(key)
        if first is None:
            seen[key] = node.name
            continue
        for i in range(len(node.outputs)):
            plan.alias[node.out(i)] = ValueRef(first, i)
        plan.removed[node.name] = f"cse: same as {first}"
        plan.records.append(PassRecord(CSE, (first, node.name), True))


def fold_constants(plan: Plan) -> None:
    """Mark op nodes computable at compile time (see the module docstring)."""
    for node in plan.graph.nodes:
        if not plan.live(node) or not _pure(node.target):
            continue
        if all(plan.is_const(r) for r in node.inputs):
            plan.folded.add(node.name)
            plan.removed[node.name] = "constant-folded"
            if node.kernels:
                plan.records.append(PassRecord(CONSTANT_FOLDING, (node.name,), True))


def eliminate_dead(plan: Plan) -> None:
    """Remove op nodes whose values reach no graph output and no in-place op."""
    graph = plan.graph
    needed: set[str] = set()

    def need(ref: ValueRef) -> None:
        while True:
            ref = plan.alias.get(ref, ref)
            needed.add(ref.node)
            node = graph.node(ref.node)
            if node.view_of is None:
                return
            ref = node.view_of

    for ref in graph.outputs:
        need(ref)
    for node in reversed(graph.nodes):
        if not node.is_op or node.name in plan.removed:
            continue
        if is_mutating(node.target):
            needed.add(node.name)
        if node.name in needed:
            for ref in node.inputs:
                need(ref)
    for node in graph.nodes:
        if node.is_op and node.name not in needed and node.name not in plan.removed:
            plan.removed[node.name] = "dead"
            if node.kernels and not is_view(node):
                plan.records.append(PassRecord(DCE, (node.name,), True))


def cleanup(plan: Plan) -> None:
    """CSE, constant folding, then dead-code elimination, as GE's first stage runs them."""
    cse(plan)
    fold_constants(plan)
    eliminate_dead(plan)
    plan.refresh()
