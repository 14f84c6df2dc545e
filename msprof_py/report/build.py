"""Build the HTML report: plotly figures (plotly.js inlined once) rendered by a Jinja2 template.

Every string that comes from the profiled program is escaped: HTML text by Jinja2 autoescape,
hover text by :func:`html.escape` (plotly reads hover text as pseudo-HTML), and embedded JSON by
:func:`_json` (``<``, ``>`` and ``&`` written as ``\\u`` escapes, so ``</script>`` cannot end
the script element). This module imports no torch and no device runtime.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.offline
from plotly.subplots import make_subplots
from plotly.utils import PlotlyJSONEncoder

from msprof_py.analyzers.render import step_list
from msprof_py.profile import Profile, ProfileError
from msprof_py.profile.atomic import create_atomically

#: spans per timeline lane drawn one by one; above this a lane is aggregated into time bins
MAX_SPANS_PER_LANE = 20_000
#: memory points drawn; above this the line is down-sampled (the peak is always kept)
MAX_MEMORY_POINTS = 20_000
#: step boundaries drawn as lines
MAX_STEP_LINES = 500
#: bars in the step-time chart; above this, runs of consecutive steps are averaged
MAX_STEP_BARS = 500
#: extra hover points along a lane's long spans (besides one per span, at its middle)
HOVER_POINTS_PER_LANE = 2_000
TOP_N = 15


class ReportError(Exception):
    """The report could not be built or written."""


# ---------------------------------------------------------------- helpers


def _json(value: Any) -> str:
    """JSON safe to embed in an HTML ``<script>`` element."""
    text = json.dumps(value, cls=PlotlyJSONEncoder, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _esc(values: pd.Series) -> pd.Series:
    return values.fillna("").astype(str).map(html.escape)


def _us(ns: Any) -> str:
    try:
        v = float(ns)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(v):
        return "-"
    return f"{v / 1e3:,.1f} us"


def _pct(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(v) else f"{v * 100:.1f}%"


def _bytes(n: Any) -> str:
    try:
        v = float(n)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(v):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.2f} {unit}"
        v /= 1024
    return f"{v} B"


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float | np.floating):
        if math.isnan(v):
            return ""
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return str(v)


def _table(df: pd.DataFrame, columns: list[str] | None = None, limit: int = 50) -> dict[str, Any]:
    """A DataFrame as plain strings for the template (which escapes them)."""
    if df is None or len(df) == 0:
        return {"columns": columns or [], "rows": [], "more": 0}
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    part = df[cols].head(limit)
    rows = [[_cell(v) for v in row] for row in part.itertuples(index=False, name=None)]
    return {"columns": cols, "rows": rows, "more": max(0, len(df) - limit)}


def _fig(fig: go.Figure) -> str:
    return _json(fig.to_plotly_json())


# ---------------------------------------------------------------- timeline


def _task_hover(t: pd.DataFrame) -> pd.Series:
    dur = (t["end_ns"] - t["start_ns"]) / 1e3
    return (
        "<b>"
        + _esc(t["name"])
        + "</b> ("
        + _esc(t["op_type"])
        + ")<br>unit: "
        + _esc(t["task_type"])
        + "<br>in: "
        + _esc(t["input_shapes"])
        + " | "
        + _esc(t["input_dtypes"])
        + " | "
        + _esc(t["input_formats"])
        + "<br>out: "
        + _esc(t["output_shapes"])
        + " | "
        + _esc(t["output_dtypes"])
        + " | "
        + _esc(t["output_formats"])
        + "<br>FLOPs: "
        + t["flops"].map(lambda v: f"{v:,.0f}")
        + "  bytes: "
        + t["bytes"].map(lambda v: f"{v:,}")
        + "<br>duration: "
        + dur.map(lambda v: f"{v:,.3f}")
        + " us"
    )


def _host_hover(h: pd.DataFrame) -> pd.Series:
    if h.empty:
        return pd.Series([], index=h.index, dtype=object)
    dur = (h["end_ns"] - h["start_ns"]) / 1e3
    return (
        "<b>"
        + _esc(h["name"])
        + "</b> ["
        + _esc(h["kind"])
        + "]<br>module: "
        + _esc(h["module"])
        + "<br>in: "
        + _esc(h["input_shapes"])
        + " | "
        + _esc(h["input_dtypes"])
        + "<br>duration: "
        + dur.map(lambda v: f"{v:,.3f}")
        + " us"
    )


def _aggregate(
    start: np.ndarray, end: np.ndarray, names: np.ndarray, bins: int, origin: int = 0
) -> pd.DataFrame:
    """Level of detail for one lane: its spans merged into at most ``bins`` time bins.

    The lane's time range ``[min start, max end]`` is cut into ``bins`` bins of equal width and
    each span goes to the bin its start falls in. One row per non-empty bin, in time order:

    - ``start``, ``end``: the earliest start and the latest end of the bin's spans, so every span
      lies inside its bin's extent (an extent reaches past the bin's edge when a span does);
    - ``spans``: how many spans (they add up to the lane's spans);
    - ``span_ns``: the sum of their durations (adds up to the lane's total span time);
    - ``busy_ns``: the length of the union of the bin's spans, at most ``end - start``; equal
      to ``span_ns`` where spans do not overlap (a stream), less where they nest (the host);
    - ``top``: the name with the most span time in the bin (ties: the one first in the lane);
    - ``hover``: the hover text (names escaped; times in us from ``origin``).

    ``attrs["width_ns"]``: the bins' width.

    Vectorised: sorts and group-bys only, no Python loop per span.
    """
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    lo, hi = int(start.min()), int(end.max())
    width = max(1, math.ceil((hi - lo + 1) / bins))
    b = (start - lo) // width
    order = np.lexsort((start, b))
    b, s, e = b[order], start[order], end[order]
    codes, uniques = pd.factorize(pd.Series(np.asarray(names, dtype=object)[order]).fillna(""))
    d = e - s
    # union of each bin's spans: a new run starts where a span begins after every earlier
    # span of its bin (sorted by start) has ended
    reach = pd.Series(e).groupby(b).cummax().to_numpy()
    first = np.r_[True, b[1:] != b[:-1]]
    new_run = first | (s > np.r_[lo, reach[:-1]])
    heads = np.flatnonzero(new_run)
    run_len = np.maximum.reduceat(e, heads) - s[heads]
    busy = pd.Series(run_len).groupby(b[heads]).sum()
    g = pd.DataFrame({"b": b, "s": s, "e": e, "d": d}).groupby("b", sort=True)
    agg = g.agg(start=("s", "min"), end=("e", "max"), spans=("s", "size"), span_ns=("d", "sum"))
    agg["busy_ns"] = busy.reindex(agg.index).to_numpy()
    by_name = pd.DataFrame({"b": b, "c": codes, "d": d}).groupby(["b", "c"], sort=True)["d"].sum()
    by_name = by_name.reset_index().sort_values(["b", "d"], ascending=[True, False], kind="stable")
    top = by_name.drop_duplicates("b").set_index("b")["c"]
    agg["top"] = uniques.to_numpy()[top.reindex(agg.index).to_numpy()]
    extent = (agg["end"] - agg["start"]).to_numpy()
    share = np.divide(agg["busy_ns"].to_numpy(), extent, out=np.ones(len(agg)), where=extent > 0)
    agg["hover"] = [
        f"<b>{c:,} spans aggregated</b><br>{x / 1e3:,.1f} us to {y / 1e3:,.1f} us"
        f"<br>busy: {u / 1e3:,.1f} us ({p * 100:.0f}% of the bin)"
        f"<br>span time: {t / 1e3:,.1f} us<br>most time: {html.escape(str(n))}"
        for x, y, c, t, u, p, n in zip(
            agg["start"] - origin,
            agg["end"] - origin,
            agg["spans"],
            agg["span_ns"],
            agg["busy_ns"],
            share,
            agg["top"],
            strict=True,
        )
    ]
    out = agg.reset_index(drop=True)
    out.attrs["width_ns"] = width
    return out


def _hover_points(s: np.ndarray, e: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Where a lane's spans can be hovered: every span at its midpoint, long spans also at
    evenly spaced points along them (at most about ``points`` extra points in the lane), so
    the hover label shows near any part of a long span, not only near its middle.
    Returns (x of each hover point, index of its span)."""
    d = e - s
    scale = max(float(e.max() - s.min()), float(d.sum()))
    step = scale / points if scale > 0 else 1.0
    k = np.clip(np.ceil(d / step), 1, points).astype(np.int64)
    idx = np.repeat(np.arange(len(s)), k)
    j = np.arange(len(idx)) - np.repeat(np.cumsum(k) - k, k)
    x = s[idx] + (j + 0.5) * (d[idx] / k[idx])
    return x, idx


def _lane_traces(
    lane: str,
    start: np.ndarray,
    end: np.ndarray,
    hover: Any,
    names: np.ndarray,
    origin: int,
    color: str,
    notes: list[str],
) -> list[dict[str, Any]]:
    """The traces of one lane (plain dicts: plotly's per-element validation of large arrays
    is the slow part of building a figure): the spans as thick line segments, and hover
    markers along them."""
    n = len(start)
    if n == 0:
        return []
    if n > MAX_SPANS_PER_LANE:
        bins = MAX_SPANS_PER_LANE // 2
        agg = _aggregate(start, end, names, bins, origin)
        start, end, hover = agg["start"].to_numpy(), agg["end"].to_numpy(), agg["hover"]
        notes.append(
            f"{lane}: {n:,} spans aggregated into {len(agg):,} time bins of "
            f"{agg.attrs['width_ns'] / 1e3:,.3f} us"
            f" (more than {MAX_SPANS_PER_LANE:,} spans in the lane); each bin is drawn from its "
            "first span's start to its last span's end and its hover gives the spans, busy time "
            "and the name with the most time; zooming does not split bins"
        )
    s = np.round((np.asarray(start, dtype=np.int64) - origin) / 1e3, 3)
    e = np.round((np.asarray(end, dtype=np.int64) - origin) / 1e3, 3)
    xs = np.empty(len(s) * 3)
    xs[0::3], xs[1::3], xs[2::3] = s, e, np.nan
    ys = np.full(len(xs), lane, dtype=object)
    ys[2::3] = None
    hx, idx = _hover_points(s, e, HOVER_POINTS_PER_LANE)
    text = np.asarray(hover, dtype=object)[idx]
    return [
        {
            "type": "scattergl",
            "x": xs,
            "y": ys,
            "mode": "lines",
            "line": {"width": 14, "color": color},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": lane,
            "xaxis": "x",
            "yaxis": "y",
        },
        {
            "type": "scattergl",
            "x": np.round(hx, 3),
            "y": np.full(len(hx), lane, dtype=object),
            "mode": "markers",
            "marker": {"size": 6, "color": color, "opacity": 0.35},
            "hovertext": text,
            "hoverinfo": "text",
            "showlegend": False,
            "name": lane,
            "xaxis": "x",
            "yaxis": "y",
        },
    ]


_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]


def _step_lines(bounds: np.ndarray, xaxis: str, yaxis: str) -> dict[str, Any]:
    """Step boundaries as one trace of vertical segments on an overlay axis spanning 0..1."""
    xs = np.empty(len(bounds) * 3)
    xs[0::3], xs[1::3], xs[2::3] = bounds, bounds, np.nan
    ys = np.empty(len(bounds) * 3)
    ys[0::3], ys[1::3], ys[2::3] = 0.0, 1.0, np.nan
    return {
        "type": "scatter",
        "x": xs,
        "y": ys,
        "mode": "lines",
        "line": {"width": 1, "dash": "dot", "color": "#444"},
        "opacity": 0.6,
        "hoverinfo": "skip",
        "showlegend": False,
        "name": "step boundaries",
        "xaxis": xaxis,
        "yaxis": yaxis,
    }


def time_origin(profile: Profile) -> int:
    """The timeline's zero (ns): the first task or host event of any rank."""
    starts = [df["start_ns"].min() for df in (profile.tasks, profile.host_events) if len(df)]
    return int(min(starts)) if starts else 0


def timeline(profile: Profile) -> tuple[dict[str, Any], list[str], list[str]]:
    """The timeline figure (plotly JSON), its lane names (top to bottom) and notes about
    level of detail (what was aggregated or thinned out)."""
    tasks, host, mem, steps = profile.tasks, profile.host_events, profile.memory, profile.steps
    notes: list[str] = []
    origin = time_origin(profile)
    multi = len(profile.ranks) > 1
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04
    )
    traces: list[dict[str, Any]] = []
    lanes: list[str] = []
    for r in profile.ranks:
        prefix = f"rank {r} " if multi else ""
        h = host[(host["rank"] == r) & host["kind"].isin(["op", "sync", "python", "annotation"])]
        lane = f"{prefix}host"
        lanes.append(lane)
        traces += _lane_traces(
            lane,
            h["start_ns"].to_numpy(),
            h["end_ns"].to_numpy(),
            _host_hover(h) if len(h) <= MAX_SPANS_PER_LANE else None,
            h["name"].to_numpy(),
            origin,
            "#7f7f7f",
            notes,
        )
        t = tasks[tasks["rank"] == r]
        for i, (sid, ts) in enumerate(t.groupby("stream_id", sort=True)):
            lane = f"{prefix}stream {sid}"
            lanes.append(lane)
            traces += _lane_traces(
                lane,
                ts["start_ns"].to_numpy(),
                ts["end_ns"].to_numpy(),
                _task_hover(ts) if len(ts) <= MAX_SPANS_PER_LANE else None,
                ts["name"].to_numpy(),
                origin,
                _COLORS[i % len(_COLORS)],
                notes,
            )
    # step boundaries: one trace per row, on overlay axes y3 (over the lanes) and y4 (memory)
    bounds = np.unique(np.concatenate([steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()]))
    if len(bounds) > MAX_STEP_LINES:
        k = math.ceil(len(bounds) / MAX_STEP_LINES)
        notes.append(
            f"{len(bounds):,} step boundaries: one in {k} drawn ({len(bounds[::k]):,} lines)"
        )
        bounds = bounds[::k]
    if len(bounds):
        x = np.round((bounds - origin) / 1e3, 3)
        traces += [_step_lines(x, "x", "y3"), _step_lines(x, "x2", "y4")]
    annotations = (
        [
            {
                "x": round(((row.start_ns + row.end_ns) / 2 - origin) / 1e3, 3),
                "y": 1.0,
                "xref": "x",
                "yref": "paper",
                "text": f"step {row.step}",
                "showarrow": False,
                "font": {"size": 10},
                "yanchor": "bottom",
            }
            for row in steps.itertuples(index=False)
        ]
        if 0 < len(steps) <= 50
        else []
    )
    # memory
    for r in profile.ranks:
        m = mem[mem["rank"] == r].sort_values("time_ns")
        if m.empty:
            continue
        if len(m) > MAX_MEMORY_POINTS:
            total = len(m)
            m = _thin_memory(m)
            notes.append(f"memory (rank {r}): {total:,} events down-sampled to {len(m):,}")
        x = np.round((m["time_ns"].to_numpy() - origin) / 1e3, 3)
        for col, dash in (("allocated", None), ("reserved", "dot")):
            traces.append(
                {
                    "type": "scattergl",
                    "x": x,
                    "y": np.round(m[col].to_numpy() / 2**20, 4),
                    "mode": "lines",
                    "line": {"shape": "hv", "dash": dash},
                    "name": (f"rank {r} " if multi else "") + f"{col} MiB",
                    "hovertemplate": "%{y:.2f} MiB at %{x:.1f} us<extra>" + col + "</extra>",
                    "xaxis": "x2",
                    "yaxis": "y2",
                }
            )
    fig.update_yaxes(
        categoryorder="array", categoryarray=list(reversed(lanes)), type="category", row=1, col=1
    )
    fig.update_yaxes(title_text="MiB", row=2, col=1)
    fig.update_xaxes(title_text="time (us from the first event)", row=2, col=1)
    overlay = {"range": [0, 1], "visible": False, "fixedrange": True, "showgrid": False}
    fig.update_layout(
        height=260 + 45 * len(lanes),
        margin={"l": 90, "r": 20, "t": 30, "b": 40},
        hovermode="closest",
        dragmode="zoom",
        legend={"orientation": "h", "y": -0.15},
        yaxis3={**overlay, "overlaying": "y", "anchor": "x"},
        yaxis4={**overlay, "overlaying": "y2", "anchor": "x2"},
    )
    out = fig.to_plotly_json()
    out["data"] = traces
    out["layout"]["annotations"] = annotations
    return out, lanes, notes


