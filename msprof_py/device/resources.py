"""Occupancy of a pool of identical units (cores, DMA engines, links) over virtual time.

The engine schedules each task eagerly when it is submitted, so a pool must answer "when, at or
after time t, are n units free for d nanoseconds?" even though tasks already booked may start
later than the new one (a task waiting on an event leaves a gap that a later task may use). The
pool keeps a step function of units in use: segment i spans [times[i], times[i+1]) with used[i]
units busy; the last segment extends to infinity and is always idle.
"""

from __future__ import annotations

from bisect import bisect_right


class ResourcePool:
    """A step-function timeline of how many of ``capacity`` units are busy."""

    __slots__ = ("_times", "_used", "capacity", "name")

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"resource pool {name!r} needs at least one unit")
        self.name = name
        self.capacity = capacity
        self._times: list[int] = [0]
        self._used: list[int] = [0]

    def earliest(self, t: int, units: int, duration: int) -> int:
        """First time >= ``t`` at which ``units`` units stay free for ``duration`` ns."""
        times, used = self._times, self._used
        cap = self.capacity - min(units, self.capacity)
        span = duration if duration > 0 else 1
        start = t
        i = bisect_right(times, start) - 1
        last = len(times) - 1
        while True:
            k = i
            end = start + span
            while k <= last and times[k] < end:
                if used[k] > cap:
                    break
                k += 1
            else:
                return start
            # segment k is too busy: try again right after it ends
            start = times[k + 1]
            i = k + 1

    def reserve(self, start: int, end: int, units: int) -> None:
        """Book ``units`` units over ``[start, end)``. Callers check with :meth:`earliest`."""
        if end <= start:
            return
        units = min(units, self.capacity)
        i = self._split(start)
        j = self._split(end)
        used = self._used
        for k in range(i, j):
            used[k] += units

    def _split(self, t: int) -> int:
        """Make ``t`` a segment boundary; return the index of the segment starting at ``t``."""
        times = self._times
        i = bisect_right(times, t) - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self._used.insert(i + 1, self._used[i])
        return i + 1

    def prune(self, horizon: int) -> None:
        """Forget the timeline before ``horizon`` (no future task can start earlier)."""
        times = self._times
        i = bisect_right(times, horizon) - 1
        if i > 0:
            del times[:i]
            del self._used[:i]

    def busy_units(self, t: int) -> int:
        """Units in use at time ``t`` (for tests and diagnostics)."""
        return self._used[max(bisect_right(self._times, t) - 1, 0)]

    def __len__(self) -> int:
        return len(self._times)
