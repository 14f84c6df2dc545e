"""Parent links from time nesting: the span that encloses each span on its thread.

Foreign profilers (Kineto, torch_npu) record nested ops as separate spans (``aten::linear``
around ``aten::addmm``) without saying which holds which; the nesting of their times on one
thread does. Sorting by (thread, start, longest first) and one pass with a stack gives every
span its innermost enclosing span in O(n log n), the same on every run (ties keep their input
order).
"""

from __future__ import annotations

import numpy as np


def enclosing(threads: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each span ``i``, the position of the innermost span on the same thread that holds
    it (``start <= start_i`` and ``end_i <= end``, the earlier one of two equal spans holding
    the later), else -1. Spans that overlap without nesting are not parents of each other; a
    span starting where another ends is its sibling, not its child (zero-length spans at a
    span's start are inside it)."""
    threads = np.asarray(threads)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    n = len(starts)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    order = np.lexsort((np.arange(n), -ends, starts, threads))
    tids, s_sorted, e_sorted = threads[order].tolist(), starts[order].tolist(), ends[order]
    e_list = e_sorted.tolist()
    stack: list[int] = []  # positions in ``order`` of the open spans, outermost first
    last_tid = None
    for k in range(n):
        tid, s, e = tids[k], s_sorted[k], e_list[k]
        if tid != last_tid:
            stack.clear()
            last_tid = tid
        while stack and e_list[stack[-1]] <= s and s_sorted[stack[-1]] < s:
            stack.pop()  # ended before this one starts
        while stack and e_list[stack[-1]] < e:
            stack.pop()  # overlaps without holding it
        if stack:
            out[order[k]] = order[stack[-1]]
        stack.append(k)
    return out
