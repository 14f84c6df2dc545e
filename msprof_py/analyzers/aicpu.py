"""AI CPU ops: which ops fell back to the AI CPU, their cost, and the dtype or op to change.

A task whose dtypes include one listed in ``rules/aicpu.yaml`` (int64, float64, complex) is a
dtype fallback: the same op runs on the AI Core in the suggested dtype. Other AI CPU ops
(NonZero, Sort, Unique ...) always run there: the op itself has to change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import shapes
from msprof_py.analyzers.context import AICPU_TYPES, KERNEL, RankData, share_of
from msprof_py.analyzers.findings import aicpu_advice

COLUMNS = [
    "rank",
    "op_type",
    "name",
    "input_dtypes",
    "count",
    "total_ns",
    "mean_ns",
    "max_ns",
    "share_of_step",
    "reason",
    "change",
    "suggestion",
]


def tasks(data: RankData) -> pd.DataFrame:
    """The analysed AI CPU tasks with ``reason`` (``dtype <name>`` or ``op``), ``to_dtype``
    (the dtype to run in instead, or empty) and ``suggestion``."""
    t = data.tasks
    t = t[(t["kind"] == KERNEL) & t["task_type"].isin(AICPU_TYPES)]
    advice = aicpu_advice()
    dtype_rules: dict = advice["dtypes"]
    codes, uniques = shapes.factorize(t["input_dtypes"], t["output_dtypes"])
    found = []
    for ins, outs in uniques:
        names = [d for d in f"{ins};{outs}".split(";") if d]
        hit = next((d for d in dtype_rules if d in names), "")
        found.append(hit)
    hit = np.array([*found, ""], dtype=object)[codes]
    op_rules: dict = advice["ops"]
    op_text = t["op_type"].astype(object).map(op_rules).fillna(advice["default"]).to_numpy()
    reason = np.where(hit != "", "dtype " + hit.astype(str), "op")
    to_dtype = np.array([dtype_rules[h]["to"] if h else "" for h in hit], dtype=object)
    text = np.array([dtype_rules[h]["text"] if h else "" for h in hit], dtype=object)
    suggestion = np.where(hit != "", text, op_text)
    return t.assign(reason=reason, to_dtype=to_dtype, suggestion=suggestion)


def table(data: RankData) -> pd.DataFrame:
    """AI CPU ops by total time, with the reason and what to change."""
    t = tasks(data)
    if t.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["op_type", "name", "input_dtypes", "reason", "to_dtype", "suggestion"]
    g = t.groupby(keys, sort=False, observed=True)["duration_ns"]
    out = g.agg(count="size", total_ns="sum", max_ns="max").reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out["change"] = np.where(
        out["to_dtype"] != "",
        "run in " + out["to_dtype"].astype(str),
        "replace " + out["op_type"].astype(str),
    )
    out.insert(0, "rank", data.rank)
    out = out.sort_values("total_ns", ascending=False, kind="stable")
    return out[COLUMNS].reset_index(drop=True)