def _thin_memory(m: pd.DataFrame) -> pd.DataFrame:
    """Memory events down-sampled to about :data:`MAX_MEMORY_POINTS` (every k-th event), the
    peaks of allocated and reserved always kept."""
    k = math.ceil(len(m) / MAX_MEMORY_POINTS)
    keep = np.zeros(len(m), dtype=bool)
    keep[::k] = True
    keep[int(np.argmax(m["reserved"].to_numpy()))] = True
    keep[int(np.argmax(m["allocated"].to_numpy()))] = True
    return m[keep]


# ---------------------------------------------------------------- other figures


def _top_ops(a: Any) -> go.Figure:
    df = a.top_ops["by_name"].head(TOP_N)
    labels = (
        df["name"].astype(str).map(html.escape)
        + " ["
        + df["input_shapes"].astype(str).map(html.escape)
        + "]"
    ).str.slice(0, 80)
    if "rank" in df and df["rank"].nunique() > 1:
        labels = "r" + df["rank"].astype(str) + " " + labels
    fig = go.Figure(
        go.Bar(
            x=df["total_ns"] / 1e3,
            y=labels,
            orientation="h",
            hovertemplate="%{y}<br>%{x:,.1f} us<extra></extra>",
        )
    )
    fig.update_layout(
        height=120 + 24 * len(df),
        yaxis={"autorange": "reversed", "automargin": True},
        xaxis_title="total device time (us)",
        margin={"t": 20, "b": 40},
    )
    return fig


