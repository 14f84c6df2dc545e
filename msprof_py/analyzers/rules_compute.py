"""Rules about the device work itself: fusion patterns, the optimizer step, AMP, formats, AI CPU.

Each rule takes the :class:`RuleContext` and its :class:`RuleSpec` and returns a finding;
it raises :class:`Skip` naming the data it lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import (
    aicpu,
    ampplan,
    formats,
    graphs,
    optimizer,
    patterns,
    recost,
    replay,
    timeline,
)
from msprof_py.analyzers.context import CUBE_TYPES, KERNEL, RankData
from msprof_py.analyzers.findings import Finding, RuleSpec, Skip
from msprof_py.device import costmodel


@dataclass
class RuleContext:
    """What rules look at: the focus rank, every rank (cluster rules), user overrides."""

    data: RankData
    per_rank: dict[int, RankData]
    batch_size: int | None = None
    #: runs the auto batch tuner for the batch-size finding (``msprof analyze --tune-batch``;
    #: :func:`msprof_py.analyzers.batchtune.run`); None: the finding estimates and names the
    #: tuner's command
    tuner: Callable[[Any], Any] | None = None


def need_spec(data: RankData) -> None:
    """Skip unless the device spec is known."""
    if data.spec is None:
        raise Skip(data.spec_error or "device spec unknown")


def need_tasks(data: RankData) -> None:
    """Skip unless device tasks were recorded in the analysed steps."""
    if data.tasks.empty:
        raise Skip("no device tasks recorded in the analysed steps")


def need_host_ops(data: RankData) -> None:
    """Skip unless host ops, linked to their tasks, were recorded."""
    if not (data.host["kind"] == "op").any():
        raise Skip("no host ops recorded (the op sequence is needed for the dataflow)")
    if not (data.tasks["host_op_id"] >= 0).any():
        raise Skip("tasks are not linked to host ops (host_op_id is -1 everywhere)")


#: module class names a compiled model's ops run under (torch.compile's wrapper, FX graphs)
COMPILED_MODULES = ("OptimizedModule", "GraphModule")
#: the model runs in graph mode: the ops a rule found are those outside the graphs
GRAPH_NOTE = (
    " The model already runs in graph mode ({graphs} compiled graph{s}, {share:.0%} of the "
    "device time): the ops found here run outside the graphs (eager code or graph breaks), "
    "so compiling that code too (or removing the break) is what applies."
)
#: compiled with another backend: ops still run one by one
COMPILED_NOTE = (
    " The model is already compiled ({which} in its module path), but not in graph mode: its "
    'ops still run one by one; compile with backend="npu" to fuse them and launch one graph.'
)


def compiled_note(data: RankData) -> str:
    """A sentence for advice when the model is compiled (empty when it is not): in graph mode
    (the profile recorded graphs), or with another backend (compiled module paths)."""
    note = data.cache.get("compiled_note")
    if note is None:
        if graphs.compiled(data):
            split = graphs.split(data)
            n = split["graphs"]
            note = GRAPH_NOTE.format(
                graphs=n, s="s" if n != 1 else "", share=split["graph_device_share"]
            )
        else:
            modules = data.host_ops["module"].astype(object).fillna("").astype(str)
            found = [m for m in COMPILED_MODULES if modules.str.contains(m, regex=False).any()]
            note = COMPILED_NOTE.format(which=" and ".join(found)) if found else ""
        data.cache["compiled_note"] = note
    return note


def us(ns: float) -> float:
    """Nanoseconds to microseconds."""
    return float(ns) / 1e3


def match_groups(sel: pd.DataFrame, keys: list[str], **extra: tuple[str, str]) -> pd.DataFrame:
    """Matched chains grouped by ``keys`` (count, device and fused time, ``extra``
    aggregations), the most device time first."""
    return (
        sel.groupby(keys, sort=False, observed=True)
        .agg(
            count=("match", "size"),
            device_ns=("device_ns", "sum"),
            fused_ns=("fused_ns", "sum"),
            **extra,
        )
        .reset_index()
        .sort_values("device_ns", ascending=False, kind="stable")
    )


def match_values(
    data: RankData, sel: pd.DataFrame, per_step: float, detail: str, top: pd.Series
) -> dict[str, Any]:
    """The message values every fusion finding has: matches and kernels per step, their time
    and share, and an example (the top group's ops, its module and ``detail``)."""
    n = data.n_steps
    where = f" in {top['module']}" if top["module"] else ""
    time = float(sel["device_ns"].sum())
    return {
        "per_step": per_step,
        "kernels_per_step": sel["kernels"].sum() / n,
        "time_us": us(time / n),
        "share": data.share(time),
        "example": f"{top['ops']}{where} ({detail})",
    }


def fusion(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """A fusable pattern (``spec.extra['pattern']``: one name or a list) found in the steps."""
    data = ctx.data
    need_tasks(data)
    need_host_ops(data)
    need_spec(data)
    names = spec.extra["pattern"]
    names = [names] if isinstance(names, str) else list(names)
    matches, _ = patterns.find(data)
    costs = recost.fusion(data)
    sel = matches[matches["pattern"].isin(names)].merge(costs, on="match")
    n = data.n_steps
    per_step = len(sel) / n
    saved = float(sel["saved_ns"].sum()) if len(sel) else 0.0
    outcomes = graphs.pass_outcomes(data, list(spec.extra.get("graph_passes") or []))
    if per_step < spec.thresholds.get("min_per_step", 1) or saved <= 0:
        found = spec.ok(
            data.rank, {"matches_per_step": per_step, "graph_passes": outcomes["records"]}
        )
        found.message += (" " + outcomes["sentence"]) if outcomes["sentence"] else ""
        return found
    groups = match_groups(sel, ["pattern", "ops", "module"], saved_ns=("saved_ns", "sum"))
    top = groups.iloc[0]
    values = match_values(data, sel, per_step, f"x{top['count'] / n:.0f} per step", top)
    evidence = {
        "fused_us_per_step": us(sel["fused_ns"].sum() / n),
        "launches_saved_per_step": float((sel["kernels"] - 1).sum() / n),
        "host_dispatch_saved_us_per_step": us(sel["host_saved_ns"].sum() / n),
        "compiled": bool(compiled_note(data)),
        "graph_passes": outcomes["records"],
        "ops": [
            {
                "pattern": r.pattern,
                "ops": r.ops,
                "module": r.module,
                "per_step": r.count / n,
                "device_us_per_step": us(r.device_ns / n),
                "fused_us_per_step": us(r.fused_ns / n),
                "share": data.share(r.device_ns),
            }
            for r in groups.head(5).itertuples()
        ],
    }
    # the gain: the step time the replayed launches and syncs lose with each chain as one
    # kernel (kept for the joint estimate, gains.joint); the device time saved without
    # host launch records to replay
    change = fusion_change(data, sel)
    replayed = None if change is None else replay.record(data, spec.name, *change)
    evidence["device_saved_us_per_step"] = us(saved / n)
    evidence["replayed"] = replayed is not None
    if spec.extra.get("recipe") and not evidence["compiled"]:
        # the advice's change (compiling the model fuses the chains and sinks every launch
        # of the model's graphs, so its gain is this finding's together with
        # host_bound_dispatch's: the joint estimate by recipe)
        evidence["apply"] = dict(spec.extra["recipe"])
    gain = saved / n if replayed is None else replayed
    finding = spec.fire(values, values["share"], us(gain), data.rank, evidence)
    finding.message += (" " + outcomes["sentence"]) if outcomes["sentence"] else ""
    finding.advice += compiled_note(data)
    return finding


def fusion_change(data: RankData, sel: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """The replay's change if each chain of ``sel`` (pattern matches with their
    ``fused_ns``) ran as one fused kernel (:func:`chains_change`)."""
    ops = recost.fusion_members(data)
    ops = ops[ops["match"].isin(sel["match"])]
    return chains_change(data, ops, sel.set_index("match")["fused_ns"])


def chains_change(
    data: RankData, ops: pd.DataFrame, fused: pd.Series
) -> tuple[pd.Series, pd.Series] | None:
    """The replay's change (tasks removed, task durations) if each chain of host ops ran as
    one fused kernel: ``ops`` has a chain key (``match``) and the ``event_id`` of each of its
    host ops, ``fused`` the fused duration (ns) by chain key. The chain's first cube task
    (its first task where none runs on the cube) takes the fused duration, and its other
    tasks go with their launches (a fused op is one launch); None without host launch
    records (or tasks). The host time of the ops outside their launches is kept."""
    if not (data.all_host["kind"] == "launch").any():
        return None
    tasks = data.tasks
    t = tasks.loc[
        tasks["host_op_id"].isin(ops["event_id"]) & tasks["kind"].isin((KERNEL, "memcpy")),
        ["task_id", "host_op_id", "task_type"],
    ]
    t = t.merge(ops, left_on="host_op_id", right_on="event_id").sort_values("task_id")
    if t.empty:
        return None
    t["cube"] = t["task_type"].isin(CUBE_TYPES)
    # the kept task per chain: its first cube task, else its first task
    keep = t.sort_values(["cube", "task_id"], ascending=[False, True], kind="stable")
    keep = keep.drop_duplicates("match")
    durations = pd.Series(
        fused.reindex(keep["match"]).to_numpy(float), index=keep["task_id"].to_numpy()
    )
    drop = t.loc[~t["task_id"].isin(keep["task_id"]), "task_id"]
    return drop, durations


def fused_optimizer(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """An optimizer step of many small per-tensor kernels that a fused step would replace."""
    data = ctx.data
    need_tasks(data)
    need_host_ops(data)
    s = optimizer.summary(data)
    if not s["found"]:
        raise Skip("no Optimizer.step annotations recorded")
    fix = spec.extra.get("fused", {}).get(s["optimizer"])
    few = s["kernels_per_step"] < spec.thresholds["min_kernels_per_step"]
    if s["mode"] == "fused" or few or fix is None:
        return spec.ok(data.rank, {**s, "fused_variant": fix is not None})
    need_spec(data)
    n = data.n_steps
    sched = data.spec.dispatch.device_sched_ns
    params = (data.meta.get("optimizers") or {}).get(s["optimizer"], {}).get("params", 0)
    kept_kernels, kept_ops = _kept_by_fused(data, fix, int(params or 0))
    device_saved = max(0.0, s["kernels_per_step"] - kept_kernels) * sched
    ops = max(1.0, s["ops_per_step"])
    host_saved = s["host_ns_per_step"] * max(0.0, 1 - kept_ops / ops)
    gain_ns, overlap = _serial_gain(data, host_saved, device_saved)
    cls = s["optimizer"]
    kwargs = ", ".join(f"{k}={v!r}" for k, v in fix["kwargs"].items())
    if s["mode"] == "foreach":
        mode_text = (
            "foreach, as multi-tensor kernels"
            if s["multi_tensor"]
            else "foreach, whose ops ran per tensor here (no multi-tensor kernels for these "
            "tensors on this chip)"
        )
    else:
        mode_text = "per parameter" if s["mode"] == "per-parameter" else "foreach or per parameter"
    values = {
        "optimizer": cls,
        "mode_text": mode_text,
        "kernels_per_step": s["kernels_per_step"],
        "ops_per_step": s["ops_per_step"],
        "time_us": us(s["device_ns_per_step"]),
        "host_us": us(s["host_ns_per_step"]),
        "share": data.share(s["device_ns_per_step"] * n),
        "fix": (
            f"Use the fused step: torch.optim.{cls}(..., {kwargs}) (or "
            f"torch_npu.optim.{fix['npu']}(...)): one kernel and one op per step."
        ),
    }
    evidence = {
        "mode": s["mode"],
        "device_saved_us_per_step": us(device_saved),
        "host_dispatch_saved_us_per_step": us(host_saved),
        "host_device_overlap": overlap,
        "apply": {"optimizer": cls, "kwargs": fix["kwargs"]},
        "apis": [
            {"api": f"torch.optim.{cls}", "kwargs": fix["kwargs"]},
            {"api": f"torch_npu.optim.{fix['npu']}", "kwargs": {}},
        ],
    }
    share = data.share(max(s["device_ns_per_step"], s["host_ns_per_step"]) * n)
    return spec.fire(values, share, us(gain_ns), data.rank, evidence)


def _kept_by_fused(data: RankData, fix: dict[str, Any], params: int) -> tuple[int, int]:
    """Kernels and ops per step a fused step of ``params`` parameters leaves: its own one,
    and with ``step_counters`` the in-place foreach add torch's fused Adam keeps for its
    step counters: one multi-tensor kernel per chunk of counters on an A2-class chip
    (:func:`costmodel.foreach_chunks`, as the adapter launches them), one per-tensor op and
    kernel each on older chips."""
    if not fix.get("step_counters") or params == 0:
        return 1, 1
    if data.spec.a2_class:
        return 1 + len(costmodel.foreach_chunks(params, 1, True)), 2
    return 1 + params, 1 + params


def _serial_gain(data: RankData, host_saved: float, device_saved: float) -> tuple[float, float]:
    """Step time saved by removing ``host_saved`` ns of host dispatch and ``device_saved`` ns
    of device work per step, and the overlap share it is based on.

    Where host and device work run one after the other (the host dispatches, then waits for
    the device at a sync), both savings shorten the step; where they run side by side only
    the larger does. The share of the smaller busy time that overlaps the other
    (``host busy + device busy - step``, measured per step; the host is busy whenever it is
    not blocked in a sync) interpolates between the two.
    """
    n = data.n_steps
    steps = timeline.step_breakdown(data)
    step = float(steps["step_ns"].sum()) / n
    device = float(steps["device_busy_ns"].sum()) / n
    syncs = data.host[data.host["kind"] == "sync"]
    host = step - float((syncs["end_ns"] - syncs["start_ns"]).sum()) / n
    both = min(host, device)
    overlap = min(1.0, max(0.0, host + device - step) / both) if both > 0 else 1.0
    return host_saved + device_saved - overlap * min(host_saved, device_saved), overlap


def amp_fp32_cube(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """fp32 matmuls and convolutions that autocast would run in fp16/bf16, when the modelled
    step (casts and their dispatch included, :mod:`msprof_py.analyzers.ampplan`) is faster."""
    data = ctx.data
    need_tasks(data)
    need_spec(data)
    k = recost.amp(data)
    if k.empty:
        return spec.ok(data.rank, {"fp32_cube_kernels": 0})
    ratio = float(k["rate_ratio"].iloc[0])
    n = data.n_steps
    time = float(k["recorded_ns"].sum())
    share = data.share(time)
    if ratio <= 1.0 or share < spec.thresholds["min_share"]:
        return spec.ok(data.rank, {"fp32_cube_share": share})
    need_host_ops(data)
    plan = ampplan.plan(data)
    if plan is None:
        raise Skip("the float32 cube kernels are not linked to host ops")
    top = (
        k.groupby(["name", "input_shapes"], sort=False, observed=True)["recorded_ns"]
        .sum()
        .sort_values(ascending=False)
    )
    (name, shape), top_ns = top.index[0], top.iloc[0]
    kern = plan.kernels
    saved = float((kern["recorded_ns"] - kern["amp_ns"]).sum()) / n
    cube = kern[kern["role"] == "cube"]
    values = {
        "kernels_per_step": len(k) / n,
        "time_us": us(time / n),
        "share": share,
        "rate_ratio": ratio,
        "dtype": plan.dtype,
        "example": f"{name} [{shape}] ({us(top_ns / n):.1f} us per step)",
        "saved_us": us(saved),
        "casts_per_step": len(plan.casts) / n,
        "cast_us": us(plan.per_step(plan.casts, "ns")),
        "host_us": us(plan.host_delta_ns),
        "step_change_us": us(plan.step_delta_ns),
        "host_busy_us": us(plan.host_ns),
        "device_us": us(plan.device_ns),
    }
    cube_saved = plan.per_step(cube, "recorded_ns") - plan.per_step(cube, "amp_ns")
    evidence = {
        "cube_saved_us_per_step": us(cube_saved),
        "vector_saved_us_per_step": us(saved - cube_saved),
        "casts": _cast_summary(plan),
        "ops": [
            {"name": nm, "input_shapes": sh, "us_per_step": us(v / n), "share": data.share(v)}
            for (nm, sh), v in top.head(5).items()
        ],
        "apply": {"autocast": plan.dtype},
        "apis": [{"api": "torch.autocast", "args": ["npu"], "kwargs": {"dtype": plan.dtype}}],
    }
    gain = -plan.step_delta_ns
    if gain < spec.thresholds.get("min_gain_share", 0.0) * data.mean_step_ns:
        finding = spec.ok(data.rank, {**values, **evidence, "modelled_gain_us": us(gain)})
        finding.message = (
            f"Autocast ({plan.dtype}) would not pay here: it saves {values['saved_us']:.1f} us "
            f"of cube and vector time per step, but its {values['casts_per_step']:.0f} Cast "
            f"kernels take {values['cast_us']:.1f} us and {values['host_us']:.1f} us of host "
            f"dispatch (modelled step change {values['step_change_us']:+.1f} us); the "
            f"float32 cube work is {share:.1%} of the step."
        )
        return finding
    return spec.fire(values, share, us(gain), data.rank, evidence)


def _cast_summary(plan: ampplan.Plan) -> list[dict[str, object]]:
    """The largest casts AMP would add, per module and direction (us per step)."""
    c = plan.casts
    if c.empty:
        return []
    g = (
        c.groupby(["module", "op", "direction", "backward"], sort=False)["ns"]
        .agg(["size", "sum"])
        .sort_values("sum", ascending=False)
        .head(5)
    )
    return [
        {
            "module": m,
            "op": op,
            "direction": d,
            "backward": bool(b),
            "per_step": int(r["size"]) / plan.n_steps,
            "us_per_step": us(r["sum"] / plan.n_steps),
        }
        for (m, op, d, b), r in g.iterrows()
    ]


def amp_overhead(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Mixed precision in use whose casts and loss scaling cost more than the low-precision
    work saves, or a GradScaler with bfloat16 (which needs none)."""
    data = ctx.data
    need_tasks(data)
    need_spec(data)
    need_host_ops(data)
    u = ampplan.in_use(data)
    if u is None:
        return spec.ok(data.rank, {"amp_in_use": False})
    host, device, _ = ampplan.busy_per_step(data)
    n = data.n_steps
    # turning AMP off: the casts and the scaler go, the low-precision work runs in float32
    off_device = u["saved_ns"] - u["cast_ns"] - u["scaler_ns"]
    off_host = -(u["cast_host_ns"] + u["scaler_host_ns"])
    off_gain = -ampplan.step_change(host, device, off_host, off_device)
    # dropping the GradScaler alone (bfloat16 has float32's range: no loss scaling needed)
    drop = u["scaler_found"] and u["dtype"] == "bfloat16"
    drop_gain = (
        -ampplan.step_change(host, device, -u["scaler_host_ns"], -u["scaler_ns"]) if drop else 0.0
    )
    cost = u["cast_ns"] + u["scaler_ns"]
    share = data.share(cost * n)
    evidence = {
        "amp_in_use": True,
        "dtype": u["dtype"],
        "amp_off_gain_us": us(off_gain),
        "drop_grad_scaler_gain_us": us(drop_gain),
        "scaler_us_per_step": us(u["scaler_ns"]),
        "scaler_host_us_per_step": us(u["scaler_host_ns"]),
        "cast_host_us_per_step": us(u["cast_host_ns"]),
        "cube_saved_us_per_step": us(u["cube_saved_ns"]),
    }
    if share < spec.thresholds["min_share"] or max(off_gain, drop_gain) <= 0:
        return spec.ok(data.rank, evidence)
    casts = u["casts"]
    top_cast = "none"
    if len(casts):
        ops = data.host_ops.set_index("event_id")
        mods = casts["host_op_id"].map(ops["module"]).astype(object).fillna("")
        g = casts.assign(module=mods).groupby("module", sort=False)["duration_ns"]
        g = g.agg(["size", "sum"]).sort_values("sum", ascending=False)
        where = f"in {g.index[0]}" if g.index[0] else "outside modules (backward, loss)"
        top_cast = f"{g['size'].iloc[0] / n:.0f} {where}, {us(g['sum'].iloc[0] / n):.1f} us"
    scaler_text = (
        f", and the GradScaler's {u['scaler_kernels']:.0f} kernels and {u['scaler_reads']:.0f}"
        f" value reads {us(u['scaler_ns']):.1f} us of device and"
        f" {us(u['scaler_host_ns']):.1f} us of host time"
        if u["scaler_found"]
        else ""
    )
    if drop and drop_gain >= off_gain * 0.5:
        what = "A GradScaler runs with bfloat16, which needs no loss scaling;"
        fix = (
            "Drop the GradScaler (bfloat16 has float32's exponent range: call loss.backward() "
            "and optimizer.step() directly, or GradScaler(enabled=False))."
        )
        if off_gain > drop_gain:
            fix += (
                " Even without it, float32 would be about "
                f"{us(off_gain - drop_gain):.0f} us per step faster: the matmuls are too "
                "small to pay for the casts."
            )
        gain, recipe = drop_gain, {"grad_scaler": False}
    else:
        what = f"Mixed precision makes the step about {us(off_gain):.1f} us slower than float32:"
        fix = (
            "Train in float32 here, or cut the casts: keep float32-policy ops (LayerNorm, "
            "losses) from splitting low-precision chains, and make the matmuls larger (batch) "
            "so that they pay for their casts."
        )
        gain, recipe = off_gain, {"autocast": None}
    values = {
        "what": what,
        "cast_per_step": len(casts) / n,
        "dtype": u["dtype"],
        "cast_us": us(u["cast_ns"]),
        "cast_share": data.share(u["cast_ns"] * n),
        "top_cast": top_cast,
        "scaler_text": scaler_text,
        "saved_us": us(u["saved_ns"]),
        "fix": fix,
    }
    return spec.fire(values, share, us(gain), data.rank, {**evidence, "apply": recipe})


def transdata_heavy(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """TransData conversions taking a significant share of the step."""
    data = ctx.data
    need_tasks(data)
    s = formats.summary(data)
    per_step = s["transdata_count"] / data.n_steps
    if s["transdata_share"] < spec.thresholds["min_share"] or per_step < spec.thresholds.get(
        "min_per_step", 0
    ):
        return spec.ok(data.rank, s)
    td = formats.transdata(data)
    top = td.iloc[0]
    n = data.n_steps
    padding_share = (
        s["padding_bytes"] / s["private_format_bytes"] if s["private_format_bytes"] else 0.0
    )
    values = {
        "count_per_step": s["transdata_count"] / n,
        "time_us": us(s["transdata_per_step_ns"]),
        "share": s["transdata_share"],
        "top_cause": (
            f"{top['cause_op']} ({top['src_format']} -> {top['dst_format']}, "
            f"{us(top['total_ns'] / n):.1f} us per step)"
        ),
        "padding_share": padding_share,
    }
    kernels = data.kernel_columns(["op_type", "duration_ns"])
    conv_ns = float(kernels.loc[kernels["op_type"].str.startswith("Conv"), "duration_ns"].sum())
    conv_share = data.share(conv_ns)
    values["conv_share"] = conv_share
    # private formats serve the convolutions: where they are a small part of the step, the
    # conversions cost more than the formats save, so the formats go (torch_npu's switch)
    formats_off = conv_share < spec.thresholds.get("max_conv_share", 0.5)
    values["fix"] = (
        "Turn NPU-private formats off: set torch.npu.config.allow_internal_format = False "
        "(torch_npu.npu.config) before building the model; tensors stay ND and the "
        "convolutions run format-less kernels, a small part of this step."
        if formats_off
        else "Keep tensors in one format along the hot path: avoid ops that need ND between "
        "convolutions (reshape/mean on NC1HWC0 activations) and keep weights in their private "
        "format (torch_npu.npu_format_cast once at start); convolutions are most of this step, "
        "so keep allow_internal_format on."
    )
    evidence = {
        "conv_share": conv_share,
        "causes": [
            {
                "op": r.cause_op,
                "conversion": f"{r.src_format} -> {r.dst_format}",
                "per_step": r.count / n,
                "us_per_step": us(r.total_ns / n),
                "share": r.share_of_step,
            }
            for r in td.head(5).itertuples()
        ],
        "padding_bytes_per_step": s["padding_bytes"] / n,
    }
    if formats_off:
        evidence["apply"] = {"internal_format": False}
    gain_ns = transdata_gain_ns(data)
    evidence["device_us_per_step"] = values["time_us"]
    evidence["replayed"] = gain_ns is not None
    gain_us = values["time_us"] if gain_ns is None else us(gain_ns)
    return spec.fire(values, s["transdata_share"], gain_us, data.rank, evidence)


def transdata_gain_ns(data: RankData) -> float | None:
    """Step time saved per step (ns) without the TransData tasks: their device time, their
    launches' host time and their slots in the launch pipeline (which sets the step where
    tasks arrive slower than the device runs them), by replaying the recorded launches and
    syncs without them (:mod:`msprof_py.analyzers.replay`); None without host launch records.
    """
    every = data.all_tasks
    ids = every.loc[(every["op_type"] == "TransData").to_numpy(), "task_id"]
    host = data.all_host
    if not (host["kind"] == "launch").any():
        return None
    return replay.record(data, "transdata_heavy", ids)


def aicpu_gains_ns(
    data: RankData, t: pd.DataFrame, device_saved: pd.Series, beyond: pd.Series
) -> tuple[float, float, bool]:
    """Step time saved per step (ns) by the AI CPU tasks ``t`` running ``device_saved`` ns
    shorter (the modelled dtype re-cost), and by both that and ``beyond`` (the heuristic
    part: ops that always run on the AI CPU down to its launch overhead), replayed
    (:mod:`msprof_py.analyzers.replay`, which keeps the combined change for the joint
    estimate), and whether they were replayed: without host launch records the device time
    saved per step is the estimate."""
    n = data.n_steps
    if not (data.all_host["kind"] == "launch").any():
        return float(device_saved.sum()) / n, float((device_saved + beyond).sum()) / n, False
    ids = t["task_id"].to_numpy()
    duration = t["duration_ns"].astype("float64")
    modelled = pd.Series((duration - device_saved).to_numpy(), index=ids)
    both = pd.Series((duration - device_saved - beyond).to_numpy(), index=ids)
    return replay.gain_ns(data, (), modelled), replay.record(data, "aicpu_fallback", (), both), True


def aicpu_fallback(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Ops on the AI CPU, with the dtype or op to change where the user's code made them and
    the source's own advice where a framework internal did (no gain counted for those)."""
    data = ctx.data
    need_tasks(data)
    t = aicpu.tasks(data)
    t = t[t["duration_ns"] >= spec.thresholds["min_task_us"] * 1e3]
    share = data.share(t["duration_ns"].sum())
    if t.empty or share < spec.thresholds.get("min_share", 0.0):
        return spec.ok(data.rank, {"aicpu_tasks": len(t)})
    need_spec(data)
    n = data.n_steps
    user = (t["source"] == "user").to_numpy()
    by_dtype = (t["to_dtype"] != "").to_numpy()
    vector = recost.aicpu_as_vector_ns(data, t, t["to_dtype"].where(by_dtype, "float32"))
    device_saved = np.clip(t["duration_ns"] - vector, 0, None).where(by_dtype & user, 0.0)
    sched = data.spec.aicpu.launch_overhead_ns
    beyond = np.clip(t["duration_ns"] - sched, 0, None).where(~by_dtype & user, 0.0)
    # device work saved, then the step time it saves, replayed: with the AI CPU's long
    # tasks shorter a step can be bound by the launches or the host instead
    device_modelled = float(device_saved.sum())
    modelled, both, replayed = aicpu_gains_ns(data, t, device_saved, beyond)
    heuristic = max(0.0, both - modelled)
    table = aicpu.table(data)
    table = table[table["op_type"].isin(t["op_type"])]
    users = table[table["source"] == "user"]
    top = (users if len(users) else table).iloc[0]
    framework = table[table["source"] != "user"]
    fw_text = ""
    if len(framework):
        fw_ns = float(t.loc[~user, "duration_ns"].sum())
        names = ", ".join(dict.fromkeys(framework["source"].astype(str)))
        fw_text = (
            f" {us(fw_ns / n):.1f} us per step come from framework internals ({names}), not "
            "from the script: no dtype change applies to them."
        )
    change = (
        f"Change: {top['change']} - {top['suggestion']}."
        if top["source"] == "user"
        else f"Source: {top['source']} - {top['suggestion']}."
    )
    values = {
        "count_per_step": len(t) / n,
        "time_us": us(t["duration_ns"].sum() / n),
        "share": share,
        "top": f"{top['name']} ({top['op_type']}, {top['input_dtypes'] or 'no tensors'}, "
        f"{us(top['total_ns'] / n):.1f} us per step)",
        "change": change + fw_text,
    }
    evidence = {
        "modelled_gain_us_per_step": us(modelled),
        "device_saved_us_per_step": us(device_modelled / n),
        "heuristic_gain_us_per_step": us(heuristic),
        "replayed": replayed,
        "framework_us_per_step": us(float(t.loc[~user, "duration_ns"].sum()) / n),
        "ops": [
            {
                "name": r.name,
                "op_type": r.op_type,
                "dtypes": r.input_dtypes,
                "source": r.source,
                "per_step": r.count / n,
                "us_per_step": us(r.total_ns / n),
                "share": r.share_of_step,
                "change": r.change,
                "suggestion": r.suggestion,
            }
            for r in table.head(5).itertuples()
        ],
    }
    fallbacks = t[by_dtype & user]
    if len(fallbacks):  # the dtype change of the longest fallback, for the check to apply
        longest = fallbacks.loc[fallbacks["duration_ns"].idxmax()]
        old = str(longest["reason"]).removeprefix("dtype ")
        evidence["apply"] = {"dtype": {"from": old, "to": str(longest["to_dtype"])}}
    finding = spec.fire(values, share, us(modelled + heuristic), data.rank, evidence)
    if heuristic > modelled:
        finding.gain_model = "heuristic"
    if not user.any():
        finding.advice = (
            "Nothing to change in the script: these AI CPU tasks are framework internals "
            "(see each op's source)."
        )
    return finding
