"""Tables for people: every value formatted by what its column holds (times in us or ms with
thousands separators, shares as percentages, bytes in KiB/MiB/GiB, no scientific notation),
human headers, and a raw sort key per cell for the page's sortable columns. Evidence of a
finding becomes small tables too, not JSON."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: headers of well-known columns (the rest: snake_case to words, the unit appended)
HEADERS = {
    "op_type": "Op type",
    "task_type": "Unit",
    "core_type": "Unit",
    "input_shapes": "Input shapes",
    "input_dtypes": "Input dtypes",
    "output_shapes": "Output shapes",
    "count": "Count",
    "total_ns": "Total",
    "mean_ns": "Avg",
    "min_ns": "Min",
    "max_ns": "Max",
    "share_of_step": "Share of step",
    "share_of_device": "Share of device time",
    "ratio": "Share of device time",
    "comm_not_overlapped_ns": "Communication (not overlapped)",
    "step_ns": "Step",
    "host_step_ns": "Host step",
    "achieved_gbps": "Achieved GB/s",
    "peak_gbps": "Peak GB/s",
    "achieved_tflops": "Achieved TFLOP/s",
    "peak_tflops": "Peak TFLOP/s",
    "intensity": "FLOP per byte",
    "ridge_intensity": "Ridge (FLOP per byte)",
    "flops": "FLOPs",
    "duration_ns": "Duration",
    "per_step_ns": "Per step",
    "utilisation": "Utilisation",
    "bound": "Bound",
}
_PCT_WORDS = ("share", "ratio", "utilisation", "efficiency", "fraction", "deviation", "overlap")
_BYTE_WORDS = (
    "bytes",
    "allocated",
    "reserved",
    "active",
    "capacity",
    "headroom",
    "persistent",
    "fragmentation",
)
#: plain labels, never given thousands separators
_LABELS = ("rank", "step", "first", "last", "stream_id", "task_id", "event_id")


def column_kind(name: str, values: pd.Series | None = None) -> str:
    """What a column holds, from its name: time (ns), time_us, pct, bytes, label or number."""
    n = name.lower()
    if n in _LABELS:
        return "label"
    if n.endswith("_ns"):
        return "time"
    if n.endswith("_us") or n.endswith("_us_per_step"):
        return "time_us"
    if "batch" in n or n.endswith("count") or n.endswith("_per_step"):
        return "number"
    if n == "size" or n.endswith("_size") or any(w in n for w in _BYTE_WORDS):
        return "bytes"
    if any(w in n for w in _PCT_WORDS) or n in ("share", "fill"):
        return "pct"
    return "number"


def number(v: float) -> str:
    """A number without scientific notation: thousands separators, a few significant digits."""
    if math.isnan(v) or math.isinf(v):
        return "-"
    if v == int(v) and abs(v) < 1e18:
        return f"{int(v):,}"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:,.2f}"
    digits = min(12, 2 - math.floor(math.log10(a))) if a > 0 else 0
    return f"{v:.{digits}f}"


def size(v: float) -> str:
    """Bytes as B, KiB, MiB, GiB or TiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.2f} {unit}"
        v /= 1024
    return f"{v:,.0f} B"  # pragma: no cover


def _time_unit(values: pd.Series) -> str:
    v = pd.to_numeric(values, errors="coerce").abs()
    top = float(v.max()) if len(v) and v.notna().any() else 0.0
    return "ms" if top >= 1e7 else "us"


def _float(v: Any) -> float | None:
    if v is None or isinstance(v, bool | str | dict | list):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def cell(v: Any, kind: str, unit: str = "us") -> tuple[str, Any]:
    """(the text shown, the sort key) of one value of a column of ``kind``."""
    if isinstance(v, bool | np.bool_):
        return ("yes" if v else "no"), int(bool(v))
    f = _float(v)
    if f is None:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "", ""
        if isinstance(v, dict):
            return ", ".join(f"{k}: {_scalar(k, x)}" for k, x in v.items()), ""
        if isinstance(v, list | tuple):
            return ", ".join(_scalar("", x) for x in v), ""
        text = str(v)
        return ("" if text in ("nan", "None", "<NA>") else text), text
    if kind == "label":
        return (str(int(f)) if f == int(f) else str(f)), f
    if kind == "time":
        return (f"{f / 1e6:,.2f}" if unit == "ms" else f"{f / 1e3:,.1f}"), f
    if kind == "time_us":
        return f"{f:,.1f}", f
    if kind == "pct":
        return f"{f * 100:.1f}%", f
    if kind == "bytes":
        return size(f), f
    return number(f), f


