"""The training backward counterpart of ZBNupdateReluV2Conv2DBNreducePass: ReLU's gradient
fused into the batch-norm backward.

In a conv / BN / ReLU training step the backward graph runs ``threshold_backward`` (ReLU's
gradient, ``ReluGrad`` / ``ReluGradV2`` on Ascend) and hands its result straight to
``native_batch_norm_backward`` (``BNTrainingUpdateGrad`` then ``BNTrainingReduceGrad``).
``BNTrainingUpdateGradReluGradV2FusionPass`` makes them one vector kernel,
``BNTrainingUpdateGradReluGradV2``: the masked gradient is computed in UB and never goes
through HBM, so the fused kernel saves the ReluGrad launch and the gradient's write and read.
As in the forward pass, the simulated BN backward's two steps are one node and so land in the
one fused kernel (cost: :func:`msprof_py.graph.fused_cost.fused_cost`).

The pass name is msprof-py's, built from the CANN kernel names: the GE fusion reference this
project follows names no backward BN + ReluGrad pass.

Preconditions (a miss is recorded with the reason when a BN backward is fed by a
``threshold_backward`` but one fails): the BN backward is in training mode (``train=True``),
the threshold is 0 (a ReLU's gradient), the ReluGrad output is read only by the BN backward
and not returned by the graph, and the shapes chain (the ReluGrad output, the BN's incoming
gradient and the BN's input activation have one shape).
"""

from __future__ import annotations

from msprof_py.graph.ir import Node
from msprof_py.graph.passes.plan import Plan

BN_GRAD_RELU_GRAD = "BNTrainingUpdateGradReluGradV2FusionPass"
OP_TYPE = "BNTrainingUpdateGradReluGradV2"

_BN_BACKWARD = frozenset({"native_batch_norm_backward"})
_RELU_GRAD = "threshold_backward"


def _why_not(plan: Plan, relu_grad: Node, bn: Node) -> str:
    """Why the pair cannot fuse ("" when it can, :meth:`Plan.blocker` aside)."""
    if bn.attrs.get("train") is False:
        return f"{bn.name} is an eval-mode BN backward (train=False)"
    threshold = relu_grad.attrs.get("threshold", 0)
    if threshold != 0:
        return f"{relu_grad.name} has threshold {threshold}: not a ReLU gradient"
    if plan.is_graph_output(relu_grad.out(0)):
        return f"{relu_grad.name}'s output is returned by the graph"
    others = [u for u in plan.ref_users(relu_grad.out(0)) if u.name != bn.name]
    if others:
        return f"{relu_grad.name}'s output is also read by {others[0].name}"
    grad = plan.graph.spec(relu_grad.out(0)).shape
    incoming = plan.graph.spec(bn.inputs[0]).shape
    activation = plan.graph.spec(bn.inputs[1]).shape if len(bn.inputs) > 1 else incoming
    if not grad == incoming == activation:
        return (
            f"shapes do not chain: {relu_grad.name} gives {list(grad)}, {bn.name} takes "
            f"{list(incoming)} for an activation of {list(activation)}"
        )
    return ""


def bn_grad_relu_grad(plan: Plan) -> None:
    """BNTrainingUpdateGradReluGradV2FusionPass over every BN backward fed by a ReluGrad."""
    for bn in plan.live_ops():
        if bn.target not in _BN_BACKWARD or not plan.free(bn):
            continue
        relu_grad = plan.arg(bn, 0)
        if relu_grad is None or relu_grad.target != _RELU_GRAD:
            continue
        members = (relu_grad.name, bn.name)
        why = _why_not(plan, relu_grad, bn)
        if why:
            plan.miss(BN_GRAD_RELU_GRAD, members, why)
            continue
        plan.try_fuse(BN_GRAD_RELU_GRAD, OP_TYPE, members, name=bn.name)
