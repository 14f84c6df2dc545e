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
from plotly.utils import PlotlyJSONEncoder

from msprof_py.analyzers.render import numbers, ranks_text, step_list
from msprof_py.profile import Profile, ProfileError
from msprof_py.profile.atomic import create_atomically
from msprof_py.report import tables
from msprof_py.report.graphs import graph_section
from msprof_py.report.timeline import (
    MAX_MEMORY_POINTS,
    _rank_prefix,
    _thin_memory,
    time_origin,
    timeline,
)

#: bars in the step-time chart; above this, runs of consecutive steps are averaged
MAX_STEP_BARS = 500
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


def _fig(fig: go.Figure) -> str:
    return _json(fig.to_plotly_json())


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
                go.Scatter(  # SVG: see timeline.py's memory lines
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
        "table": tables.table(g),
        "comm": tables.table(a.communication.get("ranks")),
        "slow": a.communication.get("slow_rank"),
    }


# ---------------------------------------------------------------- document


def joint_figure(head: dict[str, Any]) -> str:
    """The headline's re-costed combined gain as a key figure ("" when there is none)."""
    if head.get("joint_gain_us") is None:
        return ""
    rest = head.get("joint_gain_not_included") or []
    return (
        f"{head['joint_gain_us']:,.1f} us/step for {', '.join(head['joint_gain_rules'])} "
        "applied together (replayed)" + (f"; {', '.join(rest)} only in the bound" if rest else "")
    )


def warmup_words(steps: Any) -> str:
    """``step 0 left out as warm-up`` / ``steps 0, 1 left out as warm-up`` / ``no warm-up
    step left out``."""
    steps = list(steps or [])
    if not steps:
        return "no warm-up step left out"
    if len(steps) == 1:
        return f"step {steps[0]} left out as warm-up"
    return f"steps {numbers(steps)} left out as warm-up"


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
    joint = joint_figure(head)
    if joint:
        figures["estimated gain (re-costed)"] = joint
    classes = a.compute_density.get("classes")
    density = []
    if classes is not None and len(classes):
        mine = classes[classes["rank"] == rank] if "rank" in classes else classes
        density = [
            f"{b}: {_pct(s)}" for b, s in zip(mine["bound"], mine["share_of_step"], strict=True)
        ]
    steps = profile.steps
    cut = [
        f"rank {r}: {m.get('status')}"
        for r, m in profile.meta.items()
        if str(m.get("status", "")) in ("killed", "partial", "recording_error")
    ]
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
        "warmup_text": warmup_words(a.profile.get("warmup_skipped")),
        "ranks_text": ranks_text(list(profile.ranks))
        + (f", details for rank {rank}" if len(profile.ranks) > 1 else ""),
        "start_time": str(meta.get("start_time", "")),
        "path": str(profile.path),
        "figures": figures,
        "density": density,
        "focus_rank": rank,
        "partial": bool(profile.partial or a.profile.get("partial")) or bool(cut),
        "cut": cut,
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


def _op_spans(
    profile: Profile,
    rank: int,
    names: set[str],
    steps: list[int] | None = None,
    slow: int | None = None,
) -> dict[str, tuple[float, float, str]]:
    """Where each named op ran longest on ``rank`` within the analysed ``steps`` (never in a
    warm-up step the analysis left out): a device task by name or op type, else a host
    event; as (start, end) in us on the timeline's axis and the lane it is drawn on."""
    origin = time_origin(profile)
    spans: dict[str, tuple[float, float, str]] = {}
    lanes: dict[tuple[Any, ...], Any] = {}
    prefix = _rank_prefix(profile, rank, slow)
    tables_ = [(profile.tasks, ("name", "op_type")), (profile.host_events, ("name",))]
    for df, columns in tables_:
        df = df[df["rank"] == rank]
        if steps:
            df = df[df["step"].isin(steps)]
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
                    _lane_of(profile, df.loc[row], prefix, lanes),
                )
    return spans


