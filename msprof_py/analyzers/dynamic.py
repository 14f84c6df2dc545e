"""Dynamic shapes: kernels built again and again for new shapes, and the ops whose shapes vary.

The adapter's op compile cache (``msprof_py.adapter.compile_cache``) charges the host for
each kernel key (op, shapes, dtypes, formats, attributes) it meets for the first time: an API
host span ``compile <OpType>`` (``jit_compile=True``: an online compile) or ``tiling <OpType>``
(binary kernels: host tiling only). A loop with fixed shapes pays them in its first step,
which the analysis leaves out; a loop whose shapes keep changing (variable sequence lengths,
a last short batch, a shrinking packed batch) pays them step after step. Builds in one
analysed step only (ops a loop runs from its second step on: an optimizer's momentum
update) are a second warm-up, not dynamic shapes. Graph compiles
(``compile <graph>``) are told apart by their name: it is no kernel op type of the profile.
"""

from __future__ import annotations

import pandas as pd

from msprof_py.analyzers.context import KERNEL, RankData, per_rank

#: the host-span prefixes the compile cache writes (``compile_cache.COMPILE_PREFIX`` ...)
COMPILE_PREFIX = "compile "
TILING_PREFIX = "tiling "

BUILD_COLUMNS = ["kind", "op_type", "count", "host_ns"]
SHAPE_COLUMNS = ["op_type", "shapes", "new_shapes"]


@per_rank
def build_spans(data: RankData, analysed: bool = True) -> pd.DataFrame:
    """The compile and tiling spans of the analysed steps (or the whole run): kind
    (``compile`` | ``tiling``), op type, host time and step of each."""
    host = data.host if analysed else data.all_host
    api = host[host["kind"] == "api"]
    names = api["name"].astype(str)
    kind = pd.Series("", index=api.index, dtype=object)
    kind[names.str.startswith(COMPILE_PREFIX)] = "compile"
    kind[names.str.startswith(TILING_PREFIX)] = "tiling"
    op_type = names.str.split(" ", n=1).str[1]
    known = set(data.all_tasks.loc[data.all_tasks["kind"] == KERNEL, "op_type"].astype(str))
    keep = (kind != "") & op_type.isin(known)
    return pd.DataFrame(
        {
            "kind": kind[keep],
            "op_type": op_type[keep],
            "host_ns": (api["end_ns"] - api["start_ns"])[keep],
            "step": api["step"][keep],
        }
    ).reset_index(drop=True)


def builds(data: RankData, analysed: bool = True) -> pd.DataFrame:
    """Kernel builds of new keys in the analysed steps (or the whole run): one row per
    (``compile`` | ``tiling``, op type) with their count and host time."""
    rows = build_spans(data, analysed)
    if rows.empty:
        return pd.DataFrame(columns=BUILD_COLUMNS)
    table = rows.groupby(["kind", "op_type"], sort=False)["host_ns"].agg(["count", "sum"])
    table = table.reset_index().rename(columns={"sum": "host_ns"})
    return table.sort_values(["host_ns", "op_type"], ascending=[False, True], kind="stable")[
        BUILD_COLUMNS
    ].reset_index(drop=True)


def shapes_per_op(data: RankData) -> pd.DataFrame:
    """Kernel op types that met input shapes in the analysed steps they had not run with in
    any earlier step: their distinct shapes in the analysed steps and how many of them were
    new, the most new first. (One op type on several tensors - a Mul on weights and on
    biases - repeats its shapes every step and is not listed.)"""
    every = data.all_tasks
    every = every.loc[every["kind"] == KERNEL, ["op_type", "input_shapes", "step"]]
    if every.empty:
        return pd.DataFrame(columns=SHAPE_COLUMNS)
    every = pd.DataFrame(
        {
            "op_type": every["op_type"].astype(str),
            "shape": every["input_shapes"].astype(str),
            "step": every["step"].astype("int64"),
        }
    )
    analysed = set(data.steps["step"].tolist()) if len(data.steps) else set(every["step"])
    first = every.groupby(["op_type", "shape"])["step"].min().rename("first").reset_index()
    here = every[every["step"].isin(analysed)].drop_duplicates(["op_type", "shape"])
    here = here.merge(first, on=["op_type", "shape"])
    here["new"] = here["first"].isin(analysed) & (here["first"] == here["step"])
    g = here.groupby("op_type").agg(shapes=("shape", "size"), new_shapes=("new", "sum"))
    g = g[g["new_shapes"] > 0].reset_index()
    g["new_shapes"] = g["new_shapes"].astype("int64")
    return g.sort_values(
        ["new_shapes", "op_type"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)[SHAPE_COLUMNS]


def dynamic_share(data: RankData) -> float:
    """Share of the analysed kernels that ran as dynamic-shape (binary) kernels."""
    if "op_state" not in data.tasks.columns:
        return 0.0
    k = data.kernel_columns(["op_state"])
    return float((k["op_state"] == "dynamic").mean()) if len(k) else 0.0
