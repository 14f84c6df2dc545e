"""Modules compared (the ModuleCompare sheet): per nn.Module instance path, the device time of
its own ops (self) and of its ops and its submodules' (total), per step.

Only when both sides recorded module paths (``host_events.module_path``). The figures are
the analysers' module tree (:mod:`msprof_py.analyzers.module_tree`): backward ops count for
the module of their forward op; ops outside any module (the optimizer) count for the root,
shown as ``(top)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import module_tree
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
    """Per module path (the analysers' module tree: backward ops counted for the module of
    their forward op): self and total device ns, ops per step, class and depth."""
    tree = module_tree.tree(side.data)
    return tree.set_index("module")[["self_ns", "total_ns", "ops_per_step", "class_name", "depth"]]


def module_table(base: Side, new: Side) -> pd.DataFrame:
    """The ModuleCompare table (:data:`COLUMNS`), in module-tree order (a parent before its
    children); empty unless both sides have module paths."""
    if not (has_modules(base) and has_modules(new)):
        return pd.DataFrame(columns=list(COLUMNS))
    b, n = _per_module(base), _per_module(new)
    paths = sorted(set(map(str, b.index)) | set(map(str, n.index)))
    classes = {**n["class_name"].to_dict(), **b["class_name"].to_dict()}
    rows = []
    for path in paths:
        b_self = float(b["self_ns"].get(path, 0.0))
        n_self = float(n["self_ns"].get(path, 0.0))
        b_total = float(b["total_ns"].get(path, 0.0))
        n_total = float(n["total_ns"].get(path, 0.0))
        rows.append(
            {
                "module": path or TOP,
                "module_class": classes.get(path, "") if path else "",
                "level": len(path.split(".")) if path else 0,
                "base_self_us": b_self / 1e3,
                "base_total_us": b_total / 1e3,
                "base_ops": float(b["ops_per_step"].get(path, 0.0)),
                "new_self_us": n_self / 1e3,
                "new_total_us": n_total / 1e3,
                "new_ops": float(n["ops_per_step"].get(path, 0.0)),
                "diff_self_us": (n_self - b_self) / 1e3,
                "diff_total_us": (n_total - b_total) / 1e3,
                "diff_total_ratio": n_total / b_total if b_total > 0 else None,
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"level": np.int64})
