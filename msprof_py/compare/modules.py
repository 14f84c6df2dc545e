"""Modules compared (the ModuleCompare sheet): per nn.Module instance path, the device time of
its own ops (self) and of its ops and its submodules' (total), per step.

Only when both sides recorded module paths (``host_events.module_path``); the ops at the top
level (no module) count for the root, shown as ``(top)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.compare.records import op_records
from msprof_py.compare.side import Side

TOP = "(top)"
COLUMNS = {
    "module": "Module Name",
    "module_class": "Module Class",
    "level": "Module Level",
    "base_self_us": "Base Device Self Time(us)",
    "base_total_us": "Base Device Total Time(us)",
    "base_ops": "Base Number",
    "new_self_us": "New Device Self Time(us)",
    "new_total_us": "New Device Total Time(us)",
    "new_ops": "New Number",
    "diff_self_us": "Diff Self Time(us)",
    "diff_total_us": "Diff Total Time(us)",
    "diff_total_ratio": "Diff Total Ratio",
}


def has_modules(side: Side) -> bool:
    """Whether the side's ops carry module paths."""
    rec = op_records(side)
    return bool((rec["module_path"] != "").any())


def _per_module(side: Side) -> pd.DataFrame:
    """Per module path: self time, op count per step and its class (``Conv2d``)."""
    rec = op_records(side)
    rec = rec[rec["op_id"] >= 0]
    g = rec.groupby("module_path", sort=False)
    out = pd.DataFrame({"self_ns": g["time_ns"].sum(), "ops": g.size()})
    out["module_class"] = g["module"].first().map(_class_name)
    out["self_ns"] /= side.n_steps
    out["ops"] = out["ops"] / side.n_steps
    return out


def _class_name(label: str) -> str:
    """``Conv2d`` of ``layer1.0.conv1 (ResNet/Sequential/Conv2d)``."""
    inner = label.rsplit("(", 1)[-1].rstrip(")") if label.endswith(")") else label
    return inner.rsplit("/", 1)[-1]


def _totals(self_ns: pd.Series, paths: list[str]) -> dict[str, float]:
    """Per path: its self time plus that of every path below it."""
    totals = dict.fromkeys(paths, 0.0)
    for path, ns in self_ns.items():
        parts = str(path).split(".") if path else []
        totals[""] = totals.get("", 0.0) + float(ns)
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            totals[prefix] = totals.get(prefix, 0.0) + float(ns)
    return totals


def _with_parents(paths: set[str]) -> list[str]:
    every = {""}
    for path in paths:
        parts = path.split(".") if path else []
        every.update(".".join(parts[:d]) for d in range(1, len(parts) + 1))
    return sorted(every)


def module_table(base: Side, new: Side) -> pd.DataFrame:
    """The ModuleCompare table (:data:`COLUMNS`), in module-tree order (a parent before its
    children); empty unless both sides have module paths."""
    if not (has_modules(base) and has_modules(new)):
        return pd.DataFrame(columns=list(COLUMNS))
    b, n = _per_module(base), _per_module(new)
    paths = _with_parents(set(map(str, b.index)) | set(map(str, n.index)))
    b_tot, n_tot = _totals(b["self_ns"], paths), _totals(n["self_ns"], paths)
    classes = {**n["module_class"].to_dict(), **b["module_class"].to_dict()}
    rows = []
    for path in paths:
        b_self = float(b["self_ns"].get(path, 0.0))
        n_self = float(n["self_ns"].get(path, 0.0))
        b_total, n_total = b_tot.get(path, 0.0), n_tot.get(path, 0.0)
        rows.append(
            {
                "module": path or TOP,
                "module_class": classes.get(path, "") if path else "",
                "level": len(path.split(".")) if path else 0,
                "base_self_us": b_self / 1e3,
                "base_total_us": b_total / 1e3,
                "base_ops": float(b["ops"].get(path, 0.0)),
                "new_self_us": n_self / 1e3,
                "new_total_us": n_total / 1e3,
                "new_ops": float(n["ops"].get(path, 0.0)),
                "diff_self_us": (n_self - b_self) / 1e3,
                "diff_total_us": (n_total - b_total) / 1e3,
                "diff_total_ratio": n_total / b_total if b_total > 0 else None,
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"level": np.int64})