#: the stacked parts of a step bar: they partition the step (computing + communication not
#: overlapped + free, free split by cause), so a bar is exactly as tall as the step
_STEP_COLUMNS = (
    ("computing_ns", "computing", True),
    ("comm_not_overlapped_ns", "communication (not overlapped)", True),
    ("idle_dispatch_ns", "free: idle dispatch", True),
    ("idle_sync_ns", "free: idle sync", True),
    ("idle_data_loading_ns", "free: idle data loading", True),
    ("idle_other_ns", "free: idle other", True),
    ("idle_copy_ns", "free: copies only", True),
)


def _step_groups(s: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """At most about :data:`MAX_STEP_BARS` bars per rank: runs of ``k`` consecutive steps
    averaged (``k`` = 1 keeps every step). Returns (one row per bar: rank, first, last and
    the mean of each step column, k)."""
    cols = [c for c, _, _ in _STEP_COLUMNS if c in s]
    s = s.sort_values(["rank", "step"] if "rank" in s else ["step"], kind="stable")
    rank = s["rank"] if "rank" in s else pd.Series(0, index=s.index)
    per_rank = int(rank.value_counts().max()) if len(s) else 0
    k = max(1, math.ceil(per_rank / MAX_STEP_BARS))
    pos = rank.groupby(rank).cumcount() // k
    g = s.groupby([rank.to_numpy(), pos.to_numpy()], sort=True)
    out = g[cols].mean()
    out["first"] = g["step"].min()
    out["last"] = g["step"].max()
    out.index = out.index.set_names(["rank", "group"])
    return out.reset_index(), k


def _steps(a: Any) -> tuple[go.Figure, str]:
    """Stacked bars per step (per run of consecutive steps when there are many) and a note
    saying which."""
    s = a.step_breakdown["steps"]
    multi = "rank" in s and s["rank"].nunique() > 1
    g, k = _step_groups(s)
    note = ""
    if k > 1:
        note = f"{len(s):,} steps: each bar is the mean of {k} consecutive steps ({len(g):,} bars)"
    first, last = g["first"].astype(int), g["last"].astype(int)
    label = np.where(first == last, first.astype(str), first.astype(str) + "-" + last.astype(str))
    prefix = "r" + g["rank"].astype(str) + " s" if multi else ("steps " if k > 1 else "step ")
    x = (prefix + pd.Series(label)).tolist()
    fig = go.Figure()
    for col, name, shown in _STEP_COLUMNS:
        if col in g:
            fig.add_trace(
                go.Bar(x=x, y=g[col] / 1e3, name=name, visible=True if shown else "legendonly")
            )
    title = "us" if k == 1 else f"us (mean of {k} steps)"
    fig.update_layout(barmode="stack", yaxis_title=title, height=380, margin={"t": 20, "b": 40})
    return fig, note


def _roofline(a: Any, meta: dict[str, Any]) -> tuple[go.Figure | None, str]:
    from msprof_py.analyzers.context import load_spec

    # every kernel (aggregated by op type and shapes, binned when many), not only the longest
    ops = a.compute_density.get("roofline")
    if ops is None:
        ops = a.compute_density["ops"]
    ops = ops[(ops["flops"] > 0) & (ops["intensity"] > 0)] if len(ops) else ops
    spec, why = load_spec(meta)  # from the profile itself, never a path it names
    note = f"device roofs unavailable: {why}" if spec is None else ""
    fig = go.Figure()
    units = ops["unit"] if "unit" in ops else pd.Series("kernels", index=ops.index)
    for unit in sorted(units.unique()) if len(ops) else []:
        part = ops[units == unit]
        hover = (
            "<b>"
            + _esc(part["op_type"])
            + "</b> ("
            + _esc(part["task_type"])
            + ")<br>"
            + _esc(part["input_shapes"])
            + " | "
            + _esc(part["input_dtypes"])
            + "<br>"
            + part["count"].astype(str)
            + " kernels, bound: "
            + _esc(part["bound"])
        )
        size = np.clip(np.sqrt(part["total_ns"].to_numpy(dtype=float) / 1e3) * 2, 5, 40)
        fig.add_trace(
            go.Scatter(
                x=part["intensity"],
                y=part["achieved_tflops"],
                mode="markers",
                marker={"size": size, "opacity": 0.7},
                text=hover,
                hovertemplate="%{text}<br>%{x:.3g} FLOP/B, %{y:.3g} TFLOP/s<extra></extra>",
                name=f"{unit} kernels",
            )
        )
    if spec is not None:
        bw = float(spec.memory.effective_bandwidth)
        xs = np.logspace(-3, 4, 200)
        roofs = []
        for label, fn, dtype in (
            ("cube fp16", spec.cube_peak_flops, "float16"),
            ("cube fp32", spec.cube_peak_flops, "float32"),
            ("vector fp32", spec.vector_peak_ops, "float32"),
        ):
            try:
                roofs.append((label, float(fn(dtype))))
            except Exception:
                continue
        for label, peak in roofs:
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=np.minimum(peak, bw * xs) / 1e12,
                    mode="lines",
                    name=f"{label} roof ({peak / 1e12:.1f} TFLOP/s)",
                    line={"dash": "dash"},
                )
            )
        note = note or f"HBM roof: {bw / 1e12:.2f} TB/s achievable"
    if not len(ops) and spec is None:
        return None, note or "no kernels with FLOPs"
    fig.update_layout(
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s"},
        height=450,
        margin={"t": 20, "b": 40},
    )
    return fig, note


