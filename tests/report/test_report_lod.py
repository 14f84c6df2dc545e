"""Level of detail in the report: lanes aggregated into time bins, hover points along long spans,
thinned step lines and step bars; their invariants, by hand and on random spans."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from report_helpers import synthetic_profile, typed_array

from msprof_py.report import timeline as build
from msprof_py.report import write_report
from msprof_py.report.build import _step_groups, _steps
from msprof_py.report.lanes import UNIT_COLORS
from msprof_py.report.timeline import Lane, _aggregate, _hover_points, _lane_units, typed


def _spans(rows: list[tuple[int, int, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start = np.array([r[0] for r in rows], dtype=np.int64)
    end = np.array([r[1] for r in rows], dtype=np.int64)
    names = np.array([r[2] for r in rows], dtype=object)
    return start, end, names


def test_aggregate_by_hand() -> None:
    # range 0..100 -> 101 ns in 4 bins of ceil(101 / 4) = 26 ns: [0, 26) [26, 52) [52, 78) [78,)
    start, end, names = _spans(
        [
            (0, 10, "a"),
            (5, 8, "b"),  # nested in a: adds span time, not busy time
            (12, 20, "c"),
            (30, 35, "d"),
            (90, 100, "e"),
        ]
    )
    agg = _aggregate(start, end, names, bins=4)
    assert agg.attrs["width_ns"] == 26
    assert agg[["start", "end", "spans", "span_ns", "busy_ns", "top"]].to_dict("records") == [
        {"start": 0, "end": 20, "spans": 3, "span_ns": 21, "busy_ns": 18, "top": "a"},
        {"start": 30, "end": 35, "spans": 1, "span_ns": 5, "busy_ns": 5, "top": "d"},
        {"start": 90, "end": 100, "spans": 1, "span_ns": 10, "busy_ns": 10, "top": "e"},
    ]


def test_aggregate_span_reaching_past_its_bin() -> None:
    # the span starting at 20 belongs to bin 0 ([0, 26)) and ends in bin 2: bin 0's extent
    # reaches to 60, so it covers the span, and overlaps bin 1's extent
    start, end, names = _spans([(0, 5, "x"), (20, 60, "long"), (30, 40, "y"), (100, 101, "z")])
    agg = _aggregate(start, end, names, bins=4)
    rows = agg[["start", "end", "spans", "span_ns", "busy_ns", "top"]].to_dict("records")
    assert rows == [
        {"start": 0, "end": 60, "spans": 2, "span_ns": 45, "busy_ns": 45, "top": "long"},
        {"start": 30, "end": 40, "spans": 1, "span_ns": 10, "busy_ns": 10, "top": "y"},
        {"start": 100, "end": 101, "spans": 1, "span_ns": 1, "busy_ns": 1, "top": "z"},
    ]


def test_aggregate_ties_and_missing_names() -> None:
    # equal time: the name seen first in the lane wins; a missing name is the empty string
    start, end, names = _spans([(0, 4, "<b>first</b>"), (4, 8, "second"), (8, 9, None)])
    agg = _aggregate(start, end, names, bins=1)
    assert agg["top"].tolist() == ["<b>first</b>"]
    start, end, names = _spans([(0, 9, None), (9, 10, "short")])
    assert _aggregate(start, end, names, bins=1)["top"].tolist() == [""]


def test_aggregate_zero_length_spans_and_one_bin_per_ns() -> None:
    start, end, names = _spans([(7, 7, "a"), (7, 7, "b"), (9, 9, "c")])
    agg = _aggregate(start, end, names, bins=100)  # range of 3 ns: bins of 1 ns
    assert agg.attrs["width_ns"] == 1
    assert agg["spans"].tolist() == [2, 1]
    assert agg["busy_ns"].tolist() == [0, 0]


def _union(s: np.ndarray, e: np.ndarray) -> int:
    total, reach = 0, None
    for a, b in sorted(zip(s.tolist(), e.tolist(), strict=True)):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


@pytest.mark.parametrize("nested", [False, True])
def test_aggregate_invariants_on_random_spans(nested: bool) -> None:
    rng = np.random.default_rng(7 + nested)
    n, bins = 3_000, 64
    if nested:  # host-like: spans overlap and nest
        start = rng.integers(0, 1_000_000, n)
        end = start + rng.integers(0, 50_000, n)
    else:  # stream-like: back to back with gaps, in order
        dur = rng.integers(1, 400, n)
        gap = rng.integers(0, 300, n)
        start = np.cumsum(dur + gap) - dur
        end = start + dur
    names = rng.choice(np.array(["mm", "add", "conv", "relu"], dtype=object), n)
    agg = _aggregate(start, end, names, bins)
    width = agg.attrs["width_ns"]
    lo = int(start.min())
    assert len(agg) <= bins
    assert agg["start"].is_monotonic_increasing
    # every span counted once; span time conserved
    assert agg["spans"].sum() == n
    assert agg["span_ns"].sum() == (end - start).sum()
    # every span inside its bin's extent
    b = (start - lo) // width
    row = pd.Series(np.arange(len(agg)), index=(agg["start"] - lo) // width)
    r = row.loc[b].to_numpy()
    assert (agg["start"].to_numpy()[r] <= start).all()
    assert (agg["end"].to_numpy()[r] >= end).all()
    # busy time: the union of each bin's spans, brute force
    for i, (key, idx) in enumerate(pd.Series(np.arange(n)).groupby(b)):
        assert agg["busy_ns"][i] == _union(start[idx], end[idx]), key
        assert agg["top"][i] == pd.Series(end[idx] - start[idx]).groupby(names[idx]).sum().idxmax()
    assert (agg["busy_ns"] <= agg["end"] - agg["start"]).all()
    assert (agg["busy_ns"] <= agg["span_ns"]).all()
    if not nested:
        assert (agg["busy_ns"] == agg["span_ns"]).all()
        assert agg["busy_ns"].sum() == _union(start, end)


def test_hover_points() -> None:
    s = np.array([0.0, 10.0, 11.0, 500.0])
    e = np.array([10.0, 11.0, 11.0, 1000.0])
    x, idx = _hover_points(s, e, points=100)  # step = max(1000, 511) / 100 = 10
    assert np.bincount(idx).tolist() == [1, 1, 1, 50]
    assert x[:3].tolist() == [5.0, 10.5, 11.0]  # short spans: their midpoint
    long = np.sort(x[idx == 3])
    assert long[0] == 505 and long[-1] == 995 and np.allclose(np.diff(long), 10)
    assert ((x >= s[idx]) & (x <= e[idx])).all()


def test_hover_points_bounded() -> None:
    rng = np.random.default_rng(3)
    s = rng.uniform(0, 1e6, 5_000)
    e = s + rng.exponential(2e4, 5_000)
    x, idx = _hover_points(s, e, points=2_000)
    assert len(x) <= len(s) + 2_000
    assert set(idx.tolist()) == set(range(len(s)))
    assert ((x >= s[idx]) & (x <= e[idx])).all()


def _lane(start: np.ndarray, end: np.ndarray, units: list[str]) -> Lane:
    spans = pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": end,
            "name": "k",
            "unit": units,
            "id": np.arange(len(start)),
            "op": -1,
        }
    )
    source = pd.DataFrame({"name": "k", "op_type": "Add", "task_type": "AI_CORE", **spans})
    for col in ("input_shapes", "input_dtypes", "input_formats"):
        source[col] = ""
        source[col.replace("input", "output")] = ""
    source["flops"], source["bytes"] = 1.0, 2
    lane = Lane("stream 3 · compute", 0, "stream", spans)
    lane.extra["source"] = source
    return lane


def test_typed_arrays() -> None:
    # the smallest unsigned type that holds the values; floats and negatives as f8
    assert typed([0, 255])["dtype"] == "u1" and typed([256])["dtype"] == "u2"
    assert typed([2**16])["dtype"] == "u4" and typed([2**32])["dtype"] == "f8"
    assert typed([-1])["dtype"] == "f8" and typed([0.5])["dtype"] == "f8"
    for values, dtype, z in (([3, 1, 2], None, False), ([1.5, np.nan], "f8", True)):
        spec = typed(values, dtype, compress=z)
        assert ("z" in spec) == z
        np.testing.assert_array_equal(typed_array(spec), np.asarray(values, dtype=float))


def test_bin_lane_above_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "MAX_SPANS_PER_LANE", 100)
    start = np.arange(0, 150_000, 1_000, dtype=np.int64)  # 150 spans of 999 ns
    end = start + 999  # range 0..149,999: 50 bins of 3,000 ns
    notes: list[str] = []
    codes = build._Codes()
    legend: set[str] = set()
    entry = build._bin_lane(_lane(start, end, ["cube"] * 150), 4, 1_000, legend, codes, notes)
    assert len(notes) == 1
    assert notes[0].startswith(
        "stream 3 · compute: 150 spans aggregated into 50 time bins (per unit) of up to 3.000 us"
    )
    assert entry["lane"] == 4 and legend == {"cube"}
    (unit,) = entry["units"]
    assert (unit["unit"], unit["color"], unit["legend"]) == ("cube", UNIT_COLORS["cube"], True)
    cols = {k: typed_array(unit[k]) for k in ("s", "e", "c", "busy", "span", "top")}
    # bin i: spans 3i..3i+2, from 3i us to 3i + 2.999 us, less the 1 us origin
    i = np.arange(50)
    np.testing.assert_allclose(cols["s"], 3 * i - 1.0)
    np.testing.assert_allclose(cols["e"], 3 * i + 2 - 1.0 + 0.999)
    assert cols["c"].tolist() == [3] * 50
    np.testing.assert_allclose(cols["busy"], 3 * 0.999, rtol=1e-6)
    np.testing.assert_allclose(cols["span"], 3 * 0.999, rtol=1e-6)
    assert {list(codes.table)[c] for c in cols["top"]} == {"k"}
    # a second binned lane of the same unit: no second legend entry
    again = build._bin_lane(_lane(start, end, ["cube"] * 150), 3, 0, legend, codes, notes)
    assert not again["units"][0]["legend"]


def test_lane_traces_span_by_span() -> None:
    # a lane drawn span by span: the page draws it at y = the lane's number from the span
    # store, per unit in its colour (one legend entry per unit across lanes), every span a
    # segment from its start to its end with hover text, each carrying its global index
    start = np.arange(0, 100_000, 1_000, dtype=np.int64)
    end = start + 999
    units = ["cube", "vector"] * 50
    legend: set[str] = set()
    lane = _lane(start, end, units)
    lane.offset = 1_000
    lane.extra["y"], lane.extra["units"] = 2, _lane_units(lane, legend)
    codes = build._Codes()
    entry = build._span_store([lane], 0, codes)["lanes"][0]
    assert entry["y"] == 2 and legend == {"cube", "vector"}
    assert [(u["unit"], u["color"], u["legend"]) for u in entry["units"]] == [
        ("cube", UNIT_COLORS["cube"], True),
        ("vector", UNIT_COLORS["vector"], True),
    ]
    assert UNIT_COLORS["cube"] != UNIT_COLORS["vector"]
    names = list(codes.table)
    assert [names[c] for c in entry["u"]] == units
    np.testing.assert_allclose(entry["s"], start / 1e3)
    np.testing.assert_allclose(entry["e"], end / 1e3)
    assert entry["g"] == 1_000  # hover point k of the lane carries global index g + k
    hovers = [build.hover_html(names[c]) for c in typed_array(entry["h"])]
    assert len(hovers) == 100 and all(
        h.startswith("<b>k</b> (Add)<br>unit: AI_CORE") for h in hovers
    )
    assert hovers[0].endswith("<br>duration: 0.999 us")
    assert typed_array(entry["id"]).tolist() == list(range(100))
    assert typed_array(entry["op"]).tolist() == [-1] * 100
    again = _lane_units(_lane(start, end, units), legend)
    assert [u["unit"] for u in again] == ["cube", "vector"]
    assert not any(u["legend"] for u in again)
    assert _lane_units(_lane(start[:0], end[:0], []), legend) == []


def _decode_chunks(chunks: list[dict], names: list[str]) -> pd.DataFrame:
    rows = []
    for c in chunks:
        ds, d = typed_array(c["ds"]), typed_array(c["d"])
        s = c["t0"] + np.cumsum(ds.astype(np.int64))
        rows.append(
            pd.DataFrame(
                {
                    "start": s,
                    "end": s + d.astype(np.int64),
                    "name": [names[k] for k in typed_array(c["nm"])],
                    "unit": [names[k] for k in typed_array(c["u"])],
                    "id": np.cumsum(typed_array(c["id"]).astype(np.int64)),
                    "op": np.cumsum(typed_array(c["op"]).astype(np.int64)),
                }
            )
        )
        assert c["n"] == len(s) and c["a"] == s[0] / 1e3 and c["b"] == (s + d).max() / 1e3
    return pd.concat(rows, ignore_index=True)


def test_detail_chunks_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """A binned lane's spans come back from its compressed chunks exactly, in time order."""
    monkeypatch.setattr(build, "DETAIL_CHUNK", 7)
    rng = np.random.default_rng(5)
    start = rng.integers(1_000, 10_000_000, 50)  # out of order, overlapping
    end = start + rng.integers(0, 3_000_000, 50)
    units = rng.choice(["cube", "vector", "DMA H2D"], 50).tolist()
    lane = _lane(start, end, units)
    lane.spans["name"] = rng.choice(["mm", "add", None], 50)
    codes = build._Codes()
    chunks = build._detail_chunks(lane, 1_000, codes)
    assert [c["n"] for c in chunks] == [7] * 7 + [1]
    got = _decode_chunks(chunks, list(codes.table))
    order = np.argsort(start, kind="stable")
    assert got["start"].tolist() == (start[order] - 1_000).tolist()
    assert got["end"].tolist() == (end[order] - 1_000).tolist()
    assert got["unit"].tolist() == np.asarray(units)[order].tolist()
    want = lane.spans["name"].fillna("").to_numpy()[order]
    assert got["name"].tolist() == want.tolist()
    # the ids linking each span (stored as deltas) come back in the same order
    assert got["id"].tolist() == lane.spans["id"].to_numpy()[order].tolist()
    assert got["op"].tolist() == [-1] * 50


