"""SDPA nodes of a compiled graph: FlashAttentionScore hits and misses for fusion_result.json.

While tracing, an npu ``scaled_dot_product_attention`` call becomes one fused-attention node
(``_scaled_dot_product_fused_attention_overrideable``, whose eager kernel is
``FlashAttentionScore``; its gradient node's is ``FlashAttentionScoreGrad``) or keeps torch's
decomposition with the reason (see :mod:`msprof_py.adapter.sdpa_graph`; the graph carries
those misses as :attr:`~msprof_py.graph.ir.Graph.notes`). This pass launches nothing new (the
node's kernels are already the fused kernel, costed as eager mode costs it, mask read
included); it records, per SDPA call:

* ``SdpaFlashAttentionPass``: a hit per fused-attention node, its reason field listing the
  FlashAttentionScore attributes (``input_layout``, ``head_num``, ``kv_head_num``,
  ``scale_value``, ``keep_prob``, ``sparse_mode``, ``atten_mask`` or ``pse``); a miss per
  decomposed call with why (``float32 SDPA on Ascend910B2 ...``, ``unsupported mask shape``);
* ``SdpaFlashAttentionGradPass``: a hit per fused-attention gradient node.
"""

from __future__ import annotations

import math

from msprof_py.graph.ir import Node, PassRecord
from msprof_py.graph.passes.plan import Plan

SDPA_PASS = "SdpaFlashAttentionPass"
SDPA_GRAD_PASS = "SdpaFlashAttentionGradPass"
FUSED = "_scaled_dot_product_fused_attention_overrideable"
FUSED_GRAD = FUSED + "_backward"


def _number(value: object, default: float) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def flash_attributes(plan: Plan, node: Node) -> dict[str, object]:
    """FlashAttentionScore's attributes for fused-attention node ``node`` (BNSD inputs; the
    forward's q, k, v[, mask] or the gradient's dO, q, k, v[, mask])."""
    first = 1 if node.target == FUSED_GRAD else 0
    q, k = (plan.graph.spec(r) for r in node.inputs[first : first + 2])
    masked = "attn_bias" not in node.attrs  # a tensor argument is an input, not an attr
    mask = plan.graph.spec(node.inputs[first + 3]) if masked else None
    d = q.shape[-1]
    scale = _number(node.attrs.get("scale"), 1.0 / math.sqrt(d))
    causal = bool(node.attrs.get("is_causal"))
    attrs: dict[str, object] = {
        "input_layout": "BNSD",
        "head_num": q.shape[1],
        "kv_head_num": k.shape[1],
        "scale_value": round(scale, 6),
        "keep_prob": round(1.0 - _number(node.attrs.get("dropout_p"), 0.0), 6),
        "sparse_mode": 2 if causal else 0,
    }
    if causal:
        attrs["atten_mask"] = "causal (leftUpCausal)"
    elif mask is not None and mask.dtype == "bool":
        attrs["atten_mask"] = f"{list(mask.shape)} bool (True = masked out: torch's inverse)"
    elif mask is not None:
        attrs["pse"] = f"{list(mask.shape)} {mask.dtype} (additive, after the scale)"
    return attrs


def describe(attrs: dict[str, object]) -> str:
    """``FlashAttentionScore(input_layout=BNSD, head_num=2, ...)``."""
    return "FlashAttentionScore(" + ", ".join(f"{k}={v}" for k, v in attrs.items()) + ")"


def sdpa_flash_attention(plan: Plan) -> None:
    """The SDPA records (module docstring); no kernel changes."""
    for node in plan.graph.ops():
        if node.target == FUSED:
            why = describe(flash_attributes(plan, node))
            plan.records.append(PassRecord(SDPA_PASS, (node.name,), True, why))
        elif node.target == FUSED_GRAD:
            why = describe(flash_attributes(plan, node))
            plan.records.append(PassRecord(SDPA_GRAD_PASS, (node.name,), True, why))
    plan.records.extend(plan.graph.notes)
