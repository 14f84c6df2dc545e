"""Convolution + BatchNorm fusions: GE's ConvBatchnormFusionPass (inference) and its training
counterpart ZBNupdateReluV2Conv2DBNreducePass.

* ``ConvBatchnormFusionPass``: ``convolution`` -> ``_native_batch_norm_legit_no_training``
  (optionally -> ``relu``) becomes one ``Conv2D`` kernel. The BN is folded into the filter and
  bias at compile time (its kernel disappears), a following ReLU runs in the convolution's
  epilogue. Preconditions, as GE's: static shapes; the filter, the convolution bias and the
  BN's weight, bias, mean and variance are Const (in a training graph, or an inference graph
  whose parameters are not frozen, they are parameters and the pass records the miss); the
  convolution's output is read only by the BN and not returned; the BN's saved statistics
  are read by nobody.
* ``ZBNupdateReluV2Conv2DBNreducePass`` (training): a training BN
  (``_native_batch_norm_legit_functional``, ``native_batch_norm``,
  ``_native_batch_norm_legit``) whose normalised output is read only by a ``relu``, and,
  when the ReLU's output is read by exactly one ``convolution``, that convolution: one MIX
  kernel (BN update and ReLU on the vector cores, the convolution on the cube) that writes the
  BN statistics and the ReLU output (saved for the backward) but reads the activation from
  UB instead of HBM. Without a following convolution the BN update and the ReLU alone become
  one vector kernel (recorded with that reason). GE's pass also pulls in the next BN's
  reduce; the simulated BN is one kernel, so the next BN stays separate.
"""

from __future__ import annotations

from msprof_py.graph.ir import Node, NodeKind, PassRecord, ValueRef
from msprof_py.graph.passes.plan import Plan

CONV_BN = "ConvBatchnormFusionPass"
BN_RELU_CONV = "ZBNupdateReluV2Conv2DBNreducePass"

_BN_INFER = frozenset({"_native_batch_norm_legit_no_training"})
_BN_TRAIN = frozenset(
    {"_native_batch_norm_legit_functional", "native_batch_norm", "_native_batch_norm_legit"}
)
_BN_INPUTS = ("input", "weight", "bias", "running_mean", "running_var")


def _kind(plan: Plan, ref: ValueRef) -> str:
    if plan.is_const(ref):
        return "Const"
    kind = plan.producer(ref).kind
    return kind.value.upper() if kind is not NodeKind.OP else "computed value"


def _conv_bn_miss(plan: Plan, conv: Node, bn: Node) -> str:
    if plan.graph.dynamic:
        return "dynamic shapes: ConvBatchnormFusionPass needs static shapes"
    for i, what in ((1, "conv filter"), (2, "conv bias")):
        if i < len(conv.inputs) and not plan.is_const(conv.inputs[i]):
            return f"{what} is a {_kind(plan, conv.inputs[i])}, not Const (training graph)"
    for i in range(1, len(bn.inputs)):
        if not plan.is_const(bn.inputs[i]):
            what = f"BN {_BN_INPUTS[i] if i < len(_BN_INPUTS) else f'input {i}'}"
            return f"{what} is a {_kind(plan, bn.inputs[i])}, not Const (training graph)"
    if plan.is_graph_output(conv.out(0)):
        return f"{conv.name}'s output is returned by the graph"
    others = [u for u in plan.users(conv) if u.name != bn.name]
    if others:
        return f"{conv.name} is also read by {others[0].name}"
    for i in range(1, len(bn.outputs)):
        if plan.ref_users(bn.out(i)) or plan.is_graph_output(bn.out(i)):
            return f"{bn.name}'s saved statistics (output {i}) are read"
    return ""


def conv_batchnorm(plan: Plan) -> None:
    """ConvBatchnormFusionPass over every inference BN fed by a convolution."""
    for bn in plan.live_ops():
        if bn.target not in _BN_INFER or not plan.free(bn):
            continue
        conv = plan.arg(bn, 0)
        if conv is None or conv.target != "convolution" or not plan.free(conv):
            continue
        why = _conv_bn_miss(plan, conv, bn)
        if why:
            plan.miss(CONV_BN, (conv.name, bn.name), why)
            continue
        members = [conv.name, bn.name]
        work = list(conv.kernels)
        relu = plan.only_user(bn)
        if relu is not None and relu.target == "relu" and plan.free(relu):
            members.append(relu.name)
            work.extend(relu.kernels)
        op_type = conv.kernels[-1].op_type if conv.kernels else "Conv2D"
        plan.try_fuse(
            CONV_BN, op_type, members, name=conv.name, work=work, folded_inputs=bn.inputs[1:]
        )


def bn_relu_conv(plan: Plan) -> None:
    """ZBNupdateReluV2Conv2DBNreducePass over every training BN followed by a ReLU."""
    for bn in plan.live_ops():
        if bn.target not in _BN_TRAIN or not plan.free(bn):
            continue
        if bn.attrs.get("training") is False:
            continue
        readers = plan.ref_users(bn.out(0))
        relu = readers[0] if len(readers) == 1 else None
        if relu is None or relu.target != "relu" or not plan.free(relu):
            if any(r.target == "relu" for r in readers):
                plan.miss(
                    BN_RELU_CONV,
                    (bn.name, *(r.name for r in readers)),
                    f"{bn.name}'s output is read by {len(readers)} ops, not only the ReLU",
                )
            continue
        convs = [u for u in plan.users(relu) if u.target == "convolution"]
        members = [bn.name, relu.name]
        note = ""
        if (
            len(convs) == 1
            and plan.free(convs[0])
            and convs[0].inputs[0:1]
            and (plan.resolve(convs[0].inputs[0]) == relu.out(0))
        ):
            members.append(convs[0].name)
            op_type = "BNTrainingUpdateReluV2Conv2D"
        else:
            op_type = "BNTrainingUpdateReluV2"
            note = (
                "no single convolution reads the ReLU: BN update + ReLU only"
                if not convs or len(convs) > 1
                else f"{convs[0].name} is already fused: BN update + ReLU only"
            )
            if convs and len(convs) == 1 and plan.resolve(convs[0].inputs[0]) != relu.out(0):
                note = "the ReLU is not the convolution's input: BN update + ReLU only"
        why = plan.blocker(members)
        if why:
            plan.miss(BN_RELU_CONV, members, why)
            continue
        plan.commit(BN_RELU_CONV, op_type, members, name=bn.name)
        if note:
            hit = plan.records.pop()
            plan.records.append(PassRecord(hit.pass_name, hit.nodes, True, note))
