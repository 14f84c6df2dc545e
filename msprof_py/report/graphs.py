"""The report's graph-mode section: the compiled graphs of the run, what the passes did to
each, its memory plan and streams, and the split of device time between compiled graphs and
eager code.

Built from the analysis's ``graphs`` section (:mod:`msprof_py.analyzers.graphs`: the split,
one row per graph by its last plan, the pass outcomes) and the profile's ``graph_kernels``
table (the last plan's launch list: which nodes its kernels compute, which pass fused them).
Every table is a :func:`msprof_py.report.tables.table` (formatted cells, sortable). A run
that compiled nothing has no section (:func:`graph_section` returns None). No torch here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from msprof_py.profile import Profile
from msprof_py.report import tables

#: rows of the pass table in the report (hits and misses grouped by reason)
PASS_ROWS = 200

#: the graph table's columns, in order, and their headers (time columns: the table's own
#: header, with its unit)
GRAPH_COLUMNS = {
    "rank": "Rank",
    "graph": "Graph",
    "mode": "Mode",
    "op_nodes": "Op nodes (before passes)",
    "nodes_after": "Nodes in kernels (after passes)",
    "eager_kernels": "Kernels eager",
    "kernels": "Kernels launched",
    "fused_kernels": "Fused kernels",
    "fused_by_pass": "Fused kernels by pass",
    "hits": "Pass hits",
    "misses": "Pass misses",
    "workspace_bytes": "Workspace (reuse)",
    "no_reuse_bytes": "Workspace (no reuse)",
    "reuse_ratio": "Reuse ratio",
    "streams": "Streams",
    "events": "Events",
    "calls_per_step": "Calls per step",
}
GRAPH_ORDER = [*GRAPH_COLUMNS, "compile_ns", "device_time_per_step_ns"]
PASS_COLUMNS = {
    "rank": "Rank",
    "graph": "Graph",
    "pass_name": "Pass",
    "outcome": "Outcome",
    "count": "Count",
    "reason": "Reason (miss) or note (hit)",
    "example": "Example nodes",
}
SPLIT_COLUMNS = {
    "rank": "Rank",
    "part": "Part",
    "share_of_device": "Share of device time",
    "kernels_per_step": "Kernels per step",
    "host_share": "Share of host dispatch",
}
SPLIT_ORDER = [
    "rank",
    "part",
    "device_time_per_step_ns",
    "share_of_device",
    "kernels_per_step",
    "host_dispatch_per_step_ns",
    "host_share",
]


def _last_kernels(profile: Profile) -> pd.DataFrame:
    """The ``graph_kernels`` rows of each graph's last plan (per rank)."""
    plans, kernels = profile.graphs, profile.graph_kernels
    if plans.empty or kernels.empty:
        return kernels.iloc[0:0]
    keys = ["rank", "graph"] if "rank" in plans else ["graph"]
    last = plans.sort_values("plan_id", kind="stable").groupby(keys, sort=False).tail(1)
    pick = [*keys[:-1], "plan_id"]
    return kernels.merge(last[pick], on=pick, how="inner")


