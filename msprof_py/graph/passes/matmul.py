"""MatMulEpilogueFusionPass: a matmul with its bias add and activation in one cube kernel.

``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` -> optionally ``add(bias)`` (a tensor of the
output's last-axis size, broadcast over rows) -> optionally an activation (``relu``,
``gelu``, ``silu``, ``sigmoid``, ``tanh`` ..., or a decomposed GELU chain) becomes one
``MatMul`` / ``BatchMatMul`` kernel: the vector work runs on the cube's output in the
FixPipe / vector units, with no HBM round trip for the pre-activation. Each link must be the
previous node's only reader (a value the graph returns, such as a pre-activation saved for
the backward, is written out as an extra output).
"""

from __future__ import annotations

from msprof_py.graph.ir import Node
from msprof_py.graph.passes.chains import match_gelu
from msprof_py.graph.passes.patterns import ACTIVATIONS, MATMUL_TARGETS, leaks
from msprof_py.graph.passes.plan import Plan

MATMUL_EPILOGUE = "MatMulEpilogueFusionPass"


def _bias_add(plan: Plan, mm: Node, add: Node) -> bool:
    if add.target != "add" or len(add.inputs) != 2 or not plan.free(add):
        return False
    other = [r for r in add.inputs if plan.resolve(r) != mm.out(0)]
    if len(other) != 1:
        return False
    n = mm.outputs[0].shape[-1] if mm.outputs and mm.outputs[0].shape else 0
    return plan.graph.spec(other[0]).numel == n and n > 0


def _gelu_after(plan: Plan, node: Node) -> list[str] | None:
    """The members of a decomposed GELU reading ``node``'s output."""
    for user in plan.users(node):
        for core in (u for u in plan.users(user) if u.target in ("tanh", "erf")):
            chain = match_gelu(plan, core)
            if chain is not None and chain.x == node.out(0):
                return list(chain.members)
        for mid in plan.users(user):
            for core in (u for u in plan.users(mid) if u.target == "tanh"):
                chain = match_gelu(plan, core)
                if chain is not None and chain.x == node.out(0):
                    return list(chain.members)
    return None


def matmul_epilogue(plan: Plan) -> None:
    """Fuse every matmul's bias add and activation (module docstring)."""
    for mm in plan.live_ops():
        if mm.target not in MATMUL_TARGETS or not plan.free(mm) or len(mm.kernels) != 1:
            continue
        members = [mm.name]
        cur = mm
        readers = plan.users(mm)
        nxt = readers[0] if len(readers) == 1 else None
        if nxt is not None and _bias_add(plan, mm, nxt):
            members.append(nxt.name)
            cur = nxt
            readers = plan.users(cur)
            nxt = readers[0] if len(readers) == 1 else None
        if nxt is not None and nxt.target in ACTIVATIONS and plan.free(nxt):
            members.append(nxt.name)
        else:
            chain = _gelu_after(plan, cur)
            if chain is not None and not leaks(plan, [*members, *chain], (chain[-1],)):
                members.extend(chain)
        if len(members) == 1:
            acts = [r for r in readers if r.target in ACTIVATIONS or r.target == "add"]
            if len(readers) > 1 and acts:
                plan.miss(
                    MATMUL_EPILOGUE,
                    (cur.name, *(r.name for r in readers)),
                    f"{cur.name}'s output is read by {len(readers)} ops, not only the epilogue",
                )
            continue
        plan.try_fuse(MATMUL_EPILOGUE, mm.kernels[0].op_type, members, name=mm.name)
