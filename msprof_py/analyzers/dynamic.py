"""Dynamic shapes: kernels built again and again for new shapes, and the ops whose shapes vary.

The adapter's op compile cache (``msprof_py.adapter.compile_cache``) charges the host for
each kernel key (op, shapes, dtypes, formats, attributes) it meets for the first time: an API
host span ``compile <OpType>`` (``jit_compile=True``: an online compile) or ``tiling <OpType>``
(binary kernels: host tiling only). A loop with fixed shapes pays them in its first step,
which the analysis leaves out; a loop whose shapes keep changing (variable sequence lengths,
a last short batch, a shrinking packed batch) pays them every step. Graph compiles
(``compile <graph>``) are told apart by their name: it is no kernel op type of the profile.
"""

from __future__ import annotations

import pandas as pd

from msprof_py.analyzers.context import KERNEL, RankData

#: the host-span prefixes the compile cache writes (``compile_cache.COMPILE_PREFIX`` ...)
COMPILE_PREFIX = "compile "
TILING_PREFIX = "tiling "

BUILD_COLUMNS = ["kind", "op_type", "count", "host_ns"]
SHAPE_COLUMNS = ["op_type", "shapes", "kernels"]


def builds(data: RankData, analysed: bool = True) -> pd.DataFrame:
    """Kernel builds of new keys in the analysed steps (or the whole run): one row per
    (``compile`` | ``tiling``, op type) with their count and host time."""
    host = data.host if analysed else data.all_host
    api = host[host["kind"] == "api"]
    names = api["name"].astype(str)
    kind = pd.Series("", index=api.index, dtype=object)
    kind[names.str.startswith(COMPILE_PREFIX)] = "compile"
    kind[names.str.startswith(TILING_PREFIX)] = "tiling"
    op_type = names.str.split(" ", n=1).str[1]
    known = set(data.all_tasks.loc[data.all_tasks["kind"] == KERNEL, "op_type"].astype(str))
    keep = (kind != "") & op_type.isin(known)
    if not keep.any():
        return pd.DataFrame(columns=BUILD_COLUMNS)
    rows = pd.DataFrame(
        {
            "kind": kind[keep],
            "op_type": op_type[keep],
            "host_ns": (api["end_ns"] - api["start_ns"])[keep],
        }
    )
    table = rows.groupby(["kind", "op_type"], sort=False)["host_ns"].agg(["count", "sum"])
    table = table.reset_index().rename(columns={"sum": "host_ns"})
    return table.sort_values(["host_ns", "op_type"], ascending=[False, True], kind="stable")[
        BUILD_COLUMNS
    ].reset_index(drop=True)


def shapes_per_op(data: RankData) -> pd.DataFrame:
    """Distinct input shapes each kernel op type ran with in the analysed steps, the most
    first (only op types with more than one)."""
    k = data.kernel_columns(["op_type", "input_shapes"])
    if k.empty:
        return pd.DataFrame(columns=SHAPE_COLUMNS)
    g = k.astype(str).groupby("op_type")["input_shapes"].agg(["nunique", "size"])
    g = g[g["nunique"] > 1].reset_index()
    g.columns = SHAPE_COLUMNS
    return g.sort_values(["shapes", "op_type"], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )


def dynamic_share(data: RankData) -> float:
    """Share of the analysed kernels that ran as dynamic-shape (binary) kernels."""
    if "op_state" not in data.tasks.columns:
        return 0.0
    k = data.kernel_columns(["op_state"])
    return float((k["op_state"] == "dynamic").mean()) if len(k) else 0.0
