"""The timeline figure: one lane per host thread (named by role), one for launches and one per
device stream (named by role), per rank; device tasks coloured by unit, with a legend; step
boundaries and device memory below. Built as plain plotly dicts (plotly's per-element
validation of large arrays is the slow part of building a figure) plus a compact span table
the page's script uses for labels, selection and launch-to-kernel links.

Compact: lanes are numbered on a linear y axis (``tickvals`` and ``ticktext`` name them), every
numeric array goes in as a base64 typed array (plotly.js reads ``{"dtype", "bdata"}``).

Level of detail: a lane with more than :data:`MAX_SPANS_PER_LANE` spans is drawn as time bins
(per unit) that the page's script draws from the bins' columns (:func:`_bin_lane`: start, end,
spans, busy and span time, the name with most time) and gives hover text. Its spans go into the
page too, zlib-compressed in chunks of :data:`DETAIL_CHUNK` spans in time order
(:func:`_detail_chunks`, :data:`DETAIL_BYTES` in all), which the page inflates once the view
holds at most :data:`MAX_SPANS_PER_LANE` of them and draws one by one, labels included.
"""

from __future__ import annotations

import base64
import html
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from plotly.subplots import make_subplots

from msprof_py.analyzers.modules import module_labels
from msprof_py.profile import Profile
from msprof_py.report.lanes import (
    HOST_COLORS,
    THREAD_KINDS,
    UNIT_COLORS,
    host_units,
    stream_role,
    task_queue_on,
    task_units,
    thread_roles,
)

#: spans per timeline lane drawn one by one; above this a lane is aggregated into time bins
MAX_SPANS_PER_LANE = 20_000
#: memory points drawn; above this the line is down-sampled (the peak is always kept)
MAX_MEMORY_POINTS = 20_000
#: step boundaries drawn as lines
MAX_STEP_LINES = 500
#: extra hover points along a lane's long spans (besides one per span, at its middle), per unit
#: of a lane drawn span by span (the page's ``HOVER_POINTS``), shared by the units of a binned one
HOVER_POINTS_PER_LANE = 2_000
#: spans per detail chunk of a binned lane (the page inflates the chunks the view overlaps)
DETAIL_CHUNK = 20_000
#: the compressed detail of all binned lanes together (base64 characters); chunks are taken in
#: time order until it is spent, so a profile too large for it has detail from its start on
DETAIL_BYTES = 3 * 2**20
#: time bins of all binned lanes together (each lane at most MAX_SPANS_PER_LANE // 2): the
#: report of a profile with many binned lanes stays as large as one with three
TOTAL_BINS = 30_000
#: the bar thickness of a lane (px)
BAR_PX = 14


def _esc(values: pd.Series) -> pd.Series:
    return values.fillna("").astype(str).map(html.escape)


#: hover texts are stored without markup (each "<" costs 6 characters in the page's JSON): the
#: name, a tab, the rest of the first line, then lines split by "\n"; the page makes the name
#: bold and the breaks ``<br>`` (:func:`hover_html` does the same, for tests)
HOVER_NAME_END, HOVER_BREAK = "\t", "\n"


def hover_html(text: str) -> str:
    """A stored hover text as the page shows it (plotly's hover markup)."""
    name, _, rest = text.partition(HOVER_NAME_END)
    return "<b>" + name + "</b>" + rest.replace(HOVER_BREAK, "<br>")


def _task_hover(t: pd.DataFrame) -> pd.Series:
    dur = (t["end_ns"] - t["start_ns"]) / 1e3
    return (
        _esc(t["name"])
        + "\t ("
        + _esc(t["op_type"])
        + ")\nunit: "
        + _esc(t["task_type"])
        + "\nin: "
        + _esc(t["input_shapes"])
        + " | "
        + _esc(t["input_dtypes"])
        + " | "
        + _esc(t["input_formats"])
        + "\nout: "
        + _esc(t["output_shapes"])
        + " | "
        + _esc(t["output_dtypes"])
        + " | "
        + _esc(t["output_formats"])
        + "\nFLOPs: "
        + t["flops"].map(lambda v: f"{v:,.0f}")
        + "  bytes: "
        + t["bytes"].map(lambda v: f"{v:,}")
        + "\nduration: "
        + dur.map(lambda v: f"{v:,.3f}")
        + " us"
    )


