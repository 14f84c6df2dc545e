"""Collectives compared (the CommunicationCompare sheet): per collective type, calls, device
time and bytes per step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.compare.side import Side

COLUMNS = {
    "collective": "Communication OP Type",
    "base_calls": "Base Calls",
    "base_time_ms": "Base Total Duration(ms)",
    "base_avg_us": "Base Avg Duration(us)",
    "base_mb": "Base Size(MB)",
    "new_calls": "New Calls",
    "new_time_ms": "New Total Duration(ms)",
    "new_avg_us": "New Avg Duration(us)",
    "new_mb": "New Size(MB)",
    "diff_time_ms": "Diff Duration(ms)",
    "diff_ratio": "Diff Ratio",
}


def _per_type(side: Side) -> pd.DataFrame:
    tasks = side.data.tasks
    coll = tasks[tasks["kind"] == "collective"]
    if coll.empty:
        return pd.DataFrame({"calls": [], "ns": [], "bytes": []})
    kinds = coll["collective"].astype(object).fillna("").astype(str)
    kinds = kinds.where(kinds != "", coll["op_type"].astype(object).astype(str))
    g = coll.groupby(kinds.to_numpy(), sort=False)
    out = pd.DataFrame({"calls": g.size(), "ns": g["duration_ns"].sum(), "bytes": g["bytes"].sum()})
    return out.astype(float) / side.n_steps


def communication_table(base: Side, new: Side) -> pd.DataFrame:
    """Both sides' collectives per type, by |diff| of their time."""
    b, n = _per_type(base), _per_type(new)
    rows = []
    for kind in sorted(set(map(str, b.index)) | set(map(str, n.index))):
        bc, bns, bb = (float(b[c].get(kind, 0.0)) for c in ("calls", "ns", "bytes"))
        nc, nns, nb = (float(n[c].get(kind, 0.0)) for c in ("calls", "ns", "bytes"))
        rows.append(
            {
                "collective": kind,
                "base_calls": bc,
                "base_time_ms": bns / 1e6,
                "base_avg_us": bns / bc / 1e3 if bc else 0.0,
                "base_mb": bb / (1 << 20),
                "new_calls": nc,
                "new_time_ms": nns / 1e6,
                "new_avg_us": nns / nc / 1e3 if nc else 0.0,
                "new_mb": nb / (1 << 20),
                "diff_time_ms": (nns - bns) / 1e6,
                "diff_ratio": nns / bns if bns > 0 else None,
            }
        )
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    if out.empty:
        return out
    order = np.lexsort((out["collective"].to_numpy(dtype=str), -out["diff_time_ms"].abs()))
    return out.iloc[order].reset_index(drop=True)