def _lane_of(
    profile: Profile, row: pd.Series, prefix: str, cache: dict[tuple[Any, ...], Any]
) -> str:
    """The name of the lane a task or host event is drawn on (without a slow-rank mark);
    ``cache``: lane names already found (a stream's role reads all of its tasks)."""
    from msprof_py.report.lanes import stream_role, task_queue_on, thread_roles

    rank = int(row["rank"])
    if "task_id" in row and "stream_id" in row and "event_id" not in row:
        sid = row["stream_id"]
        key: tuple[Any, ...] = ("stream", rank, sid)
        if key not in cache:
            t = profile.tasks
            role = stream_role(t[(t["rank"] == rank) & (t["stream_id"] == sid)])
            cache[key] = f"{prefix}stream {sid} · {role}"
        return str(cache[key])
    if str(row["kind"]) == "launch":
        queue = task_queue_on(profile.meta.get(rank, {}))
        return prefix + ("task-queue stage 2" if queue else "launches")
    key = ("threads", rank)
    if key not in cache:
        h = profile.host_events
        cache[key] = thread_roles(h[h["rank"] == rank], profile.thread_names(rank))
    roles: dict[int, str] = cache[key]
    return prefix + roles.get(int(row["thread"]), "")


def _findings(a: Any, profile: Profile) -> list[dict[str, Any]]:
    fired = a.fired()
    named = {f.rule: _evidence_ops(f.to_dict().get("evidence"), [])[:MAX_OP_LINKS] for f in fired}
    rank = a.profile.get("focus_rank", profile.ranks[0] if profile.ranks else 0)
    every = {n for names in named.values() for n in names}
    analysed = [int(x) for x in a.profile.get("steps_analysed") or []]
    slow = ((getattr(a, "communication", None) or {}).get("slow_rank") or {}).get("slow_rank")
    spans = _op_spans(profile, rank, every, analysed, slow) if every else {}
    out = []
    for f in fired:
        d = f.to_dict()
        gain = d.get("estimated_gain_us")
        ops = [
            {"name": n, "start": spans[n][0], "end": spans[n][1], "lane": spans[n][2]}
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
                "evidence": tables.evidence(d.get("evidence")),
                "gain": "-" if gain is None else f"{gain:,.1f} us/step",
                "gain_model": d.get("gain_model") or "",
                "gain_basis": d.get("gain_basis") or "",
                "rank": d.get("rank"),
                "ops": ops,
            }
        )
    return out


#: the step table's columns: the step's parts, then the host side
_STEP_TABLE = [
    "rank",
    "step",
    "step_ns",
    "computing_ns",
    "comm_not_overlapped_ns",
    "free_ns",
    "idle_dispatch_ns",
    "idle_sync_ns",
    "idle_data_loading_ns",
    "idle_other_ns",
    "idle_copy_ns",
    "utilisation",
    "host_step_ns",
]
_DENSITY_TABLE = [
    "rank",
    "op_type",
    "name",
    "input_shapes",
    "task_type",
    "count",
    "total_ns",
    "flops",
    "bytes",
    "intensity",
    "achieved_tflops",
    "peak_tflops",
    "utilisation",
    "bound",
]
_OP_KEYS_JOIN = ["rank", "name", "op_type", "task_type", "input_shapes", "input_dtypes"]
_OPERATOR_COLUMNS = [
    "rank",
    "op_type",
    "name",
    "input_shapes",
    "input_dtypes",
    "task_type",
    "count",
    "total_ns",
    "mean_ns",
    "max_ns",
    "share_of_step",
    "bound",
]


def _operators(a: Any) -> pd.DataFrame:
    """The operator view (as MindStudio Insight's): type, name, shapes, unit, count,
    total/avg/max, share of step and what bounds it (from the roofline analysis)."""
    ops = a.top_ops["by_name"]
    density = a.compute_density.get("ops")
    if density is not None and len(density) and "bound" in density:
        keys = [k for k in _OP_KEYS_JOIN if k in ops and k in density]
        bound = density[[*keys, "bound"]].drop_duplicates(keys)
        ops = ops.merge(bound, on=keys, how="left")
    return ops[[c for c in _OPERATOR_COLUMNS if c in ops]]