def call_sites(ops: pd.DataFrame) -> np.ndarray:
    """Per host op, the innermost user frame of its recorded stack (``train.py:42(step)``;
    empty without ``--with-stack``)."""
    if "stack" not in ops.columns:
        return np.full(len(ops), "", dtype=object)
    stacks = ops["stack"].astype(object).fillna("").astype(str)
    return stacks.str.rsplit(";", n=1).str[-1].to_numpy(dtype=object)


def _host_hover(h: pd.DataFrame) -> pd.Series:
    if h.empty:
        return pd.Series([], index=h.index, dtype=object)
    dur = (h["end_ns"] - h["start_ns"]) / 1e3
    return (
        _esc(h["name"])
        + "\t ["
        + _esc(h["kind"])
        + "]\nmodule: "
        + _esc(module_labels(h))
        + "\nin: "
        + _esc(h["input_shapes"])
        + " | "
        + _esc(h["input_dtypes"])
        + "\nduration: "
        + dur.map(lambda v: f"{v:,.3f}")
        + " us"
    )


def _aggregate(start: np.ndarray, end: np.ndarray, names: np.ndarray, bins: int) -> pd.DataFrame:
    """Level of detail for one lane: its spans merged into at most ``bins`` time bins.

    The lane's time range ``[min start, max end]`` is cut into ``bins`` bins of equal width and
    each span goes to the bin its start falls in. One row per non-empty bin, in time order:

    - ``start``, ``end``: the earliest start and the latest end of the bin's spans, so every span
      lies inside its bin's extent (an extent reaches past the bin's edge when a span does);
    - ``spans``: how many spans (they add up to the lane's spans);
    - ``span_ns``: the sum of their durations (adds up to the lane's total span time);
    - ``busy_ns``: the length of the union of the bin's spans, at most ``end - start``; equal
      to ``span_ns`` where spans do not overlap (a stream), less where they nest (the host);
    - ``top``: the name with the most span time in the bin (ties: the one first in the lane).

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
    codes, uniques = pd.factorize(pd.Series(names).reset_index(drop=True))
    uniques = np.append(np.asarray(uniques, dtype=object), "")  # code -1 (missing): ""
    codes = codes[order]
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
    agg["top"] = uniques[top.reindex(agg.index).to_numpy()]
    out = agg.reset_index(drop=True)
    out.attrs["width_ns"] = width
    return out


def _hover_points(s: np.ndarray, e: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Where a lane's spans can be hovered: every span at its midpoint, long spans also at
    evenly spaced points along them (at most about ``points`` extra points in the lane), so
    the hover label shows near any part of a long span, not only near its middle (the page's
    ``hoverPoints`` does the same from the span store).
    Returns (x of each hover point, index of its span)."""
    d = e - s
    scale = max(float(e.max() - s.min()), float(d.sum()))
    step = scale / points if scale > 0 else 1.0
    k = np.clip(np.ceil(d / step), 1, points).astype(np.int64)
    idx = np.repeat(np.arange(len(s)), k)
    j = np.arange(len(idx)) - np.repeat(np.cumsum(k) - k, k)
    x = s[idx] + (j + 0.5) * (d[idx] / k[idx])
    return x, idx


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


def _thin_memory(m: pd.DataFrame) -> pd.DataFrame:
    """Memory events down-sampled to about :data:`MAX_MEMORY_POINTS` (every k-th event), the
    peaks of allocated and reserved always kept."""
    k = math.ceil(len(m) / MAX_MEMORY_POINTS)
    keep = np.zeros(len(m), dtype=bool)
    keep[::k] = True
    keep[int(np.argmax(m["reserved"].to_numpy()))] = True
    keep[int(np.argmax(m["allocated"].to_numpy()))] = True
    return m[keep]