def _scalar(key: str, v: Any) -> str:
    kind = column_kind(str(key))
    text, _ = cell(v, kind, "us")
    if kind == "time":
        return f"{text} us"
    if kind == "time_us":
        return f"{text} us"
    return text


def header(name: str, kind: str, unit: str = "us") -> str:
    """A human header: the known name, else words; the time unit appended."""
    label = HEADERS.get(name)
    if label is None:
        base = name[:-3] if name.endswith("_ns") or name.endswith("_us") else name
        words = base.replace("_", " ").strip()
        label = words[:1].upper() + words[1:]
    if kind == "time":
        return f"{label} ({unit})"
    if kind == "time_us":
        return f"{label} (us)"
    return label


def table(
    df: pd.DataFrame | None,
    columns: list[str] | None = None,
    limit: int = 50,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A DataFrame as formatted cells for the template (which escapes them): ``columns``
    (header, numeric), ``rows`` of (text, sort key), ``more`` (rows left out)."""
    if df is None or len(df) == 0:
        return {"columns": [], "rows": [], "more": 0}
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    if "rank" in cols and df["rank"].nunique() < 2:
        cols.remove("rank")  # one rank: the column says nothing
    part = df[cols].head(limit)
    kinds = {c: column_kind(c) for c in cols}
    units = {c: _time_unit(part[c]) if kinds[c] == "time" else "us" for c in cols}
    heads = []
    for c in cols:
        numeric = kinds[c] != "label" and pd.api.types.is_numeric_dtype(part[c])
        text = (headers or {}).get(c) or header(c, kinds[c], units[c])
        heads.append({"name": text, "numeric": bool(numeric or kinds[c] == "label")})
    rows = [
        [cell(v, kinds[c], units[c]) for c, v in zip(cols, row, strict=True)]
        for row in part.itertuples(index=False, name=None)
    ]
    return {"columns": heads, "rows": rows, "more": max(0, len(df) - limit)}


MAX_EVIDENCE_ROWS = 10


def evidence(value: Any) -> list[dict[str, Any]]:
    """A finding's evidence as small tables: its scalar fields as one two-column table, each
    list of records as a table of its own (titled by its key), nested fields flattened."""
    if not isinstance(value, dict):
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return [{"title": "", **table(pd.DataFrame(value), limit=MAX_EVIDENCE_ROWS)}]
        return [{"title": "", **_pairs({"value": value})}] if value not in (None, "") else []
    scalars: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    for key, v in value.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            flat = pd.DataFrame([_flatten(x) for x in v])
            out.append({"title": _words(key), **table(flat, limit=MAX_EVIDENCE_ROWS)})
        elif isinstance(v, dict):
            scalars.update({f"{key}.{k}": x for k, x in _flatten(v).items()})
        else:
            scalars[key] = v
    if scalars:
        out.insert(0, {"title": "", **_pairs(scalars)})
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _words(key: str) -> str:
    words = str(key).replace("_", " ")
    return words[:1].upper() + words[1:]


def _pairs(fields: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for key, v in fields.items():
        last = str(key).rsplit(".", 1)[-1]
        text = _scalar(last, v)
        if text == "" and v not in (None, ""):
            text = str(v)
        rows.append([(header(str(key), "number"), str(key)), (text, _float(v) or text)])
    return {
        "columns": [{"name": "Field", "numeric": False}, {"name": "Value", "numeric": False}],
        "rows": rows,
        "more": 0,
    }
