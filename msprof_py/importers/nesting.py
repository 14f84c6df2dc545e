"""Parent links from time nesting: the span that encloses each span on its thread.

Foreign profilers (Kineto, torch_npu) record nested ops as separate spans (``aten::linear``
around ``aten::addmm``) without saying which holds which; the nesting of their times on one
thread does. Sorting by (thread, start, longest first) and one pass with a stack gives every
span its innermost enclosing span in O(n log n), the same on every run (ties keep their input
order). :func:`shortest_holding` answers the instant form (which span holds a launch's start)
with one sweep over the spans and the instants, O((n + m) log n).
"""

from __future__ import annotations

import heapq

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


def shortest_holding(
    threads: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    at_threads: np.ndarray,
    times: np.ndarray,
) -> np.ndarray:
    """For each instant ``times[j]`` on thread ``at_threads[j]``, the position of the shortest
    span on that thread with ``start <= time <= end`` (ends count; of equally long spans the
    first in input order), else -1.

    One sweep per thread in time order: spans enter a heap keyed by (length, position) when
    they start at or before the instant; a span at the top that ended before it is dropped
    (it ended before every later instant too)."""
    threads = np.asarray(threads, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    at_threads = np.asarray(at_threads, dtype=np.int64)
    times = np.asarray(times, dtype=np.int64)
    out = np.full(len(times), -1, dtype=np.int64)
    n = len(starts)
    if n == 0 or len(times) == 0:
        return out
    order = np.lexsort((np.arange(n), starts, threads)).tolist()
    s_tid, s_start, s_end = threads.tolist(), starts.tolist(), ends.tolist()
    q_tid, q_time = at_threads.tolist(), times.tolist()
    heap: list[tuple[int, int, int]] = []  # (length, position, end) of the started spans
    k, current = 0, None
    for j in np.lexsort((times, at_threads)).tolist():
        tid, t = q_tid[j], q_time[j]
        if tid != current:
            heap.clear()
            current = tid
        while k < n and (
            s_tid[order[k]] < tid or (s_tid[order[k]] == tid and s_start[order[k]] <= t)
        ):
            i = order[k]
            if s_tid[i] == tid:
                heapq.heappush(heap, (s_end[i] - s_start[i], i, s_end[i]))
            k += 1
        while heap and heap[0][2] < t:
            heapq.heappop(heap)
        if heap:
            out[j] = heap[0][1]
    return out