def _memory(profile: Profile, a: Any) -> go.Figure | None:
    tl = a.memory["timeline"]
    if tl is None or len(tl) == 0:
        return None
    starts = [df["start_ns"].min() for df in (profile.tasks, profile.host_events) if len(df)]
    origin = int(min(starts)) if starts else 0
    fig = go.Figure()
    for r, m in tl.groupby("rank", sort=True):
        m = m.sort_values("time_ns")
        if len(m) > MAX_MEMORY_POINTS:
            m = _thin_memory(m)
        x = (m["time_ns"].to_numpy() - origin) / 1e3
        for col in ("allocated", "reserved"):
            fig.add_trace(
                go.Scattergl(
                    x=x,
                    y=m[col].to_numpy() / 2**20,
                    mode="lines",
                    line={"shape": "hv"},
                    name=f"rank {r} {col}",
                )
            )
        i = int(np.argmax(m["reserved"].to_numpy()))
        peak = float(m["reserved"].iloc[i])
        fig.add_trace(
            go.Scatter(
                x=[x[i]],
                y=[peak / 2**20],
                mode="markers+text",
                marker={"size": 12, "symbol": "star", "color": "red"},
                text=[f"peak {_bytes(peak)}"],
                textposition="top center",
                name=f"rank {r} peak reserved",
            )
        )
    fig.update_layout(
        xaxis_title="time (us from the first event)",
        yaxis_title="MiB",
        height=360,
        margin={"t": 20, "b": 40},
    )
    return fig


