"""GE-style graph passes: which kernels a compiled graph launches (torch-free).

:func:`run_passes` is the entry point the backend calls. The passes only plan device work
(host values are still computed node by node); every pattern a pass tried is a
:class:`~msprof_py.graph.ir.PassRecord` (hit, or miss with the reason), for the GE-like
``fusion_result.json``. They run in GE's order: cleanup, pattern fusion, AutoFuse; a node is
fused at most once (the first pass that claims it keeps it). Matching looks through views
(``view``, ``t``, ``expand``, ``permute`` ... launch nothing and do not break a chain) and
through CSE aliases.

Cleanup (always, also with ``fuse=False``; :mod:`.cleanup`):

* ``CSEPass``: same target, same inputs, same attributes -> the duplicate launches nothing,
  its readers read the first (random and in-place ops excluded).
* ``ConstantFoldingPass``: ops whose tensor inputs are all Const (transitively) are computed
  at compile time and launch nothing (:attr:`PassResult.folded`).
* ``DeadCodeEliminationPass``: ops none of whose values reaches a graph output or an
  in-place op (``copy_``, any ``foo_``) launch nothing.

Pattern fusion (``fuse=True``), in this order (after ``SdpaFlashAttentionPass`` /
``SdpaFlashAttentionGradPass`` (:mod:`.sdpa`), which record the SDPA calls traced as one
fused-attention node (hits, with the FlashAttentionScore attributes) or as torch's
decomposition (misses, with why), launching nothing new):

0. ``AssignRemovePass`` (:mod:`.inplace`): the functionalized epilogue ``copy_(buffer, new)``
   of a training step (BN running mean / variance, ``num_batches_tracked``) launches nothing;
   the op computing ``new`` (``BNTrainingUpdate``, an ``Add`` as ``AssignAdd``) writes the
   buffer in place. Needs the buffer written once, read by nobody but that op, and ``new``
   not returned.
1. ``ConvBatchnormFusionPass`` (:mod:`.conv_bn`): ``convolution`` ->
   ``_native_batch_norm_legit_no_training`` (-> ``relu``) -> one ``Conv2D`` (BN folded into
   the filter, ReLU as epilogue). Needs static shapes, a Const filter/bias and Const BN
   weight/bias/mean/var (a PARAM is a miss: "BN weight is a PARAM, not Const (training
   graph)"), the convolution read only by the BN, the BN statistics unread.
2. ``ZBNupdateReluV2Conv2DBNreducePass`` (:mod:`.conv_bn`, training): a training BN
   (``_native_batch_norm_legit_functional`` ...) read only by a ``relu``, plus the one
   ``convolution`` reading that ReLU -> one MIX kernel (``BNTrainingUpdateReluV2Conv2D``;
   without the convolution a vector ``BNTrainingUpdateReluV2``). Statistics and the ReLU
   output are written out (the backward needs them); the convolution reads its input from UB.
3. ``BNTrainingUpdateGradReluGradV2FusionPass`` (:mod:`.bn_grad`, training backward): a
   ``threshold_backward`` (ReluGrad) read only by the ``native_batch_norm_backward`` it feeds
   -> one vector ``BNTrainingUpdateGradReluGradV2``: one launch fewer, the masked gradient's
   HBM write and read gone. Needs ``train=True``, threshold 0, shapes that chain; misses are
   recorded ("threshold_backward's output is also read by ...").
4. ``FlashAttentionFusionPass`` (:mod:`.attention`): ``bmm(Q, K^T)`` -> scale / mask add /
   casts -> softmax (``_softmax``, ``_safe_softmax`` or decomposed) -> dropout / cast ->
   ``bmm(P, V)`` -> one ``FlashAttentionScore`` costed by
   :func:`msprof_py.device.attention.flash_attention_cost`. Needs an A2/A3 chip, fp16 / bf16
   (FlashAttentionScore has no fp32 kernel), a mask added as ``[Sq, Skv]`` or ``[B|1, N|1,
   Sq, Skv]`` (``atten_mask``'s shapes), a last-axis softmax; a miss lists every reason.
5. ``FlashAttentionGradFusionPass`` (:mod:`.attention`): ``bmm(dO, V^T)`` -> dropout
   backward -> ``_softmax_backward_data`` -> scale -> the dQ and dK matmuls, with the dV
   matmul -> one ``FlashAttentionScoreGrad``. Same chip and dtype preconditions (the mask
   does not appear in the backward graph, so its shape is not checked there).
6. ``LayerNormFusionPass`` (:mod:`.chains`): the decomposed mean / sub / pow / mean / add /
   rsqrt (or sqrt + div) / mul (/ mul weight / add bias) chain -> one ``LayerNorm``; skipped
   for dynamic graphs (miss recorded). ``native_layer_norm`` is already one kernel.
7. ``RMSNormFusionPass`` (:mod:`.chains`): pow / mean / add / rsqrt / mul (/ mul weight) ->
   one ``RmsNorm``.
8. ``MatMulEpilogueFusionPass`` (:mod:`.matmul`): ``mm`` / ``addmm`` / ``bmm`` ->
   bias ``add`` -> activation (relu, gelu, silu, sigmoid, tanh ... or a decomposed GELU)
   -> one ``MatMul`` / ``BatchMatMul`` with the epilogue on its output (no HBM round trip).
9. ``SoftmaxFusionPass`` (:mod:`.chains`): amax / sub / exp / sum / div -> one ``SoftmaxV2``.
10. ``GeluFusionPass`` (:mod:`.chains`): the tanh or erf form of GELU -> one ``Gelu``.

Then ``AutoFuse`` (:mod:`.autofuse`): maximal groups of the remaining elementwise vector ops
(add, mul, sub, div, relu, sigmoid, tanh, exp, neg, where, ``_to_copy`` casts, activation
gradients ...) whose intermediates are read only inside the group -> one ``AutoFuse`` vector
kernel.

A fused kernel's cost (:func:`msprof_py.graph.fused_cost.fused_cost`): one launch, the
members' cube and vector work, memory time for its external inputs and outputs only.

Known gaps: the next BN's reduce is not pulled into ZBNupdateReluV2Conv2DBNreducePass (the
simulated BN is one kernel); the BN backward + ReluGrad fusion also puts the BN backward's
two steps (and a layout TransData on the incoming gradient) into its one kernel; attention
matching expects the score matmul's batch to cover heads (``bmm``), not a 4-D ``matmul``
broadcast across heads with a different batch layout; layout copies (``clone`` of the
transposed q/k/v) stay separate kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Graph, GraphKernel, PassRecord, ValueRef
from msprof_py.graph.passes.attention import flash_attention, flash_attention_grad
from msprof_py.graph.passes.autofuse import autofuse
from msprof_py.graph.passes.bn_grad import bn_grad_relu_grad
from msprof_py.graph.passes.chains import gelu, layer_norm, rms_norm, softmax
from msprof_py.graph.passes.cleanup import cleanup
from msprof_py.graph.passes.conv_bn import bn_relu_conv, conv_batchnorm
from msprof_py.graph.passes.inplace import assign_remove
from msprof_py.graph.passes.matmul import matmul_epilogue
from msprof_py.graph.passes.plan import Plan
from msprof_py.graph.passes.sdpa import sdpa_flash_attention

#: the fusion passes in the order they run (AutoFuse last)
FUSION_PASSES: tuple[Callable[[Plan], None], ...] = (
    assign_remove,
    sdpa_flash_attention,
    conv_batchnorm,
    bn_relu_conv,
    bn_grad_relu_grad,
    flash_attention,
    flash_attention_grad,
    layer_norm,
    rms_norm,
    matmul_epilogue,
    softmax,
    gelu,
    autofuse,
)


@dataclass(slots=True)
class PassResult:
    """The kernels graph mode launches, in launch order, and what every pass tried.

    ``removed`` maps each op node that launches nothing to why ("cse: same as x", "dead",
    "constant-folded"); ``folded`` are the constant-folded nodes (their values are compile-time
    constants, like CONST inputs); ``aliases`` map a CSE duplicate's values to the original's.
    """

    kernels: list[GraphKernel]
    records: list[PassRecord] = field(default_factory=list)
    removed: dict[str, str] = field(default_factory=dict)
    folded: frozenset[str] = frozenset()
    aliases: dict[ValueRef, ValueRef] = field(default_factory=dict)


def run_passes(graph: Graph, spec: DeviceSpec, *, fuse: bool = True) -> PassResult:
    """Run the passes over ``graph`` for ``spec``'s chip; ``fuse=False`` only cleans up
    (the reduce-overhead mode captures without fusing)."""
    plan = Plan(graph, spec)
    cleanup(plan)
    if fuse:
        for run in FUSION_PASSES:
            run(plan)
    return PassResult(
        plan.kernels(),
        plan.records,
        dict(plan.removed),
        frozenset(plan.folded),
        dict(plan.alias),
    )