#: the module tree's columns in the report (the module column indented by depth)
_MODULE_COLUMNS = [
    "rank",
    "module",
    "class_name",
    "self_forward_ns",
    "self_backward_ns",
    "self_other_ns",
    "total_forward_ns",
    "total_backward_ns",
    "total_ns",
    "share_of_device",
    "total_ops_per_step",
    "total_kernels_per_step",
]
#: rows of the module tree in the report
MODULE_ROWS = 500


def _module_tree(a: Any) -> dict[str, Any]:
    """The module tree as a table: each module by its name, indented by its depth; sorting
    by the module column brings back the tree order."""
    tree = a.modules.get("tree") if hasattr(a, "modules") else None
    if tree is None or len(tree) < 2:
        return tables.table(None)
    shown = tree.assign(
        module=[
            "\u00a0\u00a0" * int(d) + (m.rsplit(".", 1)[-1] if m else n)
            for d, m, n in zip(tree["depth"], tree["module"], tree["name"], strict=True)
        ]
    )
    out = tables.table(shown, columns=_MODULE_COLUMNS, limit=MODULE_ROWS, headers=_MODULE_HEADERS)
    at = [c for c in _MODULE_COLUMNS if c in shown.columns]
    if "rank" in at and shown["rank"].nunique() < 2:
        at.remove("rank")
    col = at.index("module")
    for i, row in enumerate(out["rows"]):
        row[col] = (row[col][0], f"{i:07d}")  # sorting by it: the tree order again
    return out


_MODULE_HEADERS = {"module": "Module", "class_name": "Class", "share_of_device": "Share of device"}


def _script() -> str:
    """The page's own script (timeline interaction, sortable tables)."""
    from importlib.resources import files

    return (files("msprof_py") / "report_templates" / "report.js").read_text(encoding="utf-8")


def _environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader("msprof_py", "report_templates")
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)


def build_html(profile: Profile, analysis: Any | None = None) -> str:
    """The report of ``profile`` as one self-contained HTML document."""
    from msprof_py.analyzers import analyze

    a = analysis if analysis is not None else analyze(profile)
    rank = a.profile.get("focus_rank", profile.ranks[0])
    tl, lanes, notes, store = timeline(profile, a)
    roof, roof_note = _roofline(a, profile.meta.get(rank, {}))
    mem = _memory(profile, a)
    steps, steps_note = _steps(a)
    copy = a.copy
    context = {
        "header": _header(profile, a),
        "plotlyjs": plotly.offline.get_plotlyjs(),
        "script": _script(),
        "figures": {
            "timeline": _json(tl),
            "top_ops": _fig(_top_ops(a)),
            "steps": _fig(steps),
            "roofline": _fig(roof) if roof is not None else None,
            "memory": _fig(mem) if mem is not None else None,
        },
        "lanes": lanes,
        "lanes_json": _json(lanes),
        "store_json": _json(store),
        "timeline_notes": notes,
        "steps_note": steps_note,
        "roof_note": roof_note,
        "operators": tables.table(_operators(a), limit=TOP_N * 2),
        "top_by_type": tables.table(a.top_ops["by_type"], limit=TOP_N * 2),
        "steps_table": tables.table(a.step_breakdown["steps"], columns=_STEP_TABLE),
        "idle": tables.table(a.step_breakdown.get("idle")),
        "gaps": tables.table(a.step_breakdown.get("gaps"), limit=20),
        "copy_summary": tables.table(pd.DataFrame(copy.get("summary") or [])),
        "copy_direction": tables.table(copy.get("by_direction")),
        "density_ops": tables.table(a.compute_density["ops"], columns=_DENSITY_TABLE, limit=30),
        "memory_summary": tables.table(pd.DataFrame(a.memory.get("summary") or [])),
        "memory_steps": tables.table(a.memory.get("steps")),
        "module_tree": _module_tree(a),
        "graph_mode": graph_section(profile, a),
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
    home = Path(profile.path)
    if not home.is_dir():  # an imported trace file: the report goes next to it
        home = home.parent
    target = Path(out_file) if out_file is not None else home / "report.html"
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