def _ranks(profile: Profile, a: Any) -> dict[str, Any] | None:
    if len(profile.ranks) < 2:
        return None
    s = a.step_breakdown["steps"]
    g = s.groupby("rank").agg(
        steps=("step", "size"),
        mean_step_ns=("step_ns", "mean"),
        computing_ns=("computing_ns", "mean"),
        comm_not_overlapped_ns=("comm_not_overlapped_ns", "mean"),
        free_ns=("free_ns", "mean"),
        utilisation=("utilisation", "mean"),
    )
    copy = pd.DataFrame(a.copy["summary"])
    mem = pd.DataFrame(a.memory["summary"])
    if "copy_ratio" in copy.columns:
        g = g.join(copy.set_index("rank")[["copy_ratio"]], how="left")
    if "peak_reserved" in mem.columns:  # ranks without memory events have none
        g = g.join(mem.set_index("rank")[["peak_reserved"]], how="left")
    g = g.reset_index()
    fig = go.Figure()
    for col, name in (
        ("computing_ns", "computing"),
        ("comm_not_overlapped_ns", "communication (not overlapped)"),
        ("free_ns", "free"),
    ):
        fig.add_trace(go.Bar(x=[f"rank {r}" for r in g["rank"]], y=g[col] / 1e3, name=name))
    fig.update_layout(barmode="stack", yaxis_title="mean us per step", height=360)
    return {
        "figure": _fig(fig),
        "table": _table(g),
        "comm": _table(a.communication.get("ranks")),
        "slow": a.communication.get("slow_rank"),
    }


