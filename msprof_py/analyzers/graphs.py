"""Graph mode in the analysis: compiled vs eager parts of the step, the graphs, their passes.

A compiled graph's tasks belong to its ``npu_graph::<graph>`` host op
(:mod:`msprof_py.profile.graphs`). :func:`split` divides the analysed steps' device time
(kernels and other tasks) and host dispatch (host op time) between graphs and eager code;
:func:`per_graph` describes each graph by its last plan (kernels, fused kernels, workspace
reuse, streams, compile time, recompiles of its code object) and what it ran in the analysed
steps; :func:`pass_outcomes` summarises what chosen passes did, for the fusion findings;
:func:`recompiles` counts compiles per code object for the recompile rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import ampplan
from msprof_py.analyzers.context import RankData, op_self_ns
from msprof_py.profile.graphs import op_graphs, task_graphs

GRAPH_COLUMNS = [
    "rank",
    "graph",
    "mode",
    "dynamic",
    "plans",
    "op_nodes",
    "eager_kernels",
    "kernels",
    "fused_kernels",
    "workspace_bytes",
    "no_reuse_bytes",
    "reuse_ratio",
    "live_peak_bytes",
    "streams",
    "events",
    "compile_ns",
    "code",
    "compiles",
    "calls_per_step",
    "device_ns_per_step",
    "host_ns_per_step",
]
PASS_COLUMNS = ["rank", "graph", "pass_name", "hit", "count", "reason", "example"]


def compiled(data: RankData) -> bool:
    """The recording compiled graphs (graph mode ran)."""
    return len(data.graphs) > 0


def task_graph(data: RankData) -> np.ndarray:
    """The graph of each analysed task ("" for eager tasks), cached."""
    found = data.cache.get("task_graph")
    if found is None:
        found = data.cache["task_graph"] = (
            task_graphs(data.tasks, data.host) if compiled(data) else np.full(len(data.tasks), "")
        )
    return found


def op_graph(data: RankData) -> np.ndarray:
    """The graph of each analysed host op ("" for eager ops), cached."""
    found = data.cache.get("op_graph")
    if found is None:
        found = data.cache["op_graph"] = op_graphs(data.host_ops["name"])
    return found


def model_ops(data: RankData) -> np.ndarray:
    """Which analysed host ops ``torch.compile(model)`` would put in graphs: the eager ops
    run inside a module (the model's forward) or on another thread than the loop's
    (autograd's backward), not those of the optimizer step, the loss or the input copies,
    which stay eager. All False when no op ran in a module (no model to compile), cached."""
    found = data.cache.get("model_ops")
    if found is not None:
        return found
    ops = data.host_ops
    in_module = ops["module"].astype(str).to_numpy() != ""
    threads = ops.loc[in_module, "thread"]
    if threads.empty:
        found = np.zeros(len(ops), bool)
    else:
        backward = ops["thread"].to_numpy() != threads.mode().iloc[0]
        eager = op_graph(data) == ""
        found = eager & ~ampplan.in_optimizer(data, ops) & (in_module | backward)
    data.cache["model_ops"] = found
    return found


def split(data: RankData) -> dict[str, Any]:
    """Device time (busy time of the tasks, summed) and host dispatch (host op time) of the
    analysed steps in compiled graphs and outside them, per step, with their shares."""
    n = data.n_steps
    inside = task_graph(data) != ""
    dur = data.tasks["duration_ns"].to_numpy(dtype=float)
    kernel = data.kernel_mask
    ops = data.host_ops
    op_in = op_graph(data) != ""
    host_ns = op_self_ns(ops).astype(float)  # nested ops (imported traces) counted once
    device_in, device_out = float(dur[inside].sum()), float(dur[~inside].sum())
    host_in, host_out = float(host_ns[op_in].sum()), float(host_ns[~op_in].sum())
    host_opt = float(host_ns[~op_in & ampplan.in_optimizer(data, ops)].sum())
    host_model = float(host_ns[model_ops(data)].sum())

    def share(part: float, whole: float) -> float:
        return part / whole if whole > 0 else 0.0

    return {
        "rank": data.rank,
        "compiled": compiled(data),
        "graphs": int(data.graphs["graph"].nunique()) if compiled(data) else 0,
        "graph_calls_per_step": float(op_in.sum()) / n,
        "graph_device_ns_per_step": device_in / n,
        "eager_device_ns_per_step": device_out / n,
        "graph_device_share": share(device_in, device_in + device_out),
        "graph_kernels_per_step": float((inside & kernel).sum()) / n,
        "eager_kernels_per_step": float((~inside & kernel).sum()) / n,
        "graph_host_ns_per_step": host_in / n,
        "eager_host_ns_per_step": host_out / n,
        "graph_host_share": share(host_in, host_in + host_out),
        "eager_ops_per_step": float((~op_in).sum()) / n,
        # eager host dispatch inside Optimizer.step ranges (what compiling the model leaves)
        "optimizer_host_ns_per_step": host_opt / n,
        "optimizer_host_share": share(host_opt, host_out),
        # eager host dispatch a compile of the model would put in graphs (:func:`model_ops`)
        "model_host_ns_per_step": host_model / n,
        "model_host_share": share(host_model, host_out),
    }


def _plans(data: RankData) -> pd.DataFrame:
    g = data.graphs
    g = g.assign(graph=g["graph"].astype(str), code=g["code"].astype(str))
    return g.sort_values("plan_id", kind="stable")


def per_graph(data: RankData) -> pd.DataFrame:
    """One row per graph (:data:`GRAPH_COLUMNS`): its last plan, how many plans it had, and
    its calls, device time and host time per analysed step."""
    if not compiled(data):
        return pd.DataFrame(columns=GRAPH_COLUMNS)
    plans = _plans(data)
    last = plans.groupby("graph", sort=False).tail(1).set_index("graph")
    count = plans.groupby("graph", sort=False).size()
    compile_ns = plans.groupby("graph", sort=False)["compile_ns"].sum()
    n = data.n_steps
    names = task_graph(data)
    dur = pd.Series(data.tasks["duration_ns"].to_numpy(dtype=float)).groupby(names).sum()
    ops = data.host_ops
    op_names = op_graph(data)
    host = pd.Series((ops["end_ns"] - ops["start_ns"]).to_numpy(dtype=float))
    host_by = host.groupby(op_names).sum()
    calls = pd.Series(op_names).value_counts()
    rows = []
    for graph, r in last.iterrows():
        rows.append(
            {
                "rank": data.rank,
                "graph": graph,
                "mode": str(r["mode"]),
                "dynamic": bool(r["dynamic"]),
                "plans": int(count[graph]),
                "op_nodes": int(r["op_nodes"]),
                "eager_kernels": int(r["eager_kernels"]),
                "kernels": int(r["kernels"]),
                "fused_kernels": int(r["fused_kernels"]),
                "workspace_bytes": int(r["workspace_bytes"]),
                "no_reuse_bytes": int(r["no_reuse_bytes"]),
                "reuse_ratio": float(r["reuse_ratio"]),
                "live_peak_bytes": int(r["live_peak_bytes"]),
                "streams": int(r["streams"]),
                "events": int(r["events"]),
                "compile_ns": int(compile_ns[graph]),
                "code": str(r["code"]),
                "compiles": int(r["compiles"]),
                "calls_per_step": float(calls.get(graph, 0)) / n,
                "device_ns_per_step": float(dur.get(graph, 0.0)) / n,
                "host_ns_per_step": float(host_by.get(graph, 0.0)) / n,
            }
        )
    return pd.DataFrame(rows, columns=GRAPH_COLUMNS)


def _last_passes(data: RankData) -> pd.DataFrame:
    """The pass records of each graph's last plan."""
    if not compiled(data) or data.graph_passes.empty:
        return pd.DataFrame(columns=["graph", "pass_name", "nodes", "hit", "reason"])
    last = _plans(data).groupby("graph", sort=False)["plan_id"].max()
    p = data.graph_passes
    p = p[p["plan_id"].isin(last.to_numpy())]
    return pd.DataFrame(
        {
            "graph": p["graph"].astype(str).to_numpy(),
            "pass_name": p["pass_name"].astype(str).to_numpy(),
            "nodes": p["nodes"].astype(str).to_numpy(),
            "hit": p["hit"].to_numpy(dtype=bool),
            "reason": p["reason"].astype(str).to_numpy(),
        }
    )


def passes(data: RankData) -> pd.DataFrame:
    """What each pass did in each graph's last plan (:data:`PASS_COLUMNS`): hits and misses
    counted per reason, with one example of the matched nodes."""
    p = _last_passes(data)
    if p.empty:
        return pd.DataFrame(columns=PASS_COLUMNS)
    g = p.groupby(["graph", "pass_name", "hit", "reason"], sort=False)
    out = g.agg(count=("nodes", "size"), example=("nodes", "first")).reset_index()
    out.insert(0, "rank", data.rank)
    return out[PASS_COLUMNS]


def pass_outcomes(data: RankData, names: list[str]) -> dict[str, Any]:
    """What the passes ``names`` did in the graphs (last plans): hits, misses by reason,
    and one sentence saying so ("" when graph mode did not run or no such pass matched)."""
    p = _last_passes(data)
    p = p[p["pass_name"].isin(names)] if len(p) else p
    if p.empty:
        return {"hits": 0, "misses": 0, "records": [], "sentence": ""}
    parts = []
    records = []
    for name in names:
        mine = p[p["pass_name"] == name]
        if mine.empty:
            continue
        hits = int(mine["hit"].sum())
        if hits:
            parts.append(f"{name} fired on {hits} match{'es' if hits != 1 else ''}")
        for reason, rows in mine[~mine["hit"]].groupby("reason", sort=False):
            parts.append(
                f"{name} missed {len(rows)}x: {reason}"
                if len(rows) > 1
                else f"{name} missed: {reason}"
            )
            records.append(
                {
                    "pass_name": name,
                    "hit": False,
                    "count": len(rows),
                    "reason": reason,
                    "nodes": rows["nodes"].iloc[0],
                }
            )
        if hits:
            records.append(
                {
                    "pass_name": name,
                    "hit": True,
                    "count": hits,
                    "reason": "",
                    "nodes": mine.loc[mine["hit"], "nodes"].iloc[0],
                }
            )
    sentence = "In the compiled graphs: " + "; ".join(parts) + "." if parts else ""
    return {
        "hits": int(p["hit"].sum()),
        "misses": int((~p["hit"]).sum()),
        "records": records,
        "sentence": sentence,
    }


def recompiles(data: RankData) -> pd.DataFrame:
    """Per Dynamo code object: compiles seen (the highest count its graphs recorded), the
    limit, the graphs compiled for it and when the first and last were planned."""
    cols = ["code", "compiles", "limit", "graphs", "first_ns", "last_ns", "example"]
    if not compiled(data):
        return pd.DataFrame(columns=cols)
    plans = _plans(data)
    plans = plans[(plans["code"] != "") & (plans["compiles"] > 0)]
    if plans.empty:
        return pd.DataFrame(columns=cols)
    g = plans.groupby("code", sort=False)
    out = g.agg(
        compiles=("compiles", "max"),
        limit=("recompile_limit", "max"),
        graphs=("graph", "nunique"),
        first_ns=("time_ns", "min"),
        last_ns=("time_ns", "max"),
        example=("graph", "last"),
    ).reset_index()
    return out.sort_values("compiles", ascending=False, kind="stable")[cols]
