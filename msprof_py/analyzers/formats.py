"""Format overhead: TransData time and the ops that cause it; C0 padding waste.

A TransData task re-lays a tensor between ND and an NPU-private format (NC1HWC0, FRACTAL_Z,
FRACTAL_NZ ...); the op it belongs to is the op that needed the other format. Private formats
pad the channel axis to a multiple of C0 (32 bytes / itemsize) and rows to 16; the padding
bytes every task reads and writes are wasted traffic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import shapes
from msprof_py.analyzers.context import RankData, per_rank, share_of
from msprof_py.device import formats as devformats

TRANSDATA_COLUMNS = [
    "rank",
    "cause_op",
    "src_format",
    "dst_format",
    "count",
    "total_ns",
    "bytes",
    "share_of_step",
]
PADDING_COLUMNS = ["rank", "op_type", "tasks", "bytes", "padding_bytes", "padding_share"]


@per_rank
def transdata(data: RankData) -> pd.DataFrame:
    """TransData tasks grouped by the op that caused them and the conversion."""
    tasks = data.tasks
    mask = data.kernel_mask & (tasks["op_type"] == "TransData").to_numpy()
    cols = ["host_op_id", "input_formats", "output_formats", "duration_ns", "bytes"]
    td = tasks.loc[mask, cols]
    if td.empty:
        return pd.DataFrame(columns=TRANSDATA_COLUMNS)
    ops = data.all_host_ops.set_index("event_id")["name"]
    cause = ops.reindex(td["host_op_id"].to_numpy()).astype(object).fillna("(no host op)")
    cause = cause.to_numpy()
    td = td.assign(
        cause_op=cause,
        src_format=shapes.first_item(td["input_formats"]).to_numpy(),
        dst_format=shapes.first_item(td["output_formats"]).to_numpy(),
    )
    g = td.groupby(["cause_op", "src_format", "dst_format"], sort=False, observed=True)
    out = g.agg(
        count=("duration_ns", "size"), total_ns=("duration_ns", "sum"), bytes=("bytes", "sum")
    )
    out = out.reset_index().sort_values("total_ns", ascending=False, kind="stable")
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out.insert(0, "rank", data.rank)
    return out[TRANSDATA_COLUMNS].reset_index(drop=True)


def _padding_of(shape_str: str, dtype_str: str, format_str: str) -> int:
    """Padding bytes of the tensors of one row (0 for plain formats and unparseable rows)."""
    total = 0
    fmts = format_str.split(";") if format_str else []
    dtypes = dtype_str.split(";") if dtype_str else []
    for dims, dtype, fmt in zip(shapes.parse(shape_str, dtype_str), dtypes, fmts, strict=False):
        try:
            if devformats.is_private(fmt):
                total += devformats.padding_bytes(dims, dtype, fmt)
        except ValueError:
            continue
    return total


def _padding_column(df: pd.DataFrame, prefix: str) -> np.ndarray:
    cols = [df[f"{prefix}_shapes"], df[f"{prefix}_dtypes"], df[f"{prefix}_formats"]]
    codes, uniques = shapes.factorize(*cols)
    table = np.array([_padding_of(*u) for u in uniques] + [0], dtype=np.int64)
    return table[codes]


@per_rank
def padding(data: RankData) -> pd.DataFrame:
    """Per op type working on private formats: bytes moved and how much of it is C0 padding."""
    tasks = data.tasks
    private = tasks["input_formats"].str.contains("NC1HWC0|FRACTAL", regex=True) | tasks[
        "output_formats"
    ].str.contains("NC1HWC0|FRACTAL", regex=True)
    cols = [f"{p}_{c}" for p in ("input", "output") for c in ("shapes", "dtypes", "formats")]
    k = tasks.loc[data.kernel_mask & private.fillna(False).to_numpy(), ["op_type", "bytes", *cols]]
    if k.empty:
        return pd.DataFrame(columns=PADDING_COLUMNS)
    pad = _padding_column(k, "input") + _padding_column(k, "output")
    k = k.assign(padding_bytes=np.minimum(pad, k["bytes"].to_numpy()))
    g = k.groupby("op_type", observed=True)
    out = pd.DataFrame(
        {"tasks": g.size(), "bytes": g["bytes"].sum(), "padding_bytes": g["padding_bytes"].sum()}
    ).reset_index()
    out["padding_share"] = out["padding_bytes"] / out["bytes"].where(out["bytes"] > 0)
    out.insert(0, "rank", data.rank)
    out = out.sort_values("padding_bytes", ascending=False, kind="stable")
    return out[PADDING_COLUMNS].reset_index(drop=True)


@per_rank
def summary(data: RankData) -> dict[str, Any]:
    """TransData totals and the padding waste over all private-format traffic."""
    td = transdata(data)
    pad = padding(data)
    total = int(td["total_ns"].sum()) if len(td) else 0
    return {
        "rank": data.rank,
        "transdata_count": int(td["count"].sum()) if len(td) else 0,
        "transdata_ns": total,
        "transdata_per_step_ns": total / data.n_steps,
        "transdata_share": data.share(total),
        "private_format_bytes": int(pad["bytes"].sum()) if len(pad) else 0,
        "padding_bytes": int(pad["padding_bytes"].sum()) if len(pad) else 0,
    }
