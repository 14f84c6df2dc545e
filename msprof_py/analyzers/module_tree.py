"""The module tree: device time per ``nn.Module`` instance, self and total, forward and backward.

Every analysed host op belongs to one module instance path (``layers.3.attn.proj``, the
recorder's ``module_path``; ``""`` is the root: the top-level module and whatever ran outside
any module). An op's device time is the sum of its work tasks' durations (kernels, copies,
memsets, collectives launched by it: ``tasks.host_op_id``).

**Phases.** A backward op runs in an autograd node, and the recorder stores the node's
sequence number; a forward op stores the number its grad_fn was given plus one (the counter
after the node was created: see :mod:`msprof_py.analyzers.attention`). So the backward ops of
node ``q`` are the ops recorded with ``q`` that start after the first op of the step recorded
with ``q + 1`` (the forward op that created the node) ended; they are **backward** and belong
to that forward op's module. Other ops that ran inside a module are **forward**; the rest
(optimizer, ops outside any module, backward work of no node such as gradient accumulation)
are **other**, in the root's self time.

**Rows.** One per module path and per ancestor of one (``layers`` above ``layers.3``, even
when the container never ran a forward of its own), in execution order (depth first, children
by their first op). ``self_*`` covers the module's own ops, ``total_*`` its subtree; the self
times of all rows sum to the root's total. Times and counts are means per analysed step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import RankData, share_of
from msprof_py.analyzers.ops import WORK_KINDS

FORWARD, BACKWARD, OTHER = "forward", "backward", "other"
#: the separator of instance paths (as the recorder joins them: ``layers.3.attn``)
INSTANCE_SEP = "."
#: the root row's label when no op ran inside a module
NO_MODULE = "(no module)"
TREE_COLUMNS = [
    "rank",
    "module",
    "name",
    "depth",
    "class_name",
    "self_forward_ns",
    "self_backward_ns",
    "self_other_ns",
    "self_ns",
    "total_forward_ns",
    "total_backward_ns",
    "total_ns",
    "share_of_device",
    "ops_per_step",
    "kernels_per_step",
    "total_ops_per_step",
    "total_kernels_per_step",
]
#: per host op (:func:`attribution`)
ATTRIBUTION_COLUMNS = [
    "event_id",
    "name",
    "path",
    "class_path",
    "phase",
    "forward",
    "device_ns",
    "kernels",
]


def _text(df: pd.DataFrame, column: str) -> np.ndarray:
    if column not in df:
        return np.full(len(df), "", dtype=object)
    return df[column].astype(object).fillna("").astype(str).to_numpy()


def attribution(data: RankData) -> pd.DataFrame:
    """Per analysed host op (:data:`ATTRIBUTION_COLUMNS`, in the host ops' order): the module
    it counts for, its phase, its device time (ns, over its work tasks) and kernels (cached)."""
    cached = data.cache.get("module_attribution")
    if cached is not None:
        return cached
    ops = data.host_ops
    ids = ops["event_id"].to_numpy(dtype=np.int64)
    paths = _text(ops, "module_path")
    classes = _text(ops, "module")
    phase = np.where(classes != "", FORWARD, OTHER).astype(object)
    forward = np.full(len(ops), -1, dtype=np.int64)
    if "sequence" in ops and len(ops):
        rows, fwd = _backward(ops)
        phase[rows] = BACKWARD
        paths[rows] = paths[fwd]
        classes[rows] = classes[fwd]
        forward[rows] = ids[fwd]
    tasks = data.tasks
    work = tasks.loc[
        tasks["kind"].isin(WORK_KINDS) & (tasks["host_op_id"] >= 0),
        ["host_op_id", "kind", "duration_ns"],
    ]
    by_op = work.groupby("host_op_id", sort=False)
    device = by_op["duration_ns"].sum().reindex(ids).fillna(0).to_numpy(dtype=np.int64)
    kernels = (
        (work["kind"] == "kernel")
        .groupby(work["host_op_id"], sort=False)
        .sum()
        .reindex(ids)
        .fillna(0)
        .to_numpy(dtype=np.int64)
    )
    out = pd.DataFrame(
        {
            "event_id": ids,
            "name": _text(ops, "name"),
            "path": paths,
            "class_path": classes,
            "phase": phase,
            "forward": forward,
            "device_ns": device,
            "kernels": kernels,
        },
        index=ops.index,
    )
    data.cache["module_attribution"] = out
    return out


def _backward(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the backward ops in ``ops`` and those of their forward ops."""
    seq = ops["sequence"].to_numpy(dtype=np.int64)
    step = ops["step"].to_numpy(dtype=np.int64)
    start = ops["start_ns"].to_numpy(dtype=np.int64)
    end = ops["end_ns"].to_numpy(dtype=np.int64)
    numbered = np.flatnonzero(seq >= 0)
    if not numbered.size:
        return numbered, numbered
    # the first op of each (step, number): the forward op that created node number - 1
    order = numbered[np.lexsort((start[numbered], seq[numbered], step[numbered]))]
    keys = pd.MultiIndex.from_arrays([step[order], seq[order]])
    first = ~keys.duplicated(keep="first")
    creators = pd.Series(order[first], index=keys[first])
    wanted = pd.MultiIndex.from_arrays([step[numbered], seq[numbered] + 1])
    found = creators.reindex(wanted).to_numpy(dtype=float)
    has = ~np.isnan(found)
    rows, fwd = numbered[has], found[has].astype(np.int64)
    after = start[rows] >= end[fwd]
    return rows[after], fwd[after]


def _ancestors(path: str) -> list[str]:
    """``a.b.c`` -> ``["", "a", "a.b", "a.b.c"]``."""
    if not path:
        return [""]
    parts = path.split(INSTANCE_SEP)
    return ["", *(INSTANCE_SEP.join(parts[: i + 1]) for i in range(len(parts)))]


def root_label(classes: np.ndarray) -> str:
    """The root row's name: the top-level module classes the ops ran under."""
    tops = pd.unique(pd.Series([c.split("/", 1)[0] for c in np.unique(classes) if c]))
    return ", ".join(sorted(tops)) if len(tops) else NO_MODULE


def tree(data: RankData) -> pd.DataFrame:
    """The module tree of the analysed steps (:data:`TREE_COLUMNS`, see the module doc)."""
    a = attribution(data)
    if a.empty:
        return pd.DataFrame(columns=TREE_COLUMNS)
    n = data.n_steps
    mine = a.assign(
        fwd=np.where(a["phase"] == FORWARD, a["device_ns"], 0),
        bwd=np.where(a["phase"] == BACKWARD, a["device_ns"], 0),
        oth=np.where(a["phase"] == OTHER, a["device_ns"], 0),
    )
    g = mine.groupby("path", sort=False)
    own = g.agg(
        fwd=("fwd", "sum"),
        bwd=("bwd", "sum"),
        oth=("oth", "sum"),
        ops=("event_id", "size"),
        kernels=("kernels", "sum"),
        first=("event_id", "min"),
    )
    # a module's class: the class path its own forward ops ran under (the most common)
    fwd_ops = mine[mine["phase"] == FORWARD]
    cls = (
        fwd_ops.groupby(["path", "class_path"], sort=False).size().reset_index(name="n")
        if len(fwd_ops)
        else pd.DataFrame(columns=["path", "class_path", "n"])
    )
    cls = cls.sort_values("n", ascending=False, kind="stable").drop_duplicates("path")
    class_of = _ancestor_classes(mine[["path", "class_path"]].drop_duplicates())
    class_of.update(zip(cls["path"], cls["class_path"], strict=True))
    every = sorted({p for path in own.index for p in _ancestors(str(path))})
    own = own.reindex(every).fillna(0)
    # subtree sums: a path's descendants are the sorted paths in [path + ".", path + "/")
    names = np.array(every, dtype=object)
    summed = ("fwd", "bwd", "oth", "ops", "kernels")
    values = {c: own[c].to_numpy(dtype=float) for c in summed}
    sums = {c: np.concatenate([[0.0], np.cumsum(values[c])]) for c in summed}
    firsts = own["first"].to_numpy(dtype=float)
    firsts = np.where(own["ops"].to_numpy() > 0, firsts, np.inf)
    rows = []
    for i, path in enumerate(every):
        if path:
            lo = int(np.searchsorted(names, path + INSTANCE_SEP, side="left"))
            hi = int(np.searchsorted(names, path + "/", side="left"))
        else:
            lo, hi = 1, len(every)  # the root ("") sorts first
        total = {c: values[c][i] + sums[c][hi] - sums[c][lo] for c in summed}
        first = min(firsts[i], float(np.min(firsts[lo:hi]))) if hi > lo else firsts[i]
        rows.append((path, total, float(first)))
    order = _depth_first([(p, f) for p, _, f in rows])
    root_total = rows[0][1]["fwd"] + rows[0][1]["bwd"] + rows[0][1]["oth"]
    label = root_label(a["class_path"].to_numpy())
    out = []
    for i in order:
        path, total = rows[i][0], rows[i][1]
        self_ = own.iloc[i]
        cp = class_of.get(path, "")
        t = total["fwd"] + total["bwd"] + total["oth"]
        out.append(
            {
                "rank": data.rank,
                "module": path,
                "name": path.rsplit(INSTANCE_SEP, 1)[-1] if path else label,
                "depth": path.count(INSTANCE_SEP) + 1 if path else 0,
                "class_name": cp.rsplit("/", 1)[-1] if cp else "",
                "self_forward_ns": self_["fwd"] / n,
                "self_backward_ns": self_["bwd"] / n,
                "self_other_ns": self_["oth"] / n,
                "self_ns": (self_["fwd"] + self_["bwd"] + self_["oth"]) / n,
                "total_forward_ns": total["fwd"] / n,
                "total_backward_ns": total["bwd"] / n,
                "total_ns": t / n,
                "share_of_device": share_of(t, root_total),
                "ops_per_step": self_["ops"] / n,
                "kernels_per_step": self_["kernels"] / n,
                "total_ops_per_step": total["ops"] / n,
                "total_kernels_per_step": total["kernels"] / n,
            }
        )
    return pd.DataFrame(out, columns=TREE_COLUMNS)


def _ancestor_classes(pairs: pd.DataFrame) -> dict[str, str]:
    """The class of modules that ran no op of their own (a block whose forward only calls
    its layers), read off their descendants' class paths: one class level per module
    entered, where an instance path level is a name, or a name and the index below it
    (``layers.3``: an item of a container the caller iterates). Paths that do not line up
    so (a ``ModuleDict`` key) say nothing."""
    out: dict[str, str] = {}
    for path, cls in zip(pairs["path"].astype(str), pairs["class_path"].astype(str), strict=True):
        levels: list[str] = []  # the instance path up to each module entered
        for name in path.split(INSTANCE_SEP) if path else []:
            if name.isdigit() and levels:
                levels[-1] = f"{levels[-1]}{INSTANCE_SEP}{name}"
            else:
                levels.append(f"{levels[-1]}{INSTANCE_SEP}{name}" if levels else name)
        classes = cls.split("/") if cls else []
        if len(classes) != len(levels) + 1:
            continue
        for d, above in enumerate(["", *levels[:-1]]):
            out.setdefault(above, "/".join(classes[: d + 1]))
    return out


def _depth_first(rows: list[tuple[str, float]]) -> list[int]:
    """Positions of ``rows`` (path, first op) depth first, children in execution order."""
    children: dict[str, list[int]] = {}
    for i, (path, _) in enumerate(rows):
        if path:
            parent = path.rsplit(INSTANCE_SEP, 1)[0] if INSTANCE_SEP in path else ""
            children.setdefault(parent, []).append(i)
    out: list[int] = []
    stack = [0]  # the root is the first sorted path ("")
    while stack:
        i = stack.pop()
        out.append(i)
        kids = sorted(children.get(rows[i][0], []), key=lambda k: (rows[k][1], rows[k][0]))
        stack.extend(reversed(kids))
    return out


def summary(data: RankData) -> dict[str, Any]:
    """Per rank: device time per step by phase, what no module holds, and how many modules."""
    a = attribution(data)
    n = data.n_steps
    dev = a["device_ns"].to_numpy(dtype=float)
    phase = a["phase"].to_numpy()
    tasks = data.tasks
    work = tasks["kind"].isin(WORK_KINDS).to_numpy()
    linked = np.isin(tasks["host_op_id"].to_numpy(), a["event_id"].to_numpy())
    unlinked = float(tasks["duration_ns"].to_numpy(dtype=float)[work & ~linked].sum())
    return {
        "rank": data.rank,
        "modules": int(pd.Series(a["path"]).nunique()) if len(a) else 0,
        "device_ns_per_step": float(dev.sum()) / n,
        "forward_ns_per_step": float(dev[phase == FORWARD].sum()) / n,
        "backward_ns_per_step": float(dev[phase == BACKWARD].sum()) / n,
        "other_ns_per_step": float(dev[phase == OTHER].sum()) / n,
        "unlinked_ns_per_step": unlinked / n,
    }
