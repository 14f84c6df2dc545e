"""Overlap analysis and the per-step breakdown against independent computations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from export_helpers import make_profile
from hypothesis import given, settings
from hypothesis import strategies as st

from msprof_py.analyzers.intervals import assign_first, difference, merge
from msprof_py.exporters.overlap import sections, step_breakdown, step_ranges


def covered(intervals: list[tuple[int, int]]) -> set[int]:
    """The integer points ``[s, e)`` an interval list covers (a brute-force union)."""
    return {t for s, e in intervals for t in range(s, e)}


def as_pairs(iv: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    return list(zip(iv[0].tolist(), iv[1].tolist(), strict=True))


intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 15)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(intervals, intervals)
def test_union_and_difference_match_brute_force(a: list, b: list) -> None:
    ua = merge(np.array([s for s, _ in a], dtype=np.int64), np.array([e for _, e in a]))
    ub = merge(np.array([s for s, _ in b], dtype=np.int64), np.array([e for _, e in b]))
    pairs = as_pairs(ua)
    assert covered(pairs) == covered(a)
    # disjoint, sorted, non-touching, non-empty
    for (s1, e1), (s2, e2) in itertools.pairwise(pairs):
        assert s1 < e1 < s2 < e2
    diff = as_pairs(difference(ua, ub))
    assert covered(diff) == covered(a) - covered(b)
    assert all(s < e for s, e in diff)


def test_touching_intervals_merge_as_msprof_does() -> None:
    s, e = merge(np.array([0, 10, 30]), np.array([10, 20, 40]))
    assert as_pairs((s, e)) == [(0, 20), (30, 40)]


def _case():
    """Two steps: kernels on two streams and a collective partly hidden behind compute."""
    tasks = [
        # step 0: compute 100-200 and 150-300 (stream 1), collective 250-400, copy 400-450
        {"kind": "kernel", "start_ns": 100, "end_ns": 200, "step": 0},
        {"kind": "kernel", "stream_id": 1, "start_ns": 150, "end_ns": 300, "step": 0},
        {
            "kind": "collective",
            "task_type": "HCCL",
            "stream_id": 2,
            "start_ns": 250,
            "end_ns": 400,
            "step": 0,
            "collective": "allreduce",
            "world_size": 2,
            "algorithm": "mesh",
        },
        {"kind": "memcpy", "task_type": "DMA", "start_ns": 400, "end_ns": 450, "step": 0},
        # step 1: compute 1000-1100, 1200-1250, nothing else
        {"kind": "kernel", "start_ns": 1000, "end_ns": 1100, "step": 1},
        {"kind": "kernel", "start_ns": 1200, "end_ns": 1250, "step": 1},
    ]
    steps = [
        {"step": 0, "start_ns": 0, "end_ns": 900},
        {"step": 1, "start_ns": 900, "end_ns": 1300},
    ]
    return make_profile(tasks=tasks, steps=steps)


def test_sections_of_a_hand_made_timeline() -> None:
    sec = sections(_case().tasks)
    assert as_pairs(sec["computing"]) == [(100, 300), (1000, 1100), (1200, 1250)]
    assert as_pairs(sec["communication"]) == [(250, 400)]
    assert as_pairs(sec["not_overlapped"]) == [(300, 400)]
    # free: first task start (100) to last end (1250) minus compute and communication
    assert as_pairs(sec["free"]) == [(400, 1000), (1100, 1200)]


def test_step_ranges_span_first_task_to_the_later_of_last_task_and_host_end() -> None:
    ranges = step_ranges(_case())
    assert ranges.to_dict("list") == {
        "step": [0, 1],
        "start_ns": [100, 1000],
        "end_ns": [900, 1300],
        "host_start_ns": [0, 900],
    }


def test_breakdown_per_step_matches_independent_sums() -> None:
    profile = _case()
    rows = step_breakdown(profile).set_index("step")
    # step 0 holds every section starting in [100, 900): compute 100-300, comm 250-400,
    # not-overlapped 300-400, free 400-1000 (starts at 400, so all 600 ns count in step 0)
    compute0 = len(covered([(100, 200), (150, 300)]))
    assert rows.loc[0, "Computing"] == compute0 == 200
    assert rows.loc[0, "Communication"] == 150
    assert rows.loc[0, "Communication(Not Overlapped)"] == 100
    assert rows.loc[0, "Overlapped"] == 50
    assert rows.loc[0, "Free"] == 600
    assert rows.loc[0, "Stage"] == 1000 - 100  # span of the step's sections
    assert rows.loc[0, "Bubble"] == 0
    assert rows.loc[0, "Preparing"] == 100 - 0  # first compute minus host start
    assert rows.loc[1, "Computing"] == 150
    assert rows.loc[1, "Free"] == 100
    assert rows.loc[1, "Communication"] == 0
    assert rows.loc[1, "Preparing"] == 1000 - 900


def test_breakdown_without_steps_is_one_row_with_empty_step() -> None:
    profile = make_profile(
        tasks=[{"start_ns": 50, "end_ns": 80}, {"start_ns": 100, "end_ns": 130}],
        host_events=[{"name": "aten::mm", "start_ns": 10, "end_ns": 20}],
    )
    rows = step_breakdown(profile)
    assert len(rows) == 1 and rows["step"].iloc[0] is None
    assert rows["Computing"].iloc[0] == 60
    assert rows["Free"].iloc[0] == 20
    assert rows["Preparing"].iloc[0] == 50 - 10


@pytest.mark.parametrize("n_steps", [3, 100])
def test_sections_go_to_the_first_step_holding_their_start(n_steps: int) -> None:
    starts = np.arange(n_steps) * 100
    ranges = step_ranges(
        make_profile(
            tasks=[
                {"start_ns": int(s), "end_ns": int(s) + 10, "step": i} for i, s in enumerate(starts)
            ],
            steps=[
                {"step": i, "start_ns": int(s), "end_ns": int(s) + 100}
                for i, s in enumerate(starts)
            ],
        )
    )
    points = np.array([0, 99, 100, 150, n_steps * 100 - 1, n_steps * 100, -5])
    expected = [0, 0, 1, 1, n_steps - 1, -1, -1]
    lo, hi = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    assert assign_first(points, lo, hi).tolist() == expected


windows = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 30)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(windows, st.lists(st.integers(-5, 90), max_size=20))
def test_assign_first_matches_a_scan_of_overlapping_windows(win: list, points: list) -> None:
    win = sorted(win, key=lambda w: w[0])
    lo = np.array([w[0] for w in win], dtype=np.int64)
    hi = np.array([w[1] for w in win], dtype=np.int64)
    expected = [next((i for i, (a, b) in enumerate(win) if a <= p < b), -1) for p in points]
    assert assign_first(np.array(points, dtype=np.int64), lo, hi).tolist() == expected


def test_overlapping_step_ranges_give_a_section_to_the_earlier_step() -> None:
    """Step 0's range runs to its host end (500), past step 1's first task (300): the section
    starting at 350 belongs to step 0, as torch_npu assigns it."""
    profile = make_profile(
        tasks=[
            {"start_ns": 100, "end_ns": 200, "step": 0},
            {"stream_id": 1, "start_ns": 300, "end_ns": 320, "step": 1},
            {"start_ns": 350, "end_ns": 400, "step": 1},
        ],
        steps=[
            {"step": 0, "start_ns": 0, "end_ns": 500},
            {"step": 1, "start_ns": 250, "end_ns": 600},
        ],
    )
    rows = step_breakdown(profile).set_index("step")
    # step 0 range [100, 500) holds the sections starting at 100, 300 and 350
    assert rows.loc[0, "Computing"] == 100 + 20 + 50
    assert rows.loc[1, "Computing"] == 0
