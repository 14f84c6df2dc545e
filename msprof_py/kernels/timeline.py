"""Per-pipe timeline of one core: in-order issue per pipe, flags, barriers, race detection.

The scalar unit walks the kernel in program order and dispatches each instruction to its pipe
(one cycle of scalar time each, ``costs.ISSUE_CYCLES``); every pipe runs its instructions in
the order they arrived, one at a time. Pipes do not see each other's data: only flags order
them. ``SetFlag<SRC_DST>(id)`` fires when everything issued to SRC before it has finished;
``WaitFlag<SRC_DST>(id)`` holds DST until the matching set fired. A wait on the scalar pipe
(or a ``PipeBarrier(ALL)``) also stalls dispatch. Queues (TQue) are flags too: EnQue sets, the
consumer's first use after DeQue waits; FreeTensor sets, the next user of that buffer waits.

Every instruction names the byte ranges it reads and writes; an access that overlaps one from
another pipe still in flight (read-after-write, write-after-read or write-after-write) is a data
race. ``strict`` timelines raise :class:`SyncError` naming both instructions; others make the
later instruction wait for the earlier one (what TIK's automatic synchronisation does) and count
the implicit wait.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from msprof_py.kernels import costs
from msprof_py.kernels.errors import SyncError


class Pipe(str, Enum):
    """The pipes of an AI Core: scalar, vector, cube and the four data movers."""

    S = "S"
    V = "V"
    M = "M"
    MTE1 = "MTE1"
    MTE2 = "MTE2"
    MTE3 = "MTE3"
    FIX = "FIX"
    #: PipeBarrier(ALL) only: every pipe
    ALL = "ALL"


PIPES: tuple[Pipe, ...] = tuple(p for p in Pipe if p is not Pipe.ALL)

HardEvent = Enum(  # type: ignore[misc]
    "HardEvent",
    {f"{a.value}_{b.value}": (a, b) for a in PIPES for b in PIPES if a is not b},
)
HardEvent.__doc__ = (
    "A cross-pipe event SRC_DST, e.g. ``HardEvent.MTE2_V`` (set on MTE2, waited on V)."
)


@dataclass(frozen=True)
class Region:
    """Bytes ``[lo, hi)`` of one memory: an on-chip buffer or one global tensor (by key)."""

    memory: str
    lo: int
    hi: int

    def overlaps(self, other: Region) -> bool:
        """True when both name the same memory and their byte ranges intersect."""
        return self.memory == other.memory and self.lo < other.hi and other.lo < self.hi

    def __str__(self) -> str:
        return f"{self.memory}[{self.lo}, {self.hi})"


@dataclass
class Instr:
    """One instruction as the core executed it (times in cycles from the block's start)."""

    index: int
    pipe: Pipe
    name: str
    cycles: int
    nbytes: int = 0
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    detail: str = ""
    start: int = 0
    end: int = 0
    #: what held this instruction back beyond its pipe: ("flag MTE2_V#0", time) ...
    waits: list[tuple[str, int]] = field(default_factory=list)
    #: the kernel source line that issued it ("add_custom.py:42"; "" when unknown)
    source: str = ""


@dataclass
class _Access:
    region: Region
    write: bool
    pipe: Pipe
    end: int
    name: str


class Timeline:
    """Schedules one core's instruction stream (see module docstring)."""

    def __init__(self, *, strict: bool = True, event_ids: int = 8) -> None:
        self.strict = strict
        self.event_ids = event_ids
        self.issue_clock = 0
        self.pipe_free: dict[Pipe, int] = dict.fromkeys(PIPES, 0)
        self.busy: dict[Pipe, int] = dict.fromkeys(PIPES, 0)
        self.instructions: list[Instr] = []
        self.implicit_waits = 0
        self._flags: dict[tuple[Pipe, Pipe, int], deque[int]] = {}
        self._accesses: list[_Access] = []

    # ---- instructions ----------------------------------------------------------------------

    def issue(
        self,
        pipe: Pipe,
        name: str,
        cycles: int,
        *,
        nbytes: int = 0,
        reads: tuple[Region, ...] = (),
        writes: tuple[Region, ...] = (),
        not_before: list[tuple[str, int]] | None = None,
        detail: str = "",
    ) -> Instr:
        """Dispatch one instruction to ``pipe`` and schedule it; returns it with its times."""
        instr = Instr(
            len(self.instructions), pipe, name, cycles, nbytes, reads, writes, detail=detail
        )
        start = max(self.pipe_free[pipe], self.issue_clock)
        for why, t in not_before or ():
            if t > start:
                instr.waits.append((why, t))
                start = t
        start = self._check_races(instr, start)
        instr.start, instr.end = start, start + cycles
        self.pipe_free[pipe] = instr.end
        self.busy[pipe] += cycles
        if pipe is Pipe.S:
            self.issue_clock = instr.end
        else:
            self.issue_clock += costs.ISSUE_CYCLES
            self.busy[Pipe.S] += costs.ISSUE_CYCLES
        for region in reads:
            self._accesses.append(_Access(region, False, pipe, instr.end, name))
        for region in writes:
            self._accesses.append(_Access(region, True, pipe, instr.end, name))
        self.instructions.append(instr)
        if len(self._accesses) > 256:
            self._prune()
        return instr

    def _check_races(self, instr: Instr, start: int) -> int:
        mine = [(r, False) for r in instr.reads] + [(r, True) for r in instr.writes]
        for acc in self._accesses:
            if acc.pipe is instr.pipe or acc.end <= start:
                continue
            for region, write in mine:
                if (write or acc.write) and region.overlaps(acc.region):
                    kind = "writes" if acc.write else "reads"
                    if self.strict:
                        raise SyncError(
                            f"data race on {region}: {instr.name} ({instr.pipe.value}) starts "
                            f"at cycle {start} while {acc.name} ({acc.pipe.value}) {kind} it "
                            f"until cycle {acc.end}; order them with SetFlag/WaitFlag"
                            f"<HardEvent.{acc.pipe.value}_{instr.pipe.value}> or a TQue"
                        )
                    instr.waits.append((f"auto sync after {acc.name}", acc.end))
                    self.implicit_waits += 1
                    start = acc.end
        return start

    def _prune(self) -> None:
        horizon = min(max(t, self.issue_clock) for t in self.pipe_free.values())
        self._accesses = [a for a in self._accesses if a.end > horizon]

    # ---- synchronisation -------------------------------------------------------------------

    def _check_id(self, event: HardEvent, event_id: int) -> tuple[Pipe, Pipe]:
        if not 0 <= event_id < self.event_ids:
            raise SyncError(
                f"event id {event_id} of {event.name} out of range: this chip has ids "
                f"0-{self.event_ids - 1}"
            )
        return event.value

    def set_flag(self, event: HardEvent, event_id: int = 0) -> int:
        """SetFlag: fires when the source pipe has finished what was issued to it so far."""
        src, dst = self._check_id(event, event_id)
        t = max(self.pipe_free[src], self.issue_clock)
        self._flags.setdefault((src, dst, event_id), deque()).append(t)
        self._record_sync(src, f"SetFlag<{event.name}>({event_id})", t)
        return t

    def wait_flag(self, event: HardEvent, event_id: int = 0) -> int:
        """WaitFlag: the destination pipe holds until the matching SetFlag has fired."""
        src, dst = self._check_id(event, event_id)
        pending = self._flags.get((src, dst, event_id))
        if not pending:
            raise SyncError(
                f"WaitFlag<HardEvent.{event.name}>({event_id}) has no SetFlag before it: "
                "the device would hang here"
            )
        t = max(pending.popleft(), self.pipe_free[dst])
        self.pipe_free[dst] = t
        if dst is Pipe.S:
            self.issue_clock = max(self.issue_clock, t)
        self._record_sync(dst, f"WaitFlag<{event.name}>({event_id})", t)
        return t

    def barrier(self, pipe: Pipe) -> int:
        """PipeBarrier: a pipe's instructions all finish before the next one (pipes here run
        one instruction at a time, so that is free); ALL also stalls dispatch until every pipe
        is idle."""
        if pipe is Pipe.ALL:
            t = max(max(self.pipe_free.values()), self.issue_clock)
            for p in PIPES:
                self.pipe_free[p] = t
            self.issue_clock = t
            self._record_sync(Pipe.S, "PipeBarrier<ALL>", t)
            return t
        t = self.pipe_free[pipe]
        self._record_sync(pipe, f"PipeBarrier<{pipe.value}>", t)
        return t

    def mark(self, pipe: Pipe, name: str, t: int) -> None:
        """Record a zero-cost event (EnQue, FreeTensor...) on ``pipe`` at cycle ``t``."""
        self._record_sync(pipe, name, t)

    def ready_time(self, pipe: Pipe | None) -> int:
        """When a flag set now on ``pipe`` would fire (dispatch time if no pipe)."""
        if pipe is None:
            return self.issue_clock
        return max(self.pipe_free[pipe], self.issue_clock)

    def _record_sync(self, pipe: Pipe, name: str, t: int) -> None:
        instr = Instr(len(self.instructions), pipe, name, 0, start=t, end=t)
        self.instructions.append(instr)

    def wait_until(self, pipe: Pipe, t: int) -> None:
        """Hold ``pipe`` until cycle ``t`` (an implicit queue wait recorded on that pipe)."""
        self.pipe_free[pipe] = max(self.pipe_free[pipe], t)

    # ---- results ---------------------------------------------------------------------------

    @property
    def finish(self) -> int:
        """The cycle the last pipe finishes."""
        return max(max(self.pipe_free.values()), self.issue_clock)