def _kernel_columns(profile: Profile) -> pd.DataFrame:
    """Per (rank, graph): nodes its kernels compute and fused kernels by pass (text)."""
    k = _last_kernels(profile)
    cols = ["rank", "graph", "nodes_after", "fused_by_pass"]
    if k.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    rank_of = k["rank"] if "rank" in k else pd.Series(0, index=k.index)
    for (rank, graph), g in k.groupby([rank_of, k["graph"].astype(str)], sort=False):
        members = {m for text in g["members"].astype(str) for m in text.split(";") if m}
        fused = g[g["pass_name"].astype(str) != ""]["pass_name"].astype(str).value_counts()
        by_pass = ", ".join(f"{name} {n}" for name, n in sorted(fused.items()))
        rows.append(
            {
                "rank": int(rank),
                "graph": graph,
                "nodes_after": len(members),
                "fused_by_pass": by_pass,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def graph_frame(profile: Profile, a: Any) -> pd.DataFrame:
    """One row per graph (:data:`GRAPH_ORDER`): the analysis's description of its last
    plan, the nodes its kernels compute, fused kernels by pass and pass hits / misses."""
    per = a.graphs.get("graphs")
    if per is None or per.empty:
        return pd.DataFrame(columns=GRAPH_ORDER)
    per = per.assign(graph=per["graph"].astype(str), rank=per["rank"].astype(int))
    per = per.rename(columns={"device_ns_per_step": "device_time_per_step_ns"})
    per = per.merge(_kernel_columns(profile), on=["rank", "graph"], how="left")
    passes = a.graphs.get("passes")
    if passes is not None and len(passes):
        p = passes.assign(graph=passes["graph"].astype(str), rank=passes["rank"].astype(int))
        counts = p.pivot_table(
            index=["rank", "graph"], columns="hit", values="count", aggfunc="sum", fill_value=0
        )
        counts = counts.reindex(columns=[True, False], fill_value=0)
        counts.columns = ["hits", "misses"]
        per = per.merge(counts.reset_index(), on=["rank", "graph"], how="left")
    for col in ("hits", "misses", "nodes_after"):
        per[col] = per[col].fillna(0).astype(int) if col in per else 0
    per["fused_by_pass"] = per.get("fused_by_pass", pd.Series("", index=per.index)).fillna("")
    return per[GRAPH_ORDER]


def pass_frame(a: Any) -> pd.DataFrame:
    """What each pass did per graph (:data:`PASS_COLUMNS`): misses first, then hits."""
    passes = a.graphs.get("passes")
    if passes is None or passes.empty:
        return pd.DataFrame(columns=list(PASS_COLUMNS))
    p = passes.assign(outcome=passes["hit"].map({True: "hit", False: "miss"}))
    p["example"] = p["example"].astype(str).str.replace(";", ", ")
    p = p.sort_values(["rank", "graph", "hit", "pass_name"], kind="stable")
    return p[list(PASS_COLUMNS)]


def split_frame(a: Any) -> pd.DataFrame:
    """Compiled vs eager device time and host dispatch per analysed step, two rows a rank."""
    rows = []
    for s in a.graphs.get("summary") or []:
        if not s.get("compiled"):
            continue
        dev_share, host_share = s["graph_device_share"], s["graph_host_share"]
        for part, key, share, hshare in (
            ("compiled graphs", "graph", dev_share, host_share),
            ("eager", "eager", 1.0 - dev_share, 1.0 - host_share),
        ):
            both = s["graph_device_ns_per_step"] + s["eager_device_ns_per_step"]
            hosts = s["graph_host_ns_per_step"] + s["eager_host_ns_per_step"]
            rows.append(
                {
                    "rank": s["rank"],
                    "part": part,
                    "device_time_per_step_ns": s[f"{key}_device_ns_per_step"],
                    "share_of_device": share if both > 0 else 0.0,
                    "kernels_per_step": s[f"{key}_kernels_per_step"],
                    "host_dispatch_per_step_ns": s[f"{key}_host_ns_per_step"],
                    "host_share": hshare if hosts > 0 else 0.0,
                }
            )
    return pd.DataFrame(rows, columns=SPLIT_ORDER)


def graph_section(profile: Profile, a: Any) -> dict[str, Any] | None:
    """The graph-mode section's tables (``split``, ``graphs``, ``passes``), or None when the
    run compiled no graph (or the analysis predates graph mode)."""
    info = getattr(a, "graphs", None)
    if not isinstance(info, dict):
        return None
    graphs = graph_frame(profile, a)
    if graphs.empty:
        return None
    return {
        "split": tables.table(split_frame(a), headers=SPLIT_COLUMNS),
        "graphs": tables.table(graphs, headers=GRAPH_COLUMNS, limit=100),
        "passes": tables.table(pass_frame(a), headers=PASS_COLUMNS, limit=PASS_ROWS),
    }