@dataclass
class Lane:
    """One lane of the timeline: its name (the y category), the rank, what it holds (``thread``,
    ``launch`` or ``stream``) and its spans (start_ns, end_ns, name, unit, id, hover ...)."""

    name: str
    rank: int
    kind: str
    spans: pd.DataFrame
    binned: bool = False
    offset: int = 0  # global index of the lane's first span (drawn lanes only)
    extra: dict[str, Any] = field(default_factory=dict)


def time_origin(profile: Profile) -> int:
    """The timeline's zero (ns): the first task or host event of any rank."""
    starts = [df["start_ns"].min() for df in (profile.tasks, profile.host_events) if len(df)]
    return int(min(starts)) if starts else 0


def _col(df: pd.DataFrame, column: str) -> pd.Series:
    """A string column as it is (categorical or Arrow strings: no Python object per row)."""
    return df[column].reset_index(drop=True)


def rank_lanes(profile: Profile, rank: int, prefix: str) -> list[Lane]:
    """The lanes of one rank, top to bottom: its host threads (main first), its launches, its
    device streams."""
    host = profile.host_events
    h = host[host["rank"] == rank]
    lanes: list[Lane] = []
    ops = h[h["kind"].astype(str).isin(THREAD_KINDS)]
    roles = thread_roles(ops, profile.thread_names(rank))
    for thread, role in roles.items():  # main thread first
        mine = ops[ops["thread"] == thread]
        spans = pd.DataFrame(
            {
                "start_ns": mine["start_ns"].to_numpy(),
                "end_ns": mine["end_ns"].to_numpy(),
                "name": _col(mine, "name"),
                "unit": host_units(mine),
                "id": mine["event_id"].to_numpy(),
                "module": module_labels(mine).reset_index(drop=True),
                "site": call_sites(mine),
            }
        )
        lane = Lane(f"{prefix}{role}", rank, "thread", spans)
        lane.extra["source"] = mine
        lanes.append(lane)
    launches = h[h["kind"].astype(str) == "launch"]
    if len(launches):
        queue = task_queue_on(profile.meta.get(rank, {}))
        name = "task-queue stage 2" if queue else "launches"
        spans = pd.DataFrame(
            {
                "start_ns": launches["start_ns"].to_numpy(),
                "end_ns": launches["end_ns"].to_numpy(),
                "name": _col(launches, "name"),
                "unit": "launch",
                "id": launches["event_id"].to_numpy(),
                "task": launches["task_id"].to_numpy(),
                "stream": launches["stream_id"].to_numpy(),
            }
        )
        lane = Lane(f"{prefix}{name}", rank, "launch", spans)
        lane.extra["source"] = launches
        lanes.append(lane)
    tasks = profile.tasks
    t = tasks[tasks["rank"] == rank]
    for sid, ts in t.groupby("stream_id", sort=True, observed=True):
        spans = pd.DataFrame(
            {
                "start_ns": ts["start_ns"].to_numpy(),
                "end_ns": ts["end_ns"].to_numpy(),
                "name": _col(ts, "name"),
                "unit": task_units(ts),
                "id": ts["task_id"].to_numpy(),
                "op": ts["host_op_id"].to_numpy(),
            }
        )
        lane = Lane(f"{prefix}stream {sid} · {stream_role(ts)}", rank, "stream", spans)
        lane.extra["source"] = ts
        lanes.append(lane)
    return lanes


def _color(unit: str) -> str:
    return UNIT_COLORS.get(unit) or HOST_COLORS.get(unit) or UNIT_COLORS["other"]


