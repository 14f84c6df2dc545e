"""The rules engine: run every rule of ``rules/rules.yaml`` on a rank, never crash, sort.

A rule that lacks data raises :class:`Skip` and becomes ``SKIPPED: <what is missing>``; an
unexpected error in one rule also becomes a skipped finding (``internal error: ...``) so the
other rules still report.
"""

from __future__ import annotations

from collections.abc import Callable

from msprof_py.analyzers import (
    rules_attention,
    rules_cluster,
    rules_compute,
    rules_dynamic,
    rules_quant,
    rules_schedule,
)
from msprof_py.analyzers.findings import Finding, RuleSpec, Skip, rule_specs
from msprof_py.analyzers.rules_compute import RuleContext

Rule = Callable[[RuleContext, RuleSpec], Finding]

#: rule name (as in rules.yaml) -> the function that checks it
RULES: dict[str, Rule] = {
    "fusion_conv_bn_relu": rules_compute.fusion,
    "fusion_matmul_epilogue": rules_compute.fusion,
    "fusion_attention": rules_attention.fusion_attention,
    "fusion_norm_chain": rules_compute.fusion,
    "fusion_softmax_chain": rules_compute.fusion,
    "fusion_gelu_chain": rules_compute.fusion,
    "fusion_elementwise_chain": rules_compute.fusion,
    "fused_optimizer": rules_compute.fused_optimizer,
    "amp_fp32_cube": rules_compute.amp_fp32_cube,
    "amp_overhead": rules_compute.amp_overhead,
    "transdata_heavy": rules_compute.transdata_heavy,
    "aicpu_fallback": rules_compute.aicpu_fallback,
    "quantized_on_host": rules_quant.quantized_on_host,
    "host_bound_dispatch": rules_schedule.host_bound_dispatch,
    "dynamic_shapes": rules_dynamic.dynamic_shapes,
    "recompile_storm": rules_schedule.recompile_storm,
    "exposed_copies": rules_schedule.exposed_copies,
    "small_copies": rules_schedule.small_copies,
    "sync_in_loop": rules_schedule.sync_in_loop,
    "low_utilisation": rules_schedule.low_utilisation,
    "memory_near_capacity": rules_schedule.memory_near_capacity,
    "slow_dataloader": rules_schedule.slow_dataloader,
    "exposed_communication": rules_cluster.exposed_communication,
    "slow_rank": rules_cluster.slow_rank,
}


def run_rule(name: str, ctx: RuleContext) -> Finding:
    """One rule's finding (skipped, never raising)."""
    spec = rule_specs()[name]
    rank = ctx.data.rank
    try:
        return RULES[name](ctx, spec)
    except Skip as why:
        return spec.skipped(str(why), rank)
    except Exception as exc:  # one broken rule must not hide the others
        return spec.skipped(f"internal error: {type(exc).__name__}: {exc}", rank)


def run(ctx: RuleContext, only: list[str] | None = None) -> list[Finding]:
    """Every rule (or those in ``only``), fired first by priority, then ok, then skipped."""
    names = [n for n in rule_specs() if only is None or n in only]
    missing = [n for n in names if n not in RULES]
    if missing:
        raise KeyError(f"rules without a check: {', '.join(missing)}")
    findings = [run_rule(name, ctx) for name in names]
    return sorted(findings, key=lambda f: f.sort_key)
