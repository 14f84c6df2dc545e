"""GE-like ``fusion_result.json``: per compiled graph, what every fusion pass matched and did.

GE writes ``fusion_result.json`` (TorchAir: ``ge_config.export_compile_stat``) with, per
graph, each fusion pass's match and effect counts. msprof-py writes the same kind of file for
the graphs of a graph-mode run, from the profile's ``graphs`` and ``graph_passes`` tables:
a list with one object per graph plan::

    {"graph": "graph0_forward", "plan_id": 0, "mode": "max-autotune",
     "session_and_graph_id": "0_0",
     "graph_fusion": {"ZBNupdateReluV2Conv2DBNreducePass":
                      {"match_times": "1", "effect_times": "1"}, ...},
     "ub_fusion": {},
     "passes": [{"pass_name": ..., "nodes": [...], "hit": true, "reason": ""}, ...]}

``graph_fusion`` counts every pass record (cleanup passes included); ``ub_fusion`` is empty
(the simulator's fusions are all graph fusions); ``passes`` (msprof-py's own key) lists every
pattern tried: the matched nodes, hit or miss, and the reason of a miss.

Where it is written: ``<rank>_ascend_pt/fusion_result.json`` by ``msprof`` when the run
compiled graphs (one per rank), and ``ASCEND_PROFILER_OUTPUT/fusion_result.json`` by the
Ascend export. Runs without graphs get no file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from msprof_py.profile import Profile
from msprof_py.profile.atomic import create_atomically

FILE = "fusion_result.json"


def _plan_entry(
    order: int, plan_id: int, graph: str, mode: str, passes: pd.DataFrame
) -> dict[str, Any]:
    fusion: dict[str, dict[str, str]] = {}
    listed = []
    for p in passes.itertuples(index=False):
        counts = fusion.setdefault(str(p.pass_name), {"match_times": 0, "effect_times": 0})
        counts["match_times"] += 1
        counts["effect_times"] += int(bool(p.hit))
        nodes = [n for n in str(p.nodes).split(";") if n]
        listed.append(
            {
                "pass_name": str(p.pass_name),
                "nodes": nodes,
                "hit": bool(p.hit),
                "reason": str(p.reason),
            }
        )
    return {
        "graph": graph,
        "plan_id": plan_id,
        "mode": mode,
        "session_and_graph_id": f"0_{order}",
        "graph_fusion": {
            name: {k: str(v) for k, v in counts.items()} for name, counts in fusion.items()
        },
        "ub_fusion": {},
        "passes": listed,
    }


def fusion_result(graphs: pd.DataFrame, passes: pd.DataFrame) -> list[dict[str, Any]]:
    """The document for one rank's ``graphs`` and ``graph_passes`` rows (plan order)."""
    graphs = graphs.sort_values("plan_id", kind="stable")
    if len(passes):
        passes = passes.sort_values(["plan_id", "index"], kind="stable")
        by_plan = dict(tuple(passes.groupby("plan_id", sort=False)))
    else:
        by_plan = {}
    empty = passes.iloc[0:0]
    return [
        _plan_entry(i, int(g.plan_id), str(g.graph), str(g.mode), by_plan.get(g.plan_id, empty))
        for i, g in enumerate(graphs.itertuples(index=False))
    ]


def plan_frames(plans: list[tuple[int, str, str, tuple]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``graphs`` and ``graph_passes`` frames (the columns :func:`fusion_result` reads) from
    ``(plan_id, graph, mode, passes)`` tuples, each pass with ``pass_name``, ``nodes`` (a
    tuple), ``hit`` and ``reason`` (what the recorder keeps of each plan)."""
    graphs = pd.DataFrame(
        [(plan_id, graph, mode) for plan_id, graph, mode, _ in plans],
        columns=["plan_id", "graph", "mode"],
    )
    passes = pd.DataFrame(
        [
            (plan_id, i, p.pass_name, ";".join(p.nodes), bool(p.hit), p.reason)
            for plan_id, _, _, records in plans
            for i, p in enumerate(records)
        ],
        columns=["plan_id", "index", "pass_name", "nodes", "hit", "reason"],
    )
    return graphs, passes


def write_document(doc: list[dict[str, Any]], path: Path) -> None:
    """Write a fusion_result document to ``path`` atomically (never over an existing file)."""
    with create_atomically(Path(path), "x", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)


def write_fusion_result(profile: Profile, path: Path) -> bool:
    """Write ``profile``'s (one rank) ``fusion_result.json`` to ``path`` (never over an
    existing file); False, and nothing written, when the profile holds no graph."""
    graphs = profile.graphs
    if graphs.empty:
        return False
    write_document(fusion_result(graphs, profile.graph_passes), path)
    return True
