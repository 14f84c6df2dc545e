"""The fusion_attention rule: attention written as separate kernels, re-costed as FlashAttention.

The attentions come from the dataflow (:mod:`msprof_py.analyzers.attention`), their re-cost
from :func:`msprof_py.analyzers.recost.attention`. The gain is the step time the recorded
launches and syncs lose when replayed (:mod:`msprof_py.analyzers.replay`) with each
attention's forward as one ``FlashAttentionScore`` kernel and its backward as one
``FlashAttentionScoreGrad`` (the first cube kernel of each direction at the fused duration,
the direction's other kernels and copies and their launches gone): the device time, the host
launches and the launch-pipeline slots it saves, where the step waits for them. The change is
kept for the joint estimate. Without host launch records to replay, the device saving (the
chain's kernels against the fused ones) and the host saving (the dispatch of every op but
one per direction) are combined as the fused-optimizer rule combines them: added where host
and device work run one after the other, the larger where they overlap.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from msprof_py.analyzers import attention, recost, replay
from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.findings import Finding, RuleSpec
from msprof_py.analyzers.rules_compute import (
    RuleContext,
    _serial_gain,
    chains_change,
    match_groups,
    match_values,
    need_host_ops,
    need_spec,
    need_tasks,
    us,
)

HALF = ("float16", "bfloat16")
A2_SOCS = ("Ascend910B", "Ascend910_93")


def fusion_attention(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Attentions (matmul, softmax, matmul on the dataflow) that one fused kernel would run."""
    data = ctx.data
    need_tasks(data)
    need_host_ops(data)
    need_spec(data)
    found = attention.find(data)
    costs = recost.attention(data)
    n = data.n_steps
    sel = found.matches.merge(costs, on="match")
    per_step = len(sel) / n
    device_saved = float(sel["saved_ns"].sum()) / n if len(sel) else 0.0
    if per_step < spec.thresholds.get("min_per_step", 1) or device_saved <= 0:
        return spec.ok(data.rank, {"attentions_per_step": per_step})
    host_saved = float(sel["host_saved_ns"].sum()) / n
    serial_ns, overlap = _serial_gain(data, host_saved, device_saved)
    change = attention_change(data, found, sel)
    replayed = None if change is None else replay.record(data, spec.name, *change)
    gain_ns = serial_ns if replayed is None else replayed
    first = {col: (col, "first") for col in ("batch", "sq", "skv", "d", "dv")}
    groups = match_groups(sel, ["form", "ops", "module", "dtype"], **first)
    top = groups.iloc[0]
    shape = f"{top['batch']} x [{top['sq']}, {top['skv']}] scores, head dim {top['d']}"
    detail = f"{shape}, {top['dtype']}; x{top['count'] / n:.0f} per step"
    values = match_values(data, sel, per_step, detail, top)
    values["fix"] = _fix(
        data.spec.soc_version, str(top["dtype"]), bool(sel["dropout"].any()), top["form"]
    )
    evidence = {
        "fused_us_per_step": us(sel["fused_ns"].sum() / n),
        "device_saved_us_per_step": us(device_saved),
        "host_dispatch_saved_us_per_step": us(host_saved),
        "host_device_overlap": overlap,
        "serial_gain_us_per_step": us(serial_ns),
        "replayed": replayed is not None,
        "backward_found": bool(sel["has_backward"].all()),
        "apply": {"attention": "npu_fusion_attention"},
        "apis": [
            {
                "api": "torch_npu.npu_fusion_attention",
                "kwargs": {
                    "input_layout": "BSND",
                    "scale": 1 / math.sqrt(max(1, int(top["d"]))),
                    "keep_prob": 1.0,
                },
            }
        ],
        "ops": [
            {
                "form": r.form,
                "ops": r.ops,
                "module": r.module,
                "dtype": r.dtype,
                "batch_heads": r.batch,
                "sq": r.sq,
                "skv": r.skv,
                "head_dim": r.d,
                "per_step": r.count / n,
                "device_us_per_step": us(r.device_ns / n),
                "fused_us_per_step": us(r.fused_ns / n),
                "share": data.share(r.device_ns),
            }
            for r in groups.head(5).itertuples()
        ],
    }
    return spec.fire(values, values["share"], us(gain_ns), data.rank, evidence)


def attention_change(
    data: RankData, found: attention.Attention, sel: pd.DataFrame
) -> tuple[pd.Series, pd.Series] | None:
    """The replay's change if each attention of ``sel`` (matches with their fused forward
    and backward durations) ran as npu_fusion_attention: each direction of each attention is
    a chain (:func:`msprof_py.analyzers.rules_compute.chains_change`) fused to one kernel
    (a dropout's mask generation folded into it)."""
    m = found.members
    m = m[m["match"].isin(sel["match"])]
    back = (m["phase"] == "backward").to_numpy()
    ops = pd.DataFrame(
        {"match": m["match"].to_numpy(np.int64) * 2 + back, "event_id": m["event_id"].to_numpy()}
    )
    c = sel.set_index("match")
    fused = pd.concat(
        [
            pd.Series(c["fused_forward_ns"].to_numpy(float), index=c.index.to_numpy() * 2),
            pd.Series(c["fused_backward_ns"].to_numpy(float), index=c.index.to_numpy() * 2 + 1),
        ]
    )
    return chains_change(data, ops, fused)


def _fix(soc: str, dtype: str, dropout: bool, form: str) -> str:
    """The advice text: npu_fusion_attention, and SDPA where it runs as FlashAttention."""
    keep = ", keep_prob=1 - p" if dropout else ""
    if form == "sdpa math":
        return (
            f"F.scaled_dot_product_attention runs its math path here ({dtype}): it runs as one "
            "FlashAttentionScore kernel only for float16/bfloat16 on Atlas A2/A3 (autocast). "
            'Or call torch_npu.npu_fusion_attention(q, k, v, head_num, "BNSD", '
            f"atten_mask=mask, scale=1/sqrt(head_dim){keep})[0], which fuses it in any dtype."
        )
    text = (
        "Call torch_npu.npu_fusion_attention(q, k, v, head_num, input_layout, "
        f"atten_mask=mask, scale=1/sqrt(head_dim){keep})[0] instead: one FlashAttentionScore "
        "kernel (FlashAttentionScoreGrad in the backward), the scores never written to HBM. "
        'Pass q, k, v as they come out of the projection ("BSH" / "BSND", no transpose '
        "copies); atten_mask is boolean, True = masked; a causal mask runs faster with "
        "sparse_mode=2 (masked blocks skipped)."
    )
    if dtype in HALF and soc.startswith(A2_SOCS):
        return text + (
            f" F.scaled_dot_product_attention does the same here ({dtype}: FlashAttentionScore)."
        )
    return text + (
        f" F.scaled_dot_product_attention would not help in {dtype}: on this device it runs "
        "as FlashAttentionScore only for float16/bfloat16 on Atlas A2/A3, else the math path."
    )
