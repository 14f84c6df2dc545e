"""Graph mode in a stored profile: which tasks and host ops belong to a compiled graph.

A compiled graph's call is one host op named ``npu_graph::<graph>`` (the backend opens it
for the whole call; the graph's nodes open none), its launch is the ``ModelExecute <graph>``
host launch inside it, and every task that launch submitted has that op as its
``host_op_id``. :func:`task_graphs` and :func:`op_graphs` name the graph of each task and
host op ("" outside graphs); the plans themselves are in the profile's ``graphs``,
``graph_passes`` and ``graph_kernels`` tables (:mod:`msprof_py.profile.schema`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: prefix of the host op of a graph call (the rest is the graph's name)
GRAPH_OP_PREFIX = "npu_graph::"
#: prefix of a graph's host launch
GRAPH_LAUNCH_PREFIX = "ModelExecute "
#: prefix of a graph's compile span (an ``api`` host event)
COMPILE_PREFIX = "compile "


def op_graphs(names: pd.Series) -> np.ndarray:
    """The graph each host op name belongs to: ``npu_graph::g`` -> ``g``, else ""."""
    text = names.astype(object).fillna("").astype(str)
    graph = text.str.startswith(GRAPH_OP_PREFIX).to_numpy()
    out = np.full(len(text), "", dtype=object)
    out[graph] = text[graph].str.slice(len(GRAPH_OP_PREFIX)).to_numpy(dtype=object)
    return out


def task_graphs(tasks: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """The graph each task of ``tasks`` was launched by ("" for eager tasks), through its
    ``host_op_id`` and the ``npu_graph::`` host ops of ``host`` (same rank)."""
    out = np.full(len(tasks), "", dtype=object)
    if not len(tasks) or not len(host):
        return out
    ops = host[host["kind"] == "op"]
    graphs = op_graphs(ops["name"])
    inside = graphs != ""
    if not inside.any():
        return out
    by_id = pd.Series(graphs[inside], index=ops["event_id"].to_numpy()[inside])
    by_id = by_id[~by_id.index.duplicated()]
    found = pd.Series(tasks["host_op_id"].to_numpy()).map(by_id)
    return found.fillna("").to_numpy(dtype=object)