def test_detail_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detail chunks are taken over the binned lanes in time order while the budget lasts;
    each lane says where its embedded detail ends."""
    monkeypatch.setattr(build, "DETAIL_CHUNK", 10)
    rng = np.random.default_rng(9)
    lanes = []
    for k in range(2):
        start = np.sort(rng.integers(0, 1_000_000, 100)) + k * 500  # noise: compresses badly
        lanes.append((_lane(start, start + rng.integers(1, 900, 100), ["cube"] * 100), {}))
    codes = build._Codes()
    sizes = [build._chunk_chars(c) for c in build._detail_chunks(lanes[0][0], 0, codes)]
    monkeypatch.setattr(build, "DETAIL_BYTES", int(sum(sizes) * 0.9))  # about 9 of 20 chunks
    notes: list[str] = []
    build._detail(lanes, 0, codes, notes)
    kept = [len(entry["chunks"]) for _, entry in lanes]
    assert 0 < sum(kept) < 20 and abs(kept[0] - kept[1]) <= 1  # in time order: both lanes
    for _, entry in lanes:
        assert all(c["a"] < entry["until"] for c in entry["chunks"])
    assert len(notes) == 1 and notes[0].startswith("detail of the aggregated lanes embedded up to")
    monkeypatch.setattr(build, "DETAIL_BYTES", 10**9)
    notes.clear()
    build._detail(lanes, 0, codes, notes)
    assert [len(entry["chunks"]) for _, entry in lanes] == [10, 10]
    assert all("until" not in entry for _, entry in lanes)
    assert notes[0].startswith("zoomed in to at most 20,000 spans in view")


def test_step_groups() -> None:
    n = 1_234
    s = pd.DataFrame(
        {
            "rank": 0,
            "step": np.arange(n),
            "computing_ns": np.arange(n) * 10.0,
            "comm_not_overlapped_ns": 0.0,
            "free_ns": 5.0,
        }
    )
    g, k = _step_groups(s)
    assert k == 3 and len(g) == 412  # ceil(1234 / 500) = 3 steps a bar
    assert g[["first", "last", "computing_ns"]].iloc[0].tolist() == [0, 2, 10.0]
    assert g[["first", "last", "computing_ns"]].iloc[-1].tolist() == [1233, 1233, 12330.0]
    fig, note = _steps(SimpleNamespace(step_breakdown={"steps": s}))
    assert note == "1,234 steps: each bar is the mean of 3 consecutive steps (412 bars)"
    assert fig.data[0].x[0] == "steps 0-2" and fig.data[0].x[-1] == "steps 1233"
    g, k = _step_groups(s.head(10))
    assert k == 1 and g["first"].tolist() == list(range(10))
    fig, note = _steps(SimpleNamespace(step_breakdown={"steps": s.head(10)}))
    assert note == "" and fig.data[0].x[0] == "step 0"


def test_large_report_says_what_was_aggregated(tmp_path: Path) -> None:
    profile = synthetic_profile(tmp_path, 120_000)  # 600 steps of 200 tasks
    out = write_report(profile, tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    notes = re.findall(r'<p class="note">Level of detail: (.*?)</p>', text)
    assert any(n.startswith("main thread: 120,000 spans aggregated into ") for n in notes)
    assert any(n.startswith("launches: 120,000 spans aggregated into ") for n in notes)
    assert any(n.startswith("stream 0 · compute: 96,000 spans aggregated into ") for n in notes)
    assert any(n.startswith("stream 1 · copy: 24,000 spans aggregated into ") for n in notes)
    assert "601 step boundaries: one in 2 drawn (301 lines)" in notes
    # step 0 is left out as warm-up
    assert "599 steps: each bar is the mean of 2 consecutive steps (300 bars)" in notes
    assert "(analysed 599 steps: 1-599; step 0 left out as warm-up)" in text  # not 599 numbers
    assert "&middot; 1 rank (rank 0) &middot;" in text
    store = json.loads(re.search(r'id="timeline-store">(.*?)</script>', text, re.S).group(1))
    assert [b["lane"] for b in store["binned"]] == [3, 2, 1, 0]  # every lane, top first
    bins = [len(typed_array(u["s"])) for b in store["binned"] for u in b["units"]]
    assert sum(bins) <= build.TOTAL_BINS
    # every span of the binned lanes is embedded (the profile repeats: it compresses well)
    spans = sum(c["n"] for b in store["binned"] for c in b["chunks"])
    assert spans == 120_000 + 120_000 + 96_000 + 24_000
    assert "zoomed in to at most 20,000 spans in view, the aggregated lanes are drawn" in text
    assert out.stat().st_size < 8 * 2**20
