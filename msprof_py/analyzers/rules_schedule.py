"""Rules about how work reaches the device: dispatch, copies, syncs, utilisation, memory, data.

Each rule takes the :class:`RuleContext` and its :class:`RuleSpec` and returns a finding;
it raises :class:`Skip` naming the data it lacks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import (
    aicpu,
    batchscale,
    batchtune,
    compute,
    copies,
    dvpp_gain,
    gains,
    graphs,
    loading,
    memory,
    replay,
    syncs,
    timeline,
)
from msprof_py.analyzers import ops as ops_table
from msprof_py.analyzers.context import KERNEL, RankData
from msprof_py.analyzers.findings import Finding, RuleSpec, Skip
from msprof_py.analyzers.recost import pinned_copy_ns
from msprof_py.analyzers.rules_compute import (
    RuleContext,
    compiled_note,
    need_spec,
    need_tasks,
    us,
)
from msprof_py.device import costmodel, dvpp
from msprof_py.device.records import CopyKind

GIB = 1024**3
MIB = 1024**2


def _idle(ctx: RuleContext, cause: str) -> float:
    """Idle time (ns, total over the analysed steps) the gap analysis gives ``cause``."""
    table = timeline.idle_by_cause(ctx.data)
    return float(table.loc[table["cause"] == cause, "total_ns"].sum())


def _need_host(ctx: RuleContext) -> None:
    host = ctx.data.host
    if not host["kind"].isin(("op", "launch")).any():
        raise Skip("no host ops or launches recorded (needed to attribute device idle time)")


def host_bound_dispatch(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """The device idles between short kernels waiting for the host."""
    data = ctx.data
    need_tasks(data)
    _need_host(ctx)
    n = data.n_steps
    idle, arrived = _dispatch_idle(data)
    share = data.share(idle)
    kernel_ns = data.tasks["duration_ns"].to_numpy()[data.kernel_mask]
    median = float(np.median(kernel_ns)) if kernel_ns.size else 0.0
    ops = data.host_ops[["event_id", "start_ns", "end_ns"]]
    ops = ops[ops["event_id"].isin(data.tasks["host_op_id"])]
    per_op = float((ops["end_ns"] - ops["start_ns"]).mean()) if len(ops) else 0.0
    split = graphs.split(data)
    values = {
        "share": share,
        "time_us": us(idle / data.n_steps),
        "median_kernel_us": us(median),
        "host_per_op_us": us(per_op),
        "compile": _compile_text(split),
    }
    rates = arrival_limiter(data)
    values["limiter"] = _limiter_text(rates)
    limit = spec.thresholds["max_median_kernel_us"] * 1e3
    if share < spec.thresholds["min_share"] or median > limit:
        return spec.ok(data.rank, {**values, **rates, "arrived_idle_us": us(arrived / n)})
    top = ops_table.host_ops(data, 5)
    evidence = {
        "ops": [
            {
                "name": r.name,
                "per_step": r.count / data.n_steps,
                "host_us_per_step": us(r.host_total_ns / data.n_steps),
                "device_us_per_step": us(r.device_total_ns / data.n_steps),
                "share": r.share_of_step,
            }
            for r in top.itertuples()
        ],
        "compiled": bool(compiled_note(data)),
        "graph_host_share": split["graph_host_share"],
        "eager_host_ns_per_step": split["eager_host_ns_per_step"],
        **rates,
        # gaps the host's dispatch window covers but whose next task had already reached
        # the device (it waited for another stream or for resources): not counted
        "arrived_idle_us": us(arrived / n),
    }
    gain_us = values["time_us"]
    if not _compiling_done(split):
        evidence["apply"] = {"compile": "npu"}
        sunk = compiled_model_tasks(data)
        if sunk is not None:
            # the step with the model's forward and backward in graphs, replayed: what the
            # eager optimizer step and the rest of the loop leave of the idle time
            # the BatchNorm counters' AI CPU updates go on streams of their own in a graph
            side = np.intersect1d(sunk, aicpu.module_counter_tasks(data))
            gain_us = us(replay.record(data, spec.name, (), None, sunk, side))
            evidence["side_tasks_per_step"] = len(side) / n
            evidence["replayed"] = True
            evidence["compiled_tasks_per_step"] = len(sunk) / n
    finding = spec.fire(values, share, gain_us, data.rank, evidence)
    if not evidence.get("replayed"):
        finding.gain_model = "heuristic"  # the idle time itself: an upper bound
    if not (_optimizer_left(split) or _model_left(split)):
        finding.advice += compiled_note(data)
    return finding


def compiled_model_tasks(data: RankData) -> np.ndarray | None:
    """The task ids ``torch.compile(model)`` would launch from its graphs: those of the ops
    :func:`graphs.model_ops` picks (the model's forward and autograd's backward; the optimizer
    step, the loss and the input copies stay eager). None without launch records to replay or
    without ops run in a module."""
    if not (data.all_host["kind"] == "launch").any():
        return None
    picked_ops = graphs.model_ops(data)
    if not picked_ops.any():
        return None
    picked = data.host_ops.loc[picked_ops, "event_id"]
    tasks = data.tasks
    chosen = tasks["host_op_id"].isin(picked) & tasks["kind"].isin((KERNEL, "memcpy"))
    return tasks.loc[chosen, "task_id"].to_numpy(np.int64)


def _dispatch_idle(data: RankData) -> tuple[float, float]:
    """Device idle time (ns, over the analysed steps) waiting for launches, and the rest of
    the gaps the gap analysis gives to host-bound dispatch: a gap waits for a launch until
    its next task reaches the device (:func:`replay.arrival_waits`); after that (the task had
    arrived) the device waits for another stream, an event or its resources, not for the
    host. An imported profile records no arrival: its whole gaps are the host's, as the gap
    analysis says."""
    gaps = timeline.idle_gaps(data)
    gaps = gaps[gaps["cause"] == "host-bound dispatch"]
    if gaps.empty:
        return 0.0, 0.0
    start = gaps["start_ns"].to_numpy(np.float64)
    dur = gaps["duration_ns"].to_numpy(np.float64)
    waited = replay.arrival_waits(data, start, start + dur)
    if waited is None:
        return float(dur.sum()), 0.0
    return float(waited.sum()), float((dur - waited).sum())


def arrival_limiter(data: RankData) -> dict[str, Any]:
    """What sets the rate tasks reach the device: the host thread (Python, dispatch and the
    launches' stage 1, everything but its syncs) or the launch pipeline (the launches' stage
    2, :func:`replay.stage2_ns`, as the replay reads it). Per step, in us, and the limiter's
    name."""
    n = data.n_steps
    host = data.host
    syncs = host[host["kind"] == "sync"]
    host_range = float(data.steps["host_ns"].sum()) if len(data.steps) else 0.0
    thread = host_range - float((syncs["end_ns"] - syncs["start_ns"]).sum())
    launches = host.loc[host["kind"] == "launch", ["end_ns", "task_id"]]
    arrival = data.all_tasks.set_index("task_id")["launch_ns"]
    arrived = arrival.reindex(launches["task_id"].to_numpy()).to_numpy(dtype=np.float64)
    ok = ~np.isnan(arrived)
    arrived, ended = arrived[ok], launches["end_ns"].to_numpy(dtype=np.float64)[ok]
    order = np.argsort(arrived, kind="stable")
    pipeline = float(replay.stage2_ns(ended[order], arrived[order]).sum())
    launches_per_step = len(arrived) / n
    return {
        "host_thread_us_per_step": us(thread / n),
        "launch_pipeline_us_per_step": us(pipeline / n),
        "launches_per_step": launches_per_step,
        "limiter": "launch pipeline" if pipeline > thread else "host thread",
    }


def _limiter_text(rates: dict[str, Any]) -> str:
    """The message's sentence on what sets the tasks' arrival rate."""
    per = rates["launches_per_step"] or 1.0
    if rates["limiter"] == "launch pipeline":
        return (
            f"Tasks arrive at the launch pipeline's rate: its stage 2 takes "
            f"{rates['launch_pipeline_us_per_step'] / per:.1f} us per launch "
            f"({rates['launch_pipeline_us_per_step']:.1f} us per step for "
            f"{per:.0f} launches), more than the host thread's "
            f"{rates['host_thread_us_per_step']:.1f} us: fewer launches help, faster Python "
            "code does not."
        )
    return (
        f"The host thread sets the rate ({rates['host_thread_us_per_step']:.1f} us per step "
        f"for {per:.0f} launches, the launch pipeline "
        f"{rates['launch_pipeline_us_per_step']:.1f} us)."
    )


def _optimizer_left(split: dict) -> bool:
    """The model is compiled and the eager dispatch beside it is mostly the optimizer's."""
    return bool(split["compiled"]) and split["optimizer_host_share"] >= COMPILED_DISPATCH_SHARE