def typed(values: Any, dtype: str | None = None, compress: bool = False) -> dict[str, Any]:
    """``values`` as a base64 typed array, the form plotly.js reads for any data array:
    ``{"dtype": "f8", "bdata": ...}``. ``dtype``: ``f8``, ``f4`` or ``i4``; by default
    non-negative integers take the smallest of ``u1``, ``u2``, ``u4`` (``f8`` above), anything
    else ``f8``. ``compress``: the bytes zlib-compressed first (``"z": 1``; the page inflates
    them, plotly cannot)."""
    a = np.asarray(values)
    if dtype is None:
        dtype = "f8"
        if a.dtype.kind in "iub" and (len(a) == 0 or a.min() >= 0):
            top = int(a.max()) if len(a) else 0
            dtype = "u1" if top < 2**8 else "u2" if top < 2**16 else "u4" if top < 2**32 else "f8"
    raw = np.ascontiguousarray(a, dtype="<" + dtype).tobytes()
    out: dict[str, Any] = {"dtype": dtype}
    if compress:
        raw = zlib.compress(raw, 6)
        out["z"] = 1
    out["bdata"] = base64.b64encode(raw).decode("ascii")
    return out


class _Codes:
    """Strings as small integers (one table for the page)."""

    def __init__(self) -> None:
        self.table: dict[str, int] = {}

    def array(self, values: Any) -> np.ndarray:
        """The code of each of ``values`` (missing ones: the empty string)."""
        values = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
        codes, uniques = pd.factorize(values)
        keys = [*(str(u) for u in uniques), ""]  # code -1 (missing): ""
        mapping = np.array([self.table.setdefault(k, len(self.table)) for k in keys])
        return mapping[codes]

    def __call__(self, values: Any) -> list[int]:
        return self.array(values).tolist()


def _hover(lane: Lane) -> pd.Series:
    src = lane.extra["source"]
    return _task_hover(src) if lane.kind == "stream" else _host_hover(src)


