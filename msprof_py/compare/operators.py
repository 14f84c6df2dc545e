"""Operators matched across the two sides (the OperatorCompare and OperatorCompareStatistic
sheets), with their device time per step, ranked by how much it changed.

An operator is a host op name with its input shapes (:mod:`msprof_py.compare.records`). The
base side's names go through ``--op-name-map`` first. Operators are matched

1. by name and input shapes (``name+shapes``);
2. what is left, by compute family and input shapes (``family+shapes``: ``aten::addmm`` on
   one side, ``MatMulV2`` or a CUDA ``*gemm*`` kernel on the other), the longest first;
3. what is still left is shown on its own side only (``base only`` / ``new only``).

Times and counts are per compared step (means): sides with different step counts compare.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from msprof_py.compare import names
from msprof_py.compare.records import op_records
from msprof_py.compare.side import Side

EXACT, FAMILY, BASE_ONLY, NEW_ONLY = "name+shapes", "family+shapes", "base only", "new only"
COLUMNS = {
    "base_name": "Base Operator Name",
    "base_input_shapes": "Base Input Shapes",
    "base_count": "Base Operator Number",
    "base_time_us": "Base Device Duration(us)",
    "new_name": "New Operator Name",
    "new_input_shapes": "New Input Shapes",
    "new_count": "New Operator Number",
    "new_time_us": "New Device Duration(us)",
    "diff_time_us": "Diff Duration(us)",
    "diff_ratio": "Diff Ratio",
    "match": "Match",
}
STATISTIC_COLUMNS = {
    "operator": "Operator Name",
    "base_count": "Base Operator Number",
    "base_time_ms": "Base Device Duration(ms)",
    "new_count": "New Operator Number",
    "new_time_ms": "New Device Duration(ms)",
    "diff_time_ms": "Diff Duration(ms)",
    "diff_ratio": "Diff Ratio",
}


def grouped(side: Side, name_map: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The side's operators: ``name`` (mapped), ``input_shapes``, ``count`` and ``time_ns``
    per step, longest first."""
    rec = op_records(side)
    count = np.where(rec["op_id"].to_numpy() >= 0, 1, rec["tasks"].to_numpy())
    frame = pd.DataFrame(
        {
            "name": rec["name"].map(lambda s: (name_map or {}).get(s, s)),
            "input_shapes": rec["input_shapes"],
            "count": count,
            "time_ns": rec["time_ns"],
        }
    )
    g = frame.groupby(["name", "input_shapes"], sort=False)[["count", "time_ns"]].sum()
    g = g.reset_index()
    g["count"] = g["count"] / side.n_steps
    g["time_ns"] = g["time_ns"] / side.n_steps
    return g.sort_values(["time_ns", "name", "input_shapes"], ascending=[False, True, True])


def _row(b: pd.Series | None, n: pd.Series | None, how: str) -> dict[str, object]:
    b_ns = float(b["time_ns"]) if b is not None else 0.0
    n_ns = float(n["time_ns"]) if n is not None else 0.0
    return {
        "base_name": b["name"] if b is not None else "",
        "base_input_shapes": b["input_shapes"] if b is not None else "",
        "base_count": float(b["count"]) if b is not None else 0.0,
        "base_time_us": b_ns / 1e3,
        "new_name": n["name"] if n is not None else "",
        "new_input_shapes": n["input_shapes"] if n is not None else "",
        "new_count": float(n["count"]) if n is not None else 0.0,
        "new_time_us": n_ns / 1e3,
        "diff_time_us": (n_ns - b_ns) / 1e3,
        "diff_ratio": n_ns / b_ns if b_ns > 0 else None,
        "match": how,
    }


def operator_table(
    base: Side, new: Side, name_map: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """The OperatorCompare table (:data:`COLUMNS`), by |diff| (largest first)."""
    b, n = grouped(base, name_map), grouped(new)
    rows: list[dict[str, object]] = []
    new_rows = {(r["name"], r["input_shapes"]): r for _, r in n.iterrows()}
    left: list[pd.Series] = []
    for _, r in b.iterrows():
        match = new_rows.pop((r["name"], r["input_shapes"]), None)
        if match is None:
            left.append(r)
        else:
            rows.append(_row(r, match, EXACT))
    by_family: dict[tuple[str, str], list[pd.Series]] = {}
    for r in new_rows.values():  # longest first (n is sorted)
        fam = names.family(str(r["name"]))
        if fam:
            by_family.setdefault((fam, str(r["input_shapes"])), []).append(r)
    paired: set[tuple[str, str]] = set()
    for r in left:
        fam = names.family(str(r["name"]))
        candidates = by_family.get((fam, str(r["input_shapes"])), []) if fam else []
        if candidates:
            match = candidates.pop(0)
            paired.add((match["name"], match["input_shapes"]))
            rows.append(_row(r, match, FAMILY))
        else:
            rows.append(_row(r, None, BASE_ONLY))
    for key, r in new_rows.items():
        if key not in paired:
            rows.append(_row(None, r, NEW_ONLY))
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    if out.empty:
        return out
    order = np.lexsort(
        (
            out["new_name"].to_numpy(dtype=str),
            out["base_name"].to_numpy(dtype=str),
            -out["diff_time_us"].abs().to_numpy(),
        )
    )
    return out.iloc[order].reset_index(drop=True)


def statistic_table(operators: pd.DataFrame) -> pd.DataFrame:
    """The OperatorCompareStatistic table (:data:`STATISTIC_COLUMNS`): the matched operators
    per name (all shapes together), by |diff|. A pair matched by family is named
    ``base = new``."""
    if operators.empty:
        return pd.DataFrame(columns=list(STATISTIC_COLUMNS))
    b, n = operators["base_name"], operators["new_name"]
    label = np.where(
        (b == n) | (n == ""), b, np.where(b == "", n, b.astype(str) + " = " + n.astype(str))
    )
    g = operators.assign(operator=label).groupby("operator", sort=False)
    out = pd.DataFrame(
        {
            "base_count": g["base_count"].sum(),
            "base_time_ms": g["base_time_us"].sum() / 1e3,
            "new_count": g["new_count"].sum(),
            "new_time_ms": g["new_time_us"].sum() / 1e3,
        }
    ).reset_index()
    out["diff_time_ms"] = out["new_time_ms"] - out["base_time_ms"]
    out["diff_ratio"] = out["new_time_ms"] / out["base_time_ms"].where(out["base_time_ms"] > 0)
    out["diff_ratio"] = out["diff_ratio"].astype(object).where(out["diff_ratio"].notna(), None)
    order = np.lexsort((out["operator"].to_numpy(dtype=str), -out["diff_time_ms"].abs()))
    return out.iloc[order][list(STATISTIC_COLUMNS)].reset_index(drop=True)