#: host dispatch share in compiled graphs above which compiling is no longer proposed
COMPILED_DISPATCH_SHARE = 0.5


def _model_left(split: dict) -> bool:
    """The model is compiled and little of the eager dispatch beside it is the model's (the
    loss, gradient clipping and the optimizer step are outside it)."""
    return bool(split["compiled"]) and split["model_host_share"] < COMPILED_DISPATCH_SHARE


def _graphs_hold_dispatch(split: dict) -> bool:
    """Most host dispatch already goes to compiled graphs."""
    return bool(split["compiled"]) and split["graph_host_share"] >= COMPILED_DISPATCH_SHARE


def _compiling_done(split: dict) -> bool:
    """Whether compiling more cannot help: most host time already goes to compiled graphs, the
    eager dispatch left beside them is mostly the optimizer step's (a fused optimizer's job,
    not the graph's), or mostly outside the model (compiling the model cannot reach it)."""
    return _graphs_hold_dispatch(split) or _model_left(split) or _optimizer_left(split)


def _compile_text(split: dict) -> str:
    """The graph-mode part of the dispatch advice: propose compiling where the dispatch is
    eager; say so where it already runs in graphs (never propose compiling compiled code)."""
    if _optimizer_left(split):
        return (
            "the model already runs in compiled graphs and the eager dispatch left is mostly "
            f"the optimizer step's ({split['optimizer_host_share']:.0%} of it: fuse it, see "
            "fused_optimizer), so compiling more does not help; use"
        )
    if _graphs_hold_dispatch(split):
        return (
            f"most host time already goes to compiled graphs ({split['graph_host_share']:.0%}, "
            "one launch per graph call), so compiling more does not help; use"
        )
    if _model_left(split):
        return (
            "the model already runs in compiled graphs and the eager dispatch left is outside "
            f"it ({1 - split['model_host_share']:.0%} of it: the loss, gradient clipping, the "
            "optimizer step), so compiling the model again does not help; use"
        )
    return (
        'compile the model in graph mode (torch.compile(model, backend="npu"): one host '
        "launch per graph call instead of one dispatch per op), or use"
    )