# ---------------------------------------------------------------- document


def _header(profile: Profile, a: Any) -> dict[str, Any]:
    from msprof_py.analyzers.schema import headline

    rank = a.profile.get("focus_rank", profile.ranks[0])
    meta = profile.meta.get(rank, {})
    head = headline(a)
    figures = {
        "step time (mean)": _us(a.profile.get("mean_step_ns")),
        "step time (median)": _us(a.profile.get("median_step_ns")),
        "device utilisation": _pct(head.get("utilisation")),
        "copy ratio": _pct(head.get("copy_ratio")),
        "cube utilisation": _pct(head.get("cube_utilisation")),
        "vector utilisation": _pct(head.get("vector_utilisation")),
        "peak memory (reserved)": _bytes(head.get("peak_reserved_bytes")),
        "findings fired": str(head.get("findings_fired")),
        "estimated gain (bound)": f"at most {head.get('estimated_gain_us') or 0:,.1f} us/step",
    }
    classes = a.compute_density.get("classes")
    density = []
    if classes is not None and len(classes):
        mine = classes[classes["rank"] == rank] if "rank" in classes else classes
        density = [
            f"{b}: {_pct(s)}" for b, s in zip(mine["bound"], mine["share_of_step"], strict=True)
        ]
    steps = profile.steps
    return {
        "command": str(meta.get("command", "")),
        "device": str(meta.get("device", "")),
        "soc": str(meta.get("soc_version", "")),
        "key_figures": {str(k): str(v) for k, v in (meta.get("key_figures") or {}).items()},
        "numerics": str(meta.get("numerics", "")),
        "host_time": str(meta.get("host_time", "")),
        "status": ", ".join(f"rank {r}: {m.get('status', '?')}" for r, m in profile.meta.items()),
        "ranks": profile.ranks,
        "steps_total": int(steps["step"].nunique()) if len(steps) else 0,
        "steps_analysed": step_list(a.profile.get("steps_analysed")),
        "warmup_skipped": step_list(a.profile.get("warmup_skipped")),
        "start_time": str(meta.get("start_time", "")),
        "path": str(profile.path),
        "figures": figures,
        "density": density,
        "focus_rank": rank,
        "partial": bool(profile.partial or a.profile.get("partial")),
        "warnings": [str(w) for w in (profile.warnings or a.profile.get("warnings") or [])],
        "notes": [str(n) for n in a.profile.get("notes", [])],
        "gain_basis": str(head.get("estimated_gain_basis") or ""),
    }


