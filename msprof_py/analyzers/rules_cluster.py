"""Rules about communication and the cluster: exposed collectives, the slow rank."""

from __future__ import annotations

from msprof_py.analyzers import communication
from msprof_py.analyzers.findings import Finding, RuleSpec, Skip
from msprof_py.analyzers.rules_compute import RuleContext, need_tasks, us


def exposed_communication(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Collectives not overlapped with compute."""
    data = ctx.data
    need_tasks(data)
    s = communication.summary(data)
    if s["collectives"] == 0:
        raise Skip("no collective tasks recorded (a single-device run)")
    n = data.n_steps
    values = {
        "comm_us": us(s["communication_ns"] / n),
        "comm_share": s["communication_share"],
        "time_us": us(s["not_overlapped_ns"] / n),
        "share": s["not_overlapped_share"],
    }
    if s["not_overlapped_share"] < spec.thresholds["min_share"]:
        return spec.ok(data.rank, values)
    table = communication.collectives(data)
    top = table.iloc[0]
    values["top"] = (
        f"{top['collective']} of {top['bytes'] / 1024**2:.2f} MiB ({top['algorithm']}, "
        f"{us(top['mean_ns']):.1f} us, bus {top['busbw_gbps']:.1f} GB/s)"
    )
    evidence = {"collectives": table.drop(columns="rank").head(5).to_dict("records")}
    return spec.fire(values, values["share"], values["time_us"], data.rank, evidence)


def slow_rank(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """A rank slower than the others (they wait for it in the collectives)."""
    if len(ctx.per_rank) < 2:
        raise Skip("one rank only (a cluster of two or more ranks is needed)")
    table = communication.ranks(ctx.per_rank)
    slow = communication.slow_rank(table, ctx.per_rank)
    assert slow is not None
    if slow["deviation"] < spec.thresholds["min_deviation"]:
        return spec.ok(None, {"ranks": table.to_dict("records")})
    excess = slow["excess_by_cause_ns"]
    detail = ", ".join(f"{k} {us(v):+.1f} us" for k, v in excess.items())
    values = {
        "slow_rank": slow["slow_rank"],
        "slow_us": us(slow["slow_ns"]),
        "mean_us": us(slow["mean_ns"]),
        "deviation": slow["deviation"],
        "others_wait_us": us(slow["others_wait_ns"]),
        "cause": slow["cause"],
        "detail": f"per step vs the other ranks: {detail}",
    }
    named = slow.get("idle_cause")
    if named is not None:  # the host op or sync that keeps the device idle
        values["cause"] = f"idle - {named['text']}"
    share = slow["excess_ns"] / slow["mean_ns"] if slow["mean_ns"] else 0.0
    evidence = {"ranks": table.to_dict("records"), "idle_cause": named}
    return spec.fire(values, share, us(slow["excess_ns"]), slow["slow_rank"], evidence)