def recompile_storm(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """A Dynamo code object compiled again and again (up to the limit, then eager)."""
    data = ctx.data
    if not graphs.compiled(data):
        raise Skip("no compiled graphs recorded (graph mode did not run)")
    table = graphs.recompiles(data)
    if table.empty:
        raise Skip("the recorded graphs name no code object (recompile counts unknown)")
    top = table.iloc[0]
    compiles, limit = int(top["compiles"]), int(top["limit"])
    limit_reached = limit > 0 and compiles >= limit
    host = data.host
    every = data.graphs
    names = host["name"].astype(str)
    # graph compiles only: an eager op's online compile is ``compile <OpType>`` too
    graph_names = ("compile " + every["graph"].astype(str)).unique()
    spans = host[(host["kind"] == "api") & names.isin(graph_names)]
    in_steps = float((spans["end_ns"] - spans["start_ns"]).sum())
    values = {
        "code": str(top["code"]),
        "compiles": compiles,
        "recompiles": compiles - 1,
        "graphs": int(top["graphs"]),
        "limit": limit,
        "limit_reached": limit_reached,
        "limit_text": (
            f": it reached the recompile limit ({limit}), so later new variants run eagerly, "
            "op by op"
            if limit_reached
            else (f", {limit - compiles} below the recompile limit ({limit})" if limit else "")
        ),
        "compile_ms": float(every["compile_ns"].sum()) / 1e6,
        "compile_in_steps_ms": in_steps / 1e6,
        "share": data.share(in_steps),
    }
    evidence = {
        "code_objects": [
            {
                "code": str(r.code),
                "compiles": int(r.compiles),
                "limit": int(r.limit),
                "graphs": int(r.graphs),
                "example_graph": str(r.example),
            }
            for r in table.head(5).itertuples()
        ],
    }
    if compiles - 1 < spec.thresholds["min_recompiles"] and not limit_reached:
        return spec.ok(data.rank, {**values, **evidence})
    return spec.fire(values, values["share"], us(in_steps / data.n_steps), data.rank, evidence)


#: what to do about exposed copies of each kind (direction, pinned) - pinning only where the
#: copy crosses the host link from pageable memory
COPY_ADVICE = {
    ("H2D", False): (
        "load batches into pinned memory (DataLoader(pin_memory=True) or tensor.pin_memory()) "
        "and copy with non_blocking=True"
    ),
    ("H2D", True): (
        "the source is already pinned: copy with non_blocking=True and prefetch the next batch "
        "on a side stream (torch.npu.Stream + wait_stream) so the copy runs under the previous "
        "step's compute"
    ),
    ("D2H", False): (
        "read results back less often (log every N steps) and into pinned buffers with "
        "non_blocking=True"
    ),
    ("D2H", True): "read results back less often (log every N steps), asynchronously",
    ("D2D", False): (
        "avoid device-to-device copies in the step: drop .clone()/.contiguous()/.to() of "
        "device tensors that are used once, use views or in-place ops, or keep the tensor in "
        "the layout its consumer needs"
    ),
}


def _copy_advice(exposed: pd.DataFrame) -> tuple[list[str], list[dict[str, object]]]:
    """Advice for the copy kinds that run exposed, largest first, and their figures."""
    kinds = exposed.assign(pinned=exposed["pinned"].astype(bool))
    kinds.loc[kinds["direction"] == "D2D", "pinned"] = False
    g = (
        kinds.groupby(["direction", "pinned"], sort=False)["exposed"]
        .agg(["size", "sum"])
        .sort_values("sum", ascending=False)
    )
    texts, rows = [], []
    for (direction, pinned), r in g.iterrows():
        if r["sum"] <= 0:
            continue
        text = COPY_ADVICE.get((direction, bool(pinned)))
        if text and text not in texts:
            texts.append(text)
        rows.append(
            {"direction": direction, "pinned": bool(pinned), "count": int(r["size"]),
             "exposed_ns": float(r["sum"])}
        )  # fmt: skip
    return texts, rows


def _sentence(text: str) -> str:
    """``text`` with its first letter upper-cased and a full stop."""
    return text[:1].upper() + text[1:] + "."


def exposed_copies(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Copies running with no compute beside them (on the critical path); the advice follows
    each copy's kind: pin pageable host copies, prefetch pinned ones, avoid device copies."""
    data = ctx.data
    need_tasks(data)
    s = copies.summary(data, value_reads=False)  # .item() read-backs: the sync rule's
    share = s["exposed_ratio"]
    if s["copies"] == 0 or share < spec.thresholds["min_share"]:
        return spec.ok(data.rank, s)
    tasks = copies.copy_tasks(data)
    tasks = tasks[~tasks["value_read"]]
    per_step = copies.exposed_per_step(data, value_reads=False)
    pinned = tasks.assign(pinned_ns=pinned_copy_ns(data, tasks))
    new_copy = pinned.groupby("step")["pinned_ns"].sum().reindex(per_step["step"]).fillna(0)
    exposed_after = np.clip(new_copy.to_numpy() - per_step["compute_ns"].to_numpy(), 0, None)
    gain = np.clip(per_step["exposed_ns"].to_numpy() - exposed_after, 0, None).sum()
    top = tasks.assign(exposed=tasks["duration_ns"] - tasks["hidden_ns"]).sort_values(
        "exposed", ascending=False, kind="stable"
    )
    t = top.iloc[0]
    n = data.n_steps
    host_link = t["direction"] in ("H2D", "D2H")
    memory = (" (pinned)" if t["pinned"] else " (pageable)") if host_link else ""
    texts, kinds = _copy_advice(top)
    pageable = s["pageable_count"] / n
    values = {
        "time_us": us(s["exposed_per_step_ns"]),
        "share": share,
        "copy_ratio": s["copy_ratio"],
        "pageable_text": (
            f", {pageable:.0f} of them from pageable memory ({us(s['pageable_ns'] / n):.1f} us)"
            if pageable > 0
            else ""
        ),
        "top": f"{t['direction']} {t['bytes'] / MIB:.2f} MiB{memory} {us(t['duration_ns']):.1f} us",
        "fix": _sentence("; ".join(texts)) if texts else "Overlap copies with compute.",
    }
    evidence = {
        "pageable_per_step": pageable,
        "pageable_us": us(s["pageable_ns"] / n),
        "host_blocked_us_per_step": us(s["host_blocked_ns"] / n),
        "by_kind": [
            {
                **{c: v for c, v in k.items() if c != "exposed_ns"},
                "exposed_us_per_step": us(k["exposed_ns"] / n),
            }
            for k in kinds
        ],
        "by_direction": copies.by_direction(data).drop(columns="rank").to_dict("records"),
    }
    return spec.fire(values, share, us(gain / n), data.rank, evidence)


def small_copies(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Many copies of a few bytes each, every one paying the link latency."""
    data = ctx.data
    need_tasks(data)
    small_bytes = int(spec.thresholds["small_bytes"])
    tasks = copies.copy_tasks(data)
    small = tasks[tasks["bytes"] < small_bytes]
    n = data.n_steps
    per_step = len(small) / n
    if per_step < spec.thresholds["min_per_step"]:
        return spec.ok(data.rank, {"small_per_step": per_step})
    need_spec(data)
    kinds = {k.value: k for k in CopyKind}
    merged = 0.0
    groups = small.groupby(["step", "copy_kind"], observed=True)
    for (_, kind), g in groups:  # one row per step and direction
        copy_kind = kinds.get(kind)
        if copy_kind is None:
            merged += float(g["duration_ns"].sum())
            continue
        merged += costmodel.copy_ns(
            data.spec, copy_kind, int(g["bytes"].sum()), pinned=bool(g["pinned"].all())
        )
    time = float(small["duration_ns"].sum())
    values = {
        "per_step": per_step,
        "small_kib": small_bytes / 1024,
        "time_us": us(time / n),
        "share": data.share(time),
    }
    evidence = {"merged_us_per_step": us(merged / n), "groups": len(groups)}
    return spec.fire(values, values["share"], us((time - merged) / n), data.rank, evidence)


def sync_in_loop(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Host syncs inside the step that leave the device idle."""
    data = ctx.data
    need_tasks(data)
    _need_host(ctx)
    pts = syncs.script_points(data)
    n = data.n_steps
    idle = _idle(ctx, "synchronisation")
    share = data.share(idle)
    if pts.empty or share < spec.thresholds["min_share"]:
        return spec.ok(data.rank, {"syncs_per_step": len(pts) / n, "idle_share": share})
    copy = syncs.value_read_copy_ns(data)
    counts = pts["kind"].value_counts()
    kinds = ", ".join(f"{c / n:.0f} {k}" for k, c in counts.items())
    longest = pts.loc[pts["duration_ns"].idxmax()]
    where = longest["op"] or longest["name"]
    if longest["module"]:
        where += f" in {longest['module']}"
    values = {
        "count_per_step": len(pts) / n,
        "kinds": kinds,
        "blocked_us": us(pts["duration_ns"].sum() / n),
        "time_us": us(idle / n),
        "share": share,
        "where": f"{where} ({us(longest['duration_ns']):.1f} us)",
        "copy_us": us(copy / n),
    }
    evidence = {
        "points": syncs.summary(data).drop(columns="rank").head(5).to_dict("records"),
        "idle_us_per_step": values["time_us"],
        "value_read_copy_us_per_step": values["copy_us"],
        "apply": {"sync": "defer"},
    }
    return spec.fire(values, share, us((idle + copy) / n), data.rank, evidence)


def low_utilisation(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """The device is idle most of the step and memory allows a larger batch: the largest batch
    that keeps peak memory within ``memory_limit`` of the device (capped at ``max_batch``),
    with the throughput it models. With a tuner (``msprof analyze --tune-batch``) the batch,
    its memory and throughput are the auto batch tuner's measurements of the recorded script;
    without one they are estimated from the recorded memory and the finding names the
    ``msprof tune-batch`` command that measures them."""
    data = ctx.data
    need_tasks(data)
    util = compute.utilisation(data)
    step = float(util["step_ns"].sum())
    busy = float(util["device_busy_ns"].sum())
    u = min(1.0, busy / step) if step else 0.0
    if u >= spec.thresholds["max_utilisation"]:
        return spec.ok(data.rank, {"utilisation": u})
    if busy <= 0:
        raise Skip("no kernel or collective ran in the analysed steps")
    limit = float(spec.thresholds.get("memory_limit", memory.LIMIT))
    cap = int(spec.thresholds.get("max_batch", 256))
    mem = memory.summary(data, ctx.batch_size, limit)
    batch, scale = mem.get("batch_size"), mem.get("max_batch_scale")
    req = None
    if batch:
        granularity = int(spec.thresholds.get("tune_granularity", 1))
        req = batchtune.request(
            data.meta, batch, max_batch=cap, limit=limit, granularity=granularity
        )
    evidence: dict[str, Any] = {
        "utilisation": u,
        "batch_size": batch,
        "batch_size_source": mem.get("batch_size_source"),
        "max_batch": cap,
        "memory_limit": limit,
        "cube_utilisation": float(util["cube_busy_ns"].sum() / step) if step else 0.0,
        "vector_utilisation": float(util["vector_busy_ns"].sum() / step) if step else 0.0,
        "tune_command": req.command() if req else None,
    }
    if batch and req is not None and ctx.tuner is not None:
        return _tuned_batch(ctx, spec, req, u, evidence)
    if scale is None:
        raise Skip(_no_batch_scale(data, mem))
    if not batch:
        raise Skip("the batch size is unknown (no host-to-device input copy; pass --batch-size)")
    fits = math.floor(batch * scale)
    best = min(cap, fits)
    evidence["largest_batch_in_memory"] = fits
    if best <= batch:
        why = "at the cap" if batch >= cap else "no larger batch fits in memory"
        return spec.ok(data.rank, {**evidence, "why": why})
    k = best / batch
    per_step, busy_step = step / data.n_steps, busy / data.n_steps
    growth = batchscale.busy_ratio(data, batch, k)
    evidence["device_work_growth"] = growth
    new_step = max(per_step, growth * busy_step)  # device work re-costed, host time stays
    now, then = batch / per_step * 1e9, best / new_step * 1e9
    if req is not None:
        tune = f"; `{req.command()}` measures the largest that fits"
    else:
        tune = (
            '; `msprof tune-batch --application="python train.py ..."` measures the '
            "largest that fits (the profile records no script command to rerun)"
        )
    values = {
        "utilisation": u,
        "batch": batch,
        "best": best,
        "limit": limit,
        "capped": f" (capped at {cap})" if fits > cap else "",
        "basis": "estimated from the recorded memory, device work re-costed",
        "step_us": us(new_step),
        "throughput": then,
        "throughput_now": now,
        "speedup": then / now,
        "tune": tune,
    }
    gain = per_step - new_step / k  # step time per current batch of samples
    evidence.update(modelled_step_us=us(new_step), modelled_throughput=then)
    evidence["apply"] = {"batch_size": best}
    return spec.fire(values, 1.0 - u, us(gain), data.rank, evidence)


def _tuned_batch(
    ctx: RuleContext,
    spec: RuleSpec,
    req: batchtune.TuneRequest,
    u: float,
    evidence: dict[str, Any],
) -> Finding:
    """The batch-size finding from the auto batch tuner's measurements (see
    :func:`low_utilisation`): the largest batch it measured within the limit, its peak
    memory, and the modelled throughput of its step against the current batch's."""
    data = ctx.data
    assert ctx.tuner is not None
    result = ctx.tuner(req)
    evidence["tuner"] = {"best": result.best, "trials": result.table()}
    evidence["largest_batch_in_memory"] = result.best
    batch, best = req.batch, result.best
    at_now, at_best = batchtune.trial_at(result, batch), batchtune.trial_at(result, best)
    if best <= batch or at_now is None or at_best is None:
        if not best:
            why = f"the tuner: batch {batch} already exceeds {req.limit:.0%} of device memory"
        elif batch >= req.max_batch:
            why = "at the cap"
        else:
            why = "the tuner: no larger batch fits in memory"
        return spec.ok(data.rank, {**evidence, "why": why})
    if at_now.step_ns <= 0 or at_best.step_ns <= 0:
        raise Skip("the tuner's runs recorded no step (the script marks no training step)")
    then, now = at_best.samples_per_s, at_now.samples_per_s
    values = {
        "utilisation": u,
        "batch": batch,
        "best": best,
        "limit": req.limit,
        "capped": f" (capped at {req.max_batch})" if result.capped else "",
        "basis": (
            f"measured by the auto batch tuner: peak {_size(at_best.peak_bytes)}, "
            f"{at_best.share:.1%} of the device"
        ),
        "step_us": us(at_best.step_ns),
        "throughput": then,
        "throughput_now": now,
        "speedup": then / now,
        "tune": (
            f" The auto batch tuner measured this in {len(result.trials)} shapes-only runs of "
            "the script."
        ),
    }
    gain = at_now.step_ns - at_best.step_ns * batch / best
    evidence.update(
        modelled_step_us=us(at_best.step_ns),
        modelled_throughput=then,
        peak_gib=at_best.peak_bytes / GIB,
        peak_share=at_best.share,
    )
    evidence["apply"] = {"batch_size": best}
    return spec.fire(values, 1.0 - u, us(gain), data.rank, evidence)


def _size(nbytes: int) -> str:
    """Bytes as GiB, or MiB below one GiB."""
    return f"{nbytes / GIB:,.2f} GiB" if nbytes >= GIB else f"{nbytes / MIB:,.1f} MiB"


def _no_batch_scale(data: RankData, mem: dict) -> str:
    """Why the largest batch that fits in memory is unknown (``memory.summary`` gave none)."""
    if not mem.get("available"):
        return "device memory was not recorded (the batch that fits is unknown)"
    if mem.get("capacity_bytes") is None:
        why = data.spec_error or "the device spec is unknown"
        return (
            f"the device's memory capacity is unknown ({why}): the batch that fits cannot be "
            "computed from the recorded memory"
        )
    return (
        "allocated memory did not grow in the analysed steps (no activation memory): the "
        "batch that fits is unknown"
    )


def memory_near_capacity(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Peak reserved memory close to the device's usable memory."""
    data = ctx.data
    if data.all_memory.empty:
        recorded = data.meta.get("record_memory")
        if recorded is False:
            raise Skip("memory was not recorded (msprof --sys-hardware-mem off)")
        if recorded:
            raise Skip("no device memory was allocated while recording")
        raise Skip("no memory events in the profile")
    need_spec(data)
    m = memory.summary(data, ctx.batch_size)
    share = m["peak_share_of_capacity"]
    values = {
        "peak_gib": m["peak_reserved"] / GIB,
        "share_of_capacity": share,
        "capacity_gib": m["capacity_bytes"] / GIB,
        "fragmentation_mib": m["fragmentation_bytes"] / MIB,
    }
    if share < spec.thresholds["max_share"] and not m["oom_events"]:
        return spec.ok(data.rank, values)
    return spec.fire(values, share, None, data.rank, {"oom_events": m["oom_events"]})


def slow_dataloader(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Data loading that leaves the device idle: from the timeline where host time is
    measured (the loading ranges have their real length), else from the waits measured on
    this host beside the modelled timeline (:mod:`msprof_py.analyzers.loading`)."""
    data = ctx.data
    host = data.all_host
    ann = host[host["kind"] == "annotation"]
    ann = ann[ann["name"].str.contains(timeline.DATA_LOADING).fillna(False).to_numpy(bool)]
    measured = loading.waits(data)
    if ann.empty and measured.empty:
        raise Skip(
            "no data-loading annotations recorded (DataLoader iteration or "
            "msprof_py.annotate('data loading'))"
        )
    in_steps = ann[ann["step"].isin(data.steps["step"])]
    on_timeline = float((in_steps["end_ns"] - in_steps["start_ns"]).sum())
    n = data.n_steps
    step_ns = float(data.steps["duration_ns"].sum()) / n if len(data.steps) else 0.0
    evidence: dict[str, Any] = {
        "modelled_step_us": us(step_ns),
        "worker_processes": loading.worker_processes(ann["name"]),
    }
    if not measured.empty:
        evidence.update(_measured_evidence(measured, n))
    # modelled host time: the timeline's loading ranges hold at most the modelled cost of the
    # device calls in them (pinning), the measured waits the real time
    if measured.empty or data.meta.get("host_time") != "modeled":
        if data.meta.get("deterministic") and on_timeline == 0:
            raise Skip(
                "host time is modelled and --deterministic runs measure no wall-clock time "
                "(their profiles are byte-identical run to run): record without "
                "--deterministic to have the data-loading waits measured"
            )
        if data.meta.get("host_time") == "modeled" and on_timeline == 0:
            raise Skip(
                "host time is modelled and this profile holds no measured data-loading waits "
                "(recorded by an msprof-py before they were measured): record it again, or "
                "with --host-time measured"
            )
        idle = _idle(ctx, "data loading")
        share = data.share(idle)
        basis = MEASURED_TIMELINE_BASIS
        values = {
            "loading_ms": on_timeline / n / 1e6,
            "time_us": us(idle / n),
            "share": share,
            "source": "host time measured, the loading ranges on the timeline",
        }
        slow = values["loading_ms"] >= spec.thresholds["max_ms_per_step"] and share > 0
        quiet = share < spec.thresholds["min_share"] and not slow
        # the part of the loading range the device was busy anyway: what DVPP work hides in
        step_idle = [idle / n]
        step_backlog = [max(0.0, on_timeline / n - idle / n)]
    else:
        # per step, the median: one wait that a busy host's scheduler stretched does not
        # stand for the loader (the mean is in the evidence)
        per_step = loading.per_step(measured, data.steps["step"])
        step_idle = per_step["idle_ns"].tolist()
        step_backlog = per_step["backlog_ns"].tolist()
        wall = float(per_step["wall_ns"].median())
        idle_step = float(per_step["idle_ns"].median())
        step_med = float(data.steps["duration_ns"].median()) if len(data.steps) else 0.0
        share = idle_step / (step_med + idle_step) if step_med + idle_step > 0 else 0.0
        basis = (
            "measured on this host: the real wall time of the loading waits, less the device "
            "work already queued at each wait on the modelled timeline (the device idles "
            "for the rest of the wait); median over the steps; the timeline leaves it out"
        )
        values = {
            "loading_ms": wall / 1e6,
            "time_us": us(idle_step),
            "share": share,
            "source": (
                f"median of the measured wall time on this host, against a modelled step of "
                f"{us(step_med):.1f} us that leaves it out"
            ),
        }
        evidence[gains.BESIDE_TIMELINE] = True  # the combined estimate leaves it out
        floor = spec.thresholds.get("min_wait_us", 0.0) * 1e3
        slow = values["loading_ms"] >= spec.thresholds["max_ms_per_step"] and share > 0
        quiet = (share < spec.thresholds["min_share"] and not slow) or wall < floor
    evidence["basis"] = basis
    evidence.update(dvpp_use(data))
    if quiet:
        finding = spec.ok(data.rank, {**values, **evidence})
        finding.message += _dvpp_use_text(evidence)
        return finding
    evidence.update(image_batches(data))
    if evidence["image_batch"] and evidence["device_has_dvpp"] and not evidence["dvpp_tasks"]:
        evidence["dvpp_model"] = dvpp_gain.model(
            dvpp.dvpp_spec(data.spec), evidence["image_batch"], step_idle, step_backlog
        )
    finding = spec.fire(values, share, values["time_us"], data.rank, evidence)
    finding.gain_basis = f"upper bound: the device idle the loading causes ({basis})"
    finding.advice = _loader_advice(evidence["worker_processes"], finding.advice)
    finding.advice += _dvpp_advice(evidence)
    finding.message += _dvpp_use_text(evidence)
    return finding


def dvpp_use(data: RankData) -> dict[str, Any]:
    """The DVPP work of the analysed steps: task count per op type and busy time per step."""
    t = data.tasks
    dv = t[t["kind"] == "dvpp"]
    busy = float((dv["end_ns"] - dv["start_ns"]).sum()) / max(1, data.n_steps)
    return {
        "dvpp_us_per_step": us(busy),
        "dvpp_ops": {
            str(k): int(v) for k, v in dv["op_type"].value_counts().sort_index().items() if v
        },
    }


def _dvpp_use_text(evidence: dict[str, Any]) -> str:
    """One sentence on the DVPP work the steps ran, empty where they ran none."""
    ops = evidence["dvpp_ops"]
    if not ops:
        return ""
    listed = ", ".join(f"{op} {n}" for op, n in ops.items())
    return (
        f" The steps used DVPP ({listed}): {evidence['dvpp_us_per_step']:.1f} us of DVPP time "
        "per step on the device's media engines."
    )


#: what the loading time on a measured-host-time timeline holds, and what it cannot leave out
MEASURED_TIMELINE_BASIS = (
    "host time measured: the loading ranges' real time on the timeline, less the simulator's "
    "own time inside the device calls made in them (charged at their modelled cost instead) "
    "and the profiler hooks' time; the cost of each op's crossing from torch's dispatcher "
    "into the Python npu backend cannot be measured apart and counts as the script's time"
)


def _measured_evidence(measured: pd.DataFrame, n: int) -> dict[str, Any]:
    """The measured waits, per step (us) and their mean."""
    per_step = measured.groupby("step", sort=True)[["wall_ns", "backlog_ns", "idle_ns"]].sum()
    return {
        "measured_wait_us_mean": us(float(measured["wall_ns"].sum()) / n),
        "measured_idle_us_mean": us(float(measured["idle_ns"].sum()) / n),
        "measured_waits": [
            {
                "step": int(step),
                "wait_us": us(float(r.wall_ns)),
                "device_backlog_us": us(float(r.backlog_ns)),
                "idle_us": us(float(r.idle_ns)),
            }
            for step, r in per_step.iterrows()
        ],
    }


def _loader_advice(workers: bool | None, default: str) -> str:
    """The DataLoader settings to change, by whether the loader already runs worker
    processes (torch's iterator class says); ``default`` when unknown."""
    if workers is False:
        return (
            "The loader runs in the training process (num_workers=0): load the next batches "
            "in worker processes while the device computes, DataLoader(num_workers=N (a few "
            "per device, up to the CPU cores), pin_memory=True, persistent_workers=True, "
            "prefetch_factor=2); move decoding and augmentation out of the step."
        )
    if workers:
        return (
            "The loader's worker processes do not keep up: raise num_workers and "
            "prefetch_factor (batches each worker loads ahead), keep persistent_workers=True "
            "(no worker restart each epoch) and pin_memory=True; make __getitem__ cheaper "
            "(decode once, cache, lighter augmentation); check disk I/O."
        )
    return default


def image_batches(data: RankData) -> dict[str, Any]:
    """What the host-to-device copies say about the batches: the most copied 4-D shape with 1
    or 3 channels and sides of at least 32 (an image batch, N x C x H x W), whether DVPP tasks
    ran, and whether the device has DVPP engines."""
    t = data.tasks
    h2d = t[(t["kind"] == "memcpy") & (t["copy_kind"] == "HOST_TO_DEVICE")]
    shapes = h2d["output_shapes"].astype(str).replace("nan", "")
    if "host_op_id" in h2d and "input_shapes" in data.all_host:
        # a recorded copy task carries no shapes: its host op (aten::copy_, aten::_to_copy) does
        ops = data.all_host.drop_duplicates("event_id").set_index("event_id")["input_shapes"]
        of_op = ops.reindex(h2d["host_op_id"].to_numpy()).astype(str).replace("nan", "")
        shapes = shapes.where(shapes != "", of_op.to_numpy())
    counts = shapes[shapes != ""].value_counts()
    image = ""
    for shape in counts.index:
        dims = [int(d) for d in str(shape).split(";")[0].split(",") if d.strip().isdigit()]
        if len(dims) == 4 and dims[1] in (1, 3) and min(dims[2:]) >= 32:
            image = "x".join(map(str, dims))
            break
    engines = dvpp.dvpp_spec(data.spec) if data.spec is not None else dvpp.DvppSpec()
    return {
        "image_batch": image,
        "dvpp_tasks": int((data.all_tasks["kind"] == "dvpp").sum()),
        "device_has_dvpp": bool(engines.jpegd or engines.has_vpc),
    }


def _dvpp_advice(evidence: dict[str, Any]) -> str:
    """Where the batches are images and the loader does not use DVPP: say whether the npu
    image backend pays off, with its modelled gain (:mod:`msprof_py.analyzers.dvpp_gain`)."""
    if not evidence["image_batch"] or evidence["dvpp_tasks"]:
        return ""
    batch = evidence["image_batch"]
    if not evidence["device_has_dvpp"]:
        return (
            f" The batches are images ({batch}), but this device has no DVPP decoder "
            "modelled: decoding stays on the host."
        )
    m = evidence.get("dvpp_model") or {}
    if "why" in m:
        return f" The batches are images ({batch}), but DVPP does not take them: {m['why']}."
    cost = (
        f"DVPP would take {m['dvpp_us']:.1f} us per batch (JPEGD {m['jpegd_us']:.1f} us + VPC "
        f"{m['vpc_us']:.1f} us), {m['not_hidden_us']:.1f} us of it past the device work "
        "queued at the wait"
    )
    if m["gain_us"] <= 0:
        return (
            f" The batches are images ({batch}): {cost}, no less than the "
            f"{m['wait_removed_us']:.1f} us idle it would remove: no gain modelled from the "
            "npu image backend; keep decoding on the CPU."
        )
    return (
        f" The batches are images ({batch}): decoding and resize/crop can run on the "
        "device's DVPP engines instead of the loader's CPU (import torchvision_npu; "
        'torchvision_npu.set_image_backend("npu"); decode_jpeg(data, device="npu") and '
        f"torchvision_npu.transforms): {cost}, a modelled gain of {m['gain_us']:.1f} us per "
        f"step of the {m['wait_removed_us']:.1f} us idle removed (assuming "
        f"{dvpp_gain.ASSUMPTIONS})."
    )