#: evidence keys whose values name ops (host op names such as aten::add_, or op types)
_OP_KEYS = ("name", "op", "op_type")
MAX_OP_LINKS = 8


def _evidence_ops(evidence: Any, found: list[str]) -> list[str]:
    """The op names in a finding's evidence (the ``name``/``op``/``op_type`` of its rows)."""
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            if key in _OP_KEYS and isinstance(value, str) and value and value not in found:
                found.append(value)
            elif isinstance(value, dict | list):
                _evidence_ops(value, found)
    elif isinstance(evidence, list):
        for item in evidence:
            _evidence_ops(item, found)
    return found


def _op_spans(profile: Profile, rank: int, names: set[str]) -> dict[str, tuple[float, float]]:
    """Where each named op ran longest on ``rank`` (a device task by name or op type, else a
    host event), as (start, end) in us on the timeline's axis."""
    origin = time_origin(profile)
    spans: dict[str, tuple[float, float]] = {}
    tables = [(profile.tasks, ("name", "op_type")), (profile.host_events, ("name",))]
    for df, columns in tables:
        df = df[df["rank"] == rank]
        for column in columns:
            hit = df[df[column].isin(names - set(spans))]
            if hit.empty:
                continue
            longest = (hit["end_ns"] - hit["start_ns"]).groupby(hit[column], observed=True)
            for name, row in longest.idxmax().items():
                start, end = df.at[row, "start_ns"], df.at[row, "end_ns"]
                spans[str(name)] = (
                    round((start - origin) / 1e3, 3),
                    round((end - origin) / 1e3, 3),
                )
    return spans