def _units(sp: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each span's unit, and the lane's units in legend order."""
    units = sp["unit"].to_numpy(dtype=object)
    order = list(dict.fromkeys(units.tolist()))
    order.sort(key=lambda u: list(UNIT_COLORS).index(u) if u in UNIT_COLORS else 99)
    return units, order


def _lane_units(lane: Lane, legend: set[str]) -> list[dict[str, Any]]:
    """The units of a lane drawn span by span, in legend order: per unit its colour and whether
    it joins the legend (``legend``: the units already in it). The page draws the lane from
    the span store (:func:`_span_store`: per unit its spans as thick line segments and hover
    markers along them, each carrying its span's global index), so the figure holds no copy
    of the spans' times."""
    if len(lane.spans) == 0:
        return []
    _, order = _units(lane.spans)
    out = []
    for unit in order:
        out.append({"unit": unit, "color": _color(unit), "legend": unit not in legend})
        legend.add(unit)
    return out


def _bin_lane(
    lane: Lane, pos: int, origin: int, legend: set[str], codes: _Codes, notes: list[str]
) -> dict[str, Any]:
    """A lane of more than :data:`MAX_SPANS_PER_LANE` spans as time bins per unit, for the page
    to draw: per unit its colour, whether it joins the legend, and the bins' columns (start
    and end in us, spans, busy and span time in us, code of the name with most time)."""
    sp = lane.spans
    n = len(sp)
    units, order = _units(sp)
    budget = lane.extra.get("bins", MAX_SPANS_PER_LANE // 2)
    out: dict[str, Any] = {"lane": pos, "units": []}
    bins_total, width = 0, 0
    names = sp["name"]
    for unit in order:
        mine = units == unit
        start, end = sp["start_ns"].to_numpy()[mine], sp["end_ns"].to_numpy()[mine]
        agg = _aggregate(start, end, names[mine], max(50, round(budget * mine.sum() / n)))
        bins_total += len(agg)
        width = max(width, agg.attrs["width_ns"])
        out["units"].append(
            {
                "unit": unit,
                "color": _color(unit),
                "legend": unit not in legend,
                "s": typed((agg["start"].to_numpy() - origin) / 1e3),
                "e": typed((agg["end"].to_numpy() - origin) / 1e3),
                "c": typed(agg["spans"].to_numpy()),
                "busy": typed(agg["busy_ns"].to_numpy() / 1e3, "f4"),
                "span": typed(agg["span_ns"].to_numpy() / 1e3, "f4"),
                "top": typed(codes.array(agg["top"].to_numpy())),
            }
        )
        legend.add(unit)
    notes.append(
        f"{lane.name}: {n:,} spans aggregated into {bins_total:,} time bins (per unit) of up "
        f"to {width / 1e3:,.3f} us (more than {MAX_SPANS_PER_LANE:,} spans in the lane); "
        "each bin is drawn from its first span's start to its last span's end and its hover "
        "gives the spans, busy time and the name with the most time"
    )
    return out


def _ids(values: Any) -> dict[str, Any]:
    """Record ids (-1: none) as a typed array: ``i4`` when they fit, else ``f8``."""
    a = np.asarray(values, dtype=np.int64)
    fits = len(a) == 0 or (a.min() >= -(2**31) and a.max() < 2**31)
    return typed(a, "i4" if fits else "f8")


def _id_columns(lane: Lane) -> dict[str, np.ndarray]:
    """The columns linking a lane's spans (:func:`_span_store`): ``id`` (event id of a host span,
    task id of a device task), for a kernel ``op`` (its op's event id), for a launch ``tk``
    (the task it submitted)."""
    sp = lane.spans
    out = {"id": sp["id"].to_numpy()}
    if lane.kind == "stream":
        out["op"] = sp["op"].to_numpy()
    elif lane.kind == "launch":
        out["tk"] = sp["task"].to_numpy()
    return out


def _detail_chunks(lane: Lane, origin: int, codes: _Codes) -> list[dict[str, Any]]:
    """The spans of a binned lane in time order, in chunks of :data:`DETAIL_CHUNK`: per chunk
    the first start (ns from ``origin``), its extent in us (``a`` first start, ``b`` last end),
    the count, and compressed columns: start deltas (ns), durations (ns), name and unit codes,
    the ids linking them (:func:`_id_columns`: a click on a span drawn from them shows its
    launch, op or kernels as on any lane; ``r``: each id column's range, so that the page
    inflates only the chunks that may hold a linked span) and, on host threads, module and
    call-site codes.
    """
    sp = lane.spans
    order = np.argsort(sp["start_ns"].to_numpy(), kind="stable")
    start = sp["start_ns"].to_numpy().astype(np.int64)[order] - origin
    dur = sp["end_ns"].to_numpy().astype(np.int64)[order] - (start + origin)
    columns = {"nm": codes.array(sp["name"])[order], "u": codes.array(sp["unit"])[order]}
    if "module" in sp:
        columns["m"] = codes.array(sp["module"])[order]
    if "site" in sp and (sp["site"] != "").any():
        columns["c"] = codes.array(sp["site"])[order]
    ids = {k: np.asarray(v, dtype=np.int64)[order] for k, v in _id_columns(lane).items()}
    chunks = []
    for i in range(0, len(start), DETAIL_CHUNK):
        s, d = start[i : i + DETAIL_CHUNK], dur[i : i + DETAIL_CHUNK]
        chunk = {
            "t0": int(s[0]),
            "a": float(s[0] / 1e3),
            "b": float((s + d).max() / 1e3),
            "n": len(s),
            "ds": typed(np.diff(s, prepend=s[0]), compress=True),
            "d": typed(np.maximum(d, 0), compress=True),
        }
        for key, values in columns.items():
            chunk[key] = typed(values[i : i + DETAIL_CHUNK], compress=True)
        ranges = {}
        for key, values in ids.items():  # deltas: ids grow with time, the deltas compress
            part = values[i : i + DETAIL_CHUNK]
            chunk[key] = typed(np.diff(part, prepend=0), "f8" if _wide(part) else "i4", True)
            some = part[part >= 0]
            if len(some):  # the page looks for a linked span only in chunks that may hold it
                ranges[key] = [int(some.min()), int(some.max())]
        chunk["r"] = ranges
        chunks.append(chunk)
    return chunks


def _wide(ids: np.ndarray) -> bool:
    """Whether id deltas may not fit an ``i4``."""
    return len(ids) > 0 and (int(ids.max()) - min(int(ids.min()), 0) >= 2**31)


_CHUNK_COLUMNS = ("ds", "d", "nm", "u", "m", "c", "id", "op", "tk")


def _chunk_chars(chunk: dict[str, Any]) -> int:
    return sum(len(chunk[k]["bdata"]) for k in _CHUNK_COLUMNS if k in chunk)


def _detail(
    binned: list[tuple[Lane, dict[str, Any]]], origin: int, codes: _Codes, notes: list[str]
) -> None:
    """Each binned lane's detail chunks (``chunks`` of its entry), taken over all lanes in time
    order while :data:`DETAIL_BYTES` last; ``until``: where a lane's embedded detail ends (us;
    absent when it has all of it)."""
    pending = [(lane, entry, _detail_chunks(lane, origin, codes)) for lane, entry in binned]
    heads = sorted(
        ((c["a"], k, j) for k, (_, _, cs) in enumerate(pending) for j, c in enumerate(cs)),
    )
    spent, cut = 0, None
    for a, k, j in heads:
        chunk = pending[k][2][j]
        size = _chunk_chars(chunk)
        if spent + size > DETAIL_BYTES:
            cut = a
            break
        spent += size
    for _, entry, chunks in pending:
        kept = [c for c in chunks if cut is None or c["a"] < cut]
        entry["chunks"] = kept
        entry.pop("until", None)
        if len(kept) < len(chunks):
            entry["until"] = chunks[len(kept)]["a"]
    if cut is not None:
        notes.append(
            f"detail of the aggregated lanes embedded up to {cut / 1e3:,.1f} ms (the page holds "
            f"at most {DETAIL_BYTES / 2**20:,.0f} MiB of it): zoomed in before that time, they "
            "are drawn span by span; after it, as bins"
        )
    elif pending:
        notes.append(
            "zoomed in to at most "
            f"{MAX_SPANS_PER_LANE:,} spans in view, the aggregated lanes are drawn span by span "
            "(from data embedded in the page)"
        )


def _us(values: np.ndarray, origin: int) -> list[float]:
    return np.round((np.asarray(values, dtype=np.int64) - origin) / 1e3, 3).tolist()


def _span_store(lanes: list[Lane], origin: int, codes: _Codes) -> dict[str, Any]:
    """What the page needs to label, hover, select and link the drawn (not binned) spans: per
    lane its spans' start and end (us), name, unit, hover text and module codes, and the ids
    that link kernels to their ops and launches (:func:`_id_columns`; the page joins them, on
    drawn lanes and on spans drawn from detail chunks alike)."""
    out: list[dict[str, Any] | None] = []
    for lane in lanes:
        if lane.binned or lane.spans.empty:
            out.append(None)
            continue
        sp = lane.spans
        entry: dict[str, Any] = {
            "g": lane.offset,
            "s": _us(sp["start_ns"].to_numpy(), origin),
            "e": _us(sp["end_ns"].to_numpy(), origin),
            "n": codes(sp["name"]),
            "u": codes(sp["unit"]),
            "h": typed(codes.array(_hover(lane).to_numpy(dtype=object))),
        }
        if "y" in lane.extra:  # where the page draws the lane, and its units (_lane_units)
            entry["y"], entry["units"] = lane.extra["y"], lane.extra["units"]
        if "module" in sp:
            entry["m"] = codes(sp["module"])
        if "site" in sp and (sp["site"] != "").any():
            entry["c"] = codes(sp["site"])
        for key, values in _id_columns(lane).items():
            entry[key] = _ids(values)
        out.append(entry)
    return {"lanes": out}


def _rank_prefix(profile: Profile, rank: int, slow: int | None) -> str:
    if len(profile.ranks) < 2:
        return ""
    return f"rank {rank} (slow) " if rank == slow else f"rank {rank} "


def timeline(
    profile: Profile, analysis: Any | None = None
) -> tuple[dict[str, Any], list[str], list[str], dict[str, Any]]:
    """The timeline figure (plotly JSON), its lane names (top to bottom), notes about level of
    detail, and the page's span store (lanes, spans, links, steps, units)."""
    mem, steps = profile.memory, profile.steps
    notes: list[str] = []
    origin = time_origin(profile)
    multi = len(profile.ranks) > 1
    slow = None
    if analysis is not None and multi:
        info = (getattr(analysis, "communication", None) or {}).get("slow_rank") or {}
        slow = info.get("slow_rank")
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.78, 0.22], vertical_spacing=0.04
    )
    lanes: list[Lane] = []
    for r in profile.ranks:
        lanes += rank_lanes(profile, r, _rank_prefix(profile, r, slow))
    offset = 0
    for lane in lanes:
        if len(lane.spans) <= MAX_SPANS_PER_LANE:
            lane.offset = offset
            offset += len(lane.spans)
    binned = [ln for ln in lanes if len(ln.spans) > MAX_SPANS_PER_LANE]
    for lane in binned:
        lane.extra["bins"] = min(MAX_SPANS_PER_LANE // 2, TOTAL_BINS // len(binned))
    traces: list[dict[str, Any]] = []
    legend: set[str] = set()
    codes = _Codes()
    bins: list[tuple[Lane, dict[str, Any]]] = []
    for li, lane in enumerate(lanes):
        pos = len(lanes) - 1 - li  # the first lane on top
        lane.binned = len(lane.spans) > MAX_SPANS_PER_LANE
        if lane.binned:
            bins.append((lane, _bin_lane(lane, pos, origin, legend, codes, notes)))
        else:
            lane.extra["y"], lane.extra["units"] = pos, _lane_units(lane, legend)
    _detail(bins, origin, codes, notes)
    names = [ln.name for ln in lanes]
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
                    # SVG, not WebGL: in a software renderer (a headless or GPU-less browser)
                    # each WebGL line of 20,000 steps costs seconds to draw, the SVG path little
                    "type": "scatter",
                    "x": x,
                    "y": np.round(m[col].to_numpy() / 2**20, 4),
                    "mode": "lines",
                    "line": {"shape": "hv", "dash": dash},
                    "name": (f"rank {r} " if multi else "") + f"{col} MiB",
                    "legendgroup": "memory",
                    "hovertemplate": "%{y:.2f} MiB at %{x:.1f} us<extra>" + col + "</extra>",
                    "xaxis": "x2",
                    "yaxis": "y2",
                }
            )
    fig.update_yaxes(
        type="linear",
        tickmode="array",
        tickvals=list(range(len(names))),
        ticktext=list(reversed(names)),
        showgrid=False,
        zeroline=False,
        range=[-0.5, len(names) - 0.5],
        fixedrange=True,
        automargin=True,
        row=1,
        col=1,
    )
    fig.update_yaxes(title_text="MiB", row=2, col=1)
    fig.update_xaxes(title_text="time (us from the first event)", row=2, col=1)
    overlay = {"range": [0, 1], "visible": False, "fixedrange": True, "showgrid": False}
    fig.update_layout(
        height=300 + 42 * len(names),
        margin={"l": 10, "r": 20, "t": 30, "b": 40},
        hovermode="closest",
        dragmode="zoom",
        legend={"orientation": "h", "y": -0.12, "title": {"text": "unit "}},
        yaxis3={**overlay, "overlaying": "y", "anchor": "x"},
        yaxis4={**overlay, "overlaying": "y2", "anchor": "x2"},
    )
    out = fig.to_plotly_json()
    out["data"] = traces
    out["layout"]["annotations"] = []
    store = _span_store(lanes, origin, codes)
    store["binned"] = [entry for _, entry in bins]
    store["max_spans"], store["chunk"] = MAX_SPANS_PER_LANE, DETAIL_CHUNK
    store["lane_names"] = names
    store["lane_ranks"] = [ln.rank for ln in lanes]
    store["lane_binned"] = [ln.binned for ln in lanes]
    store["lane_kinds"] = [ln.kind for ln in lanes]
    store["steps"] = [
        [int(row.rank), int(row.step), *_us(np.array([row.start_ns, row.end_ns]), origin)]
        for row in steps.itertuples(index=False)
    ][: 20 * MAX_STEP_LINES]
    store["multi"] = multi
    store["names"] = list(codes.table)
    store["colors"] = {**UNIT_COLORS, **HOST_COLORS}
    return out, names, notes, store
