"""``AssignRemovePass``: the producer of a buffer's new value writes the buffer in place.

Functionalization turns every in-place buffer update of a training step (a BatchNorm's
running mean and variance, ``num_batches_tracked += 1``) into an out-of-place op followed by
an epilogue ``copy_(buffer, new_value)``. Run as written, each copy is one extra
``MemcpyAsync`` kernel per buffer and the new value takes workspace bytes. GE removes the
assignment instead: the op computing the new value writes straight to the variable's address
(``BNTrainingUpdate``'s running-stat outputs are ref outputs aliasing its inputs; an ``Add``
into the variable is an ``AssignAdd``), so no copy kernel runs.

A ``copy_(dst, src)`` is removed when

* ``dst`` is a parameter or buffer (a PARAM input, read through no view) and ``copy_`` is the
  only op writing it;
* ``src`` is the output of a computing op ``P`` (not a view, not a graph input) with ``dst``'s
  shape and dtype;
* no op other than ``P`` reads ``dst``'s old value (so ``P`` may overwrite it while it runs;
  GE's ref outputs alias the ref inputs of the same op).

Then ``P``'s kernel writes ``dst`` instead of ``src`` (its readers read ``dst``; ``src`` needs
no workspace) and the copy launches nothing. When the graph also returns ``src`` (the forward
graph of a training step hands the new running statistics to the backward, whose BN-gradient
op takes them as arguments), the kernel writes both: ``dst`` in place and ``src`` as an extra
output, still without a copy kernel. Any other ``copy_`` into a PARAM is a miss with
the reason. The pass runs only with fusion (max-autotune); reduce-overhead capture keeps the
copies, as it replays the functionalized graph's kernels.
"""

from __future__ import annotations

from msprof_py.graph.ir import Node, NodeKind, PassRecord, ValueRef
from msprof_py.graph.passes.plan import Plan, is_view

ASSIGN_REMOVE = "AssignRemovePass"


def _why_not(plan: Plan, copy: Node, writers: dict[ValueRef, int]) -> str:
    graph = plan.graph
    dst_ref, src_ref = copy.inputs[0], copy.inputs[1]
    dst_node = graph.node(dst_ref.node)
    src = plan.resolve(src_ref)
    producer = graph.node(src.node)
    if writers[dst_ref] > 1:
        return f"{dst_ref.node} is written by {writers[dst_ref]} ops"
    if not producer.is_op or is_view(graph.node(src_ref.node)) or not plan.live(producer):
        return f"the new value of {dst_ref.node} is not computed by a kernel of the graph"
    if graph.spec(src) != graph.spec(dst_ref) or dst_node.outputs[0] != graph.spec(dst_ref):
        return f"{src.node} does not produce {dst_ref.node}'s shape and dtype"
    others = [u.name for u in plan.ref_users(dst_ref) if u.name not in (producer.name, copy.name)]
    if others:
        return f"{others[0]} reads {dst_ref.node}'s old value besides {producer.name}"
    return ""


def assign_remove(plan: Plan) -> None:
    """Remove the epilogue copies into parameters and buffers (see the module docstring)."""
    graph = plan.graph
    copies = [
        n
        for n in plan.live_ops()
        if n.target == "copy_"
        and len(n.inputs) >= 2
        and graph.node(n.inputs[0].node).kind is NodeKind.PARAM
    ]
    writers: dict[ValueRef, int] = {}
    for n in copies:
        writers[n.inputs[0]] = writers.get(n.inputs[0], 0) + 1
    changed = False
    for copy in copies:
        why = _why_not(plan, copy, writers)
        src = plan.resolve(copy.inputs[1])
        if why:
            plan.miss(ASSIGN_REMOVE, (src.node, copy.name), why)
            continue
        dst = copy.inputs[0]
        plan.inplace[src] = dst
        plan.alias[copy.out(0)] = dst
        plan.removed[copy.name] = f"assign removed: {src.node} writes {dst.node} in place"
        plan.records.append(PassRecord(ASSIGN_REMOVE, (src.node, copy.name), True))
        changed = True
    if changed:
        plan.refresh()
