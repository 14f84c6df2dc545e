"""Interval arithmetic on arrays of [start, end) spans (vectorised with numpy)."""

from __future__ import annotations

import numpy as np

Spans = tuple[np.ndarray, np.ndarray]


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of spans as sorted, disjoint spans."""
    keep = ends > starts
    starts, ends = np.asarray(starts)[keep], np.asarray(ends)[keep]
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running_end = np.maximum.accumulate(ends)
    new_group = np.empty(starts.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = starts[1:] > running_end[:-1]
    group = np.cumsum(new_group) - 1
    merged_starts = starts[new_group]
    merged_ends = np.zeros(merged_starts.size, dtype=ends.dtype)
    np.maximum.at(merged_ends, group, ends)
    return merged_starts, merged_ends


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    """Time covered by at least one span."""
    s, e = merge(starts, ends)
    return int((e - s).sum())


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Spans cut to [lo, hi)."""
    return np.clip(starts, lo, hi), np.clip(ends, lo, hi)


def intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Time covered by both a span of ``a`` and a span of ``b``."""
    a_s, a_e = merge(*a)
    b_s, b_e = merge(*b)
    both = total(np.concatenate([a_s, b_s]), np.concatenate([a_e, b_e]))
    return int((a_e - a_s).sum() + (b_e - b_s).sum() - both)


def difference(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> Spans:
    """Spans of ``a`` not covered by ``b`` (both may overlap themselves), sorted and disjoint."""
    a_s, a_e = merge(*a)
    b_s, b_e = merge(*b)
    if a_s.size == 0 or b_s.size == 0:
        return a_s, a_e
    # the gaps of b, bounded by a's extent, intersected with a
    lo, hi = a_s[0], a_e[-1]
    gap_s = np.concatenate([[lo], b_e])
    gap_e = np.concatenate([b_s, [hi]])
    return intersect(a_s, a_e, gap_s, gap_e)


def intersect(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> Spans:
    """Intersection of two sorted, disjoint span sets, as sorted disjoint spans."""
    keep = b_e > b_s
    b_s, b_e = b_s[keep], b_e[keep]
    if a_s.size == 0 or b_s.size == 0:
        return a_s[:0], a_e[:0]
    # every a span meets a contiguous range of b spans: [first b ending after a.start,
    # last b starting before a.end]
    first = np.searchsorted(b_e, a_s, side="right")
    last = np.searchsorted(b_s, a_e, side="left")
    counts = np.clip(last - first, 0, None)
    if counts.sum() == 0:
        return a_s[:0], a_e[:0]
    owner = np.repeat(np.arange(a_s.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    bi = np.repeat(first, counts) + offsets
    s = np.maximum(a_s[owner], b_s[bi])
    e = np.minimum(a_e[owner], b_e[bi])
    ok = e > s
    return s[ok], e[ok]


class Coverage:
    """Fast queries on a union of spans: covered time inside windows, membership of points."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = merge(
            np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        )
        lengths = self.ends - self.starts
        self._before = np.concatenate([[0], np.cumsum(lengths)])

    @property
    def total(self) -> int:
        """Time covered."""
        return int(self._before[-1])

    def upto(self, t: np.ndarray) -> np.ndarray:
        """Covered time before each ``t``."""
        t = np.asarray(t, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        idx = np.searchsorted(self.starts, t, side="right") - 1
        safe = np.clip(idx, 0, None)
        inside = np.clip(t - self.starts[safe], 0, self.ends[safe] - self.starts[safe])
        return np.where(idx >= 0, self._before[safe] + inside, 0)

    def within(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Covered time inside each window ``[lo, hi)``."""
        return self.upto(np.maximum(lo, hi)) - self.upto(lo)

    def contains(self, t: np.ndarray) -> np.ndarray:
        """True where ``t`` lies inside a span (end excluded)."""
        t = np.asarray(t, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(t.shape, dtype=bool)
        idx = np.searchsorted(self.starts, t, side="right") - 1
        safe = np.clip(idx, 0, None)
        return (idx >= 0) & (t < self.ends[safe])


def assign(points: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Index of the window ``[lo, hi)`` holding each point (windows sorted by ``lo``), else -1.

    Where windows overlap, the latest-starting one holding the point wins.
    """
    points = np.asarray(points, dtype=np.int64)
    out = np.full(points.shape, -1, dtype=np.int64)
    if lo.size == 0 or points.size == 0:
        return out
    idx = np.searchsorted(lo, points, side="right") - 1
    safe = np.clip(idx, 0, None)
    ok = (idx >= 0) & (points < hi[safe])
    out[ok] = idx[ok]
    return out


def assign_first(points: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Index of the window ``[lo, hi)`` holding each point (windows sorted by ``lo``), else -1.

    Where windows overlap, the earliest-starting one holding the point wins (torch_npu's
    step_trace_time gives a section to the first step whose range holds its start).
    """
    points = np.asarray(points, dtype=np.int64)
    out = np.full(points.shape, -1, dtype=np.int64)
    if lo.size == 0 or points.size == 0:
        return out
    last = np.searchsorted(lo, points, side="right") - 1  # the windows starting at or before
    # the first window whose end passes the point: first index where the running max end > p
    first = np.searchsorted(np.maximum.accumulate(hi), points, side="right")
    ok = (last >= 0) & (first <= last)
    out[ok] = first[ok]
    return out
