"""TaskLog: an in-memory subscriber for tests, demos and small scripts.

Real recording goes through the collectors (bounded, flushed to disk); this log keeps every record
in lists and answers the few timeline questions a demo needs: busy time of a set of tasks, the
time two sets overlap, the span of the timeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from msprof_py.device.records import (
    GraphRecord,
    HostRecord,
    MemoryRecord,
    Record,
    TaskKind,
    TaskRecord,
)

Interval = tuple[int, int]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of half-open intervals as a sorted list of disjoint intervals."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def union_length(intervals: Iterable[Interval]) -> int:
    """Total time covered by at least one interval."""
    return sum(end - start for start, end in merge_intervals(intervals))


def overlap_length(a: Iterable[Interval], b: Iterable[Interval]) -> int:
    """Total time covered by both an interval of ``a`` and one of ``b``."""
    ma, mb = merge_intervals(a), merge_intervals(b)
    i = j = total = 0
    while i < len(ma) and j < len(mb):
        lo = max(ma[i][0], mb[j][0])
        hi = min(ma[i][1], mb[j][1])
        if hi > lo:
            total += hi - lo
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total


class TaskLog:
    """Collects every record of a device; pass it to ``SimulatedNpu.subscribe``."""

    def __init__(self) -> None:
        self.tasks: list[TaskRecord] = []
        self.host: list[HostRecord] = []
        self.memory: list[MemoryRecord] = []
        self.graphs: list[GraphRecord] = []

    def __call__(self, record: Record) -> None:
        if isinstance(record, TaskRecord):
            self.tasks.append(record)
        elif isinstance(record, HostRecord):
            self.host.append(record)
        elif isinstance(record, GraphRecord):
            self.graphs.append(record)
        else:
            self.memory.append(record)

    def select(self, predicate: Callable[[TaskRecord], bool]) -> list[TaskRecord]:
        """Tasks for which ``predicate`` is true."""
        return [t for t in self.tasks if predicate(t)]

    @staticmethod
    def intervals(tasks: Iterable[TaskRecord]) -> list[Interval]:
        """(start, end) of each task."""
        return [(t.start_ns, t.end_ns) for t in tasks]

    def kernels(self) -> list[TaskRecord]:
        """Compute tasks (kernels and collectives)."""
        return self.select(lambda t: t.kind in (TaskKind.KERNEL, TaskKind.COLLECTIVE))

    def copies(self) -> list[TaskRecord]:
        """Memory copies between host and device or within the device."""
        return self.select(lambda t: t.kind is TaskKind.MEMCPY)

    def span_ns(self) -> int:
        """From the first task's start to the last task's end (0 with no tasks)."""
        busy = [t for t in self.tasks if t.end_ns > t.start_ns]
        if not busy:
            return 0
        return max(t.end_ns for t in busy) - min(t.start_ns for t in busy)
