"""Interval arithmetic on arrays of [start, end) spans (vectorised with numpy)."""

from __future__ import annotations

import numpy as np


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