def _findings(a: Any, profile: Profile) -> list[dict[str, Any]]:
    fired = a.fired()
    named = {f.rule: _evidence_ops(f.to_dict().get("evidence"), [])[:MAX_OP_LINKS] for f in fired}
    rank = a.profile.get("focus_rank", profile.ranks[0] if profile.ranks else 0)
    every = {n for names in named.values() for n in names}
    spans = _op_spans(profile, rank, every) if every else {}
    out = []
    for f in fired:
        d = f.to_dict()
        gain = d.get("estimated_gain_us")
        ops = [
            {"name": n, "start": spans[n][0], "end": spans[n][1]}
            for n in named[f.rule]
            if n in spans
        ]
        out.append(
            {
                "priority": d.get("priority") or "-",
                "title": d.get("title", ""),
                "rule": d.get("rule", ""),
                "area": d.get("area", ""),
                "message": d.get("message", ""),
                "advice": d.get("advice", ""),
                "evidence": json.dumps(d.get("evidence"), indent=2, default=str),
                "gain": "-" if gain is None else f"{gain:,.1f} us/step",
                "gain_model": d.get("gain_model") or "",
                "gain_basis": d.get("gain_basis") or "",
                "rank": d.get("rank"),
                "ops": ops,
            }
        )
    return out


def _environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader("msprof_py", "report_templates")
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)


def build_html(profile: Profile, analysis: Any | None = None) -> str:
    """The report of ``profile`` as one self-contained HTML document."""
    from msprof_py.analyzers import analyze

    a = analysis if analysis is not None else analyze(profile)
    rank = a.profile.get("focus_rank", profile.ranks[0])
    tl, lanes, notes = timeline(profile)
    roof, roof_note = _roofline(a, profile.meta.get(rank, {}))
    mem = _memory(profile, a)
    steps, steps_note = _steps(a)
    copy = a.copy
    context = {
        "header": _header(profile, a),
        "plotlyjs": plotly.offline.get_plotlyjs(),
        "figures": {
            "timeline": _json(tl),
            "top_ops": _fig(_top_ops(a)),
            "steps": _fig(steps),
            "roofline": _fig(roof) if roof is not None else None,
            "memory": _fig(mem) if mem is not None else None,
        },
        "lanes": lanes,
        "lanes_json": _json(lanes),
        "timeline_notes": notes,
        "steps_note": steps_note,
        "roof_note": roof_note,
        "top_by_name": _table(a.top_ops["by_name"], limit=TOP_N * 2),
        "top_by_type": _table(a.top_ops["by_type"], limit=TOP_N * 2),
        "op_statistic": _table(a.op_statistic, limit=40),
        "steps_table": _table(a.step_breakdown["steps"]),
        "idle": _table(a.step_breakdown.get("idle")),
        "gaps": _table(a.step_breakdown.get("gaps"), limit=20),
        "copy_summary": _table(pd.DataFrame(copy.get("summary") or [])),
        "copy_direction": _table(copy.get("by_direction")),
        "density_ops": _table(a.compute_density["ops"], limit=30),
        "memory_summary": _table(pd.DataFrame(a.memory.get("summary") or [])),
        "memory_steps": _table(a.memory.get("steps")),
        "findings": _findings(a, profile),
        "ranks": _ranks(profile, a),
    }
    return _environment().get_template("report.html.j2").render(**context)


def _free_name(path: Path) -> Path:
    if not path.exists():
        return path
    for i in range(1, 10_000):
        candidate = path.with_name(f"{path.stem}-{i}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise ReportError(f"{path}: no free file name next to it")


def write_report(
    path_or_profile: Profile | str | Path,
    out_file: str | Path | None = None,
    analysis: Any | None = None,
) -> Path:
    """Write the HTML report; returns the file written (never overwrites: ``report-1.html``).

    ``analysis``: the profile's :func:`msprof_py.analyze` result, when the caller has it.
    """
    if isinstance(path_or_profile, Profile):
        profile = path_or_profile
    else:
        from msprof_py.analyzers.api import resolve

        # strings as categoricals: the same report from a fraction of the memory
        profile = resolve(path_or_profile, categorical=True)
    if not profile.ranks:
        raise ProfileError(f"{profile.path}: the profile has no ranks")
    text = build_html(profile, analysis)
    target = Path(out_file) if out_file is not None else Path(profile.path) / "report.html"
    if target.is_dir():
        target = target / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        target = _free_name(target)
        try:
            with create_atomically(target, "x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            continue
        return target
    raise ReportError(f"{target}: could not create a new file")
