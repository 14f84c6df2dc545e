"""``diff(base, new)``: what changed between two profiles, per rank, sorted by impact.

Two lists: the headline figures (step time first, then the other times sorted by how many
ms per step they moved, then utilisation, copies, memory, launches and syncs by the size of
their relative change, a figure that appears from 0 first), and the op types with their
device time and count per step and whether they were added, removed or changed, sorted by
the change of device time.

Both profiles must be comparable — same device preset, same ranks, same number of analysed
steps — unless ``force`` is given (the differences then become warnings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from msprof_py.gates.figures import GateFigures

#: the headline figures a diff compares, with their units (in this order when tied)
FIGURES: dict[str, str] = {
    "step_time_ms": "ms",
    "device_time_ms": "ms",
    "utilization": "",
    "copy_ratio": "",
    "copy_bytes_per_step": "B",
    "exposed_copy_ms": "ms",
    "communication_ms": "ms",
    "communication_not_overlapped_ms": "ms",
    "peak_memory_mb": "MiB",
    "peak_allocated_mb": "MiB",
    "launches_per_step": "",
    "syncs_per_step": "",
    "sync_time_ms": "ms",
}
SAME, CHANGED, ADDED, REMOVED = "same", "changed", "added", "removed"
#: the figure listed first in a diff; the others follow by the size of their relative change
HEADLINE = "step_time_ms"


class NotComparable(ValueError):
    """The two profiles differ in a way that makes a comparison meaningless."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def _relative(base: float, new: float) -> float | None:
    if base == new:
        return 0.0
    return (new - base) / base if base else None


@dataclass(frozen=True)
class FigureChange:
    """One headline figure of one rank in both profiles."""

    metric: str
    rank: int
    base: float
    new: float
    unit: str = ""

    @property
    def delta(self) -> float:
        return self.new - self.base

    @property
    def relative(self) -> float | None:
        """(new - base) / base; None when the figure appears from 0."""
        return _relative(self.base, self.new)

    @property
    def changed(self) -> bool:
        return self.base != self.new

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "rank": self.rank,
            "unit": self.unit,
            "base": self.base,
            "new": self.new,
            "delta": self.delta,
            "relative": self.relative,
        }


@dataclass(frozen=True)
class OpTypeChange:
    """One op type of one rank: device time (ms) and count, per analysed step, in both."""

    op_type: str
    rank: int
    base_ms: float
    new_ms: float
    base_count: float
    new_count: float

    @property
    def status(self) -> str:
        """added, removed, changed (count or time) or same."""
        if not self.base_count and self.new_count:
            return ADDED
        if self.base_count and not self.new_count:
            return REMOVED
        if self.base_ms != self.new_ms or self.base_count != self.new_count:
            return CHANGED
        return SAME

    @property
    def delta_ms(self) -> float:
        return self.new_ms - self.base_ms

    @property
    def delta_count(self) -> float:
        return self.new_count - self.base_count

    @property
    def relative(self) -> float | None:
        return _relative(self.base_ms, self.new_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "rank": self.rank,
            "status": self.status,
            "base_ms": self.base_ms,
            "new_ms": self.new_ms,
            "delta_ms": self.delta_ms,
            "relative": self.relative,
            "base_count": self.base_count,
            "new_count": self.new_count,
            "delta_count": self.delta_count,
        }


@dataclass
class Diff:
    """The comparison of two profiles (figures per rank)."""

    base_path: str
    new_path: str
    ranks: list[int]
    figures: list[FigureChange]
    op_types: list[OpTypeChange]
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether any figure or op type differs."""
        return any(f.changed for f in self.figures) or any(o.status != SAME for o in self.op_types)

    def figure(self, metric: str, rank: int | None = None) -> FigureChange:
        """The change of ``metric`` (of ``rank``, default the first)."""
        rank = self.ranks[0] if rank is None else rank
        return next(f for f in self.figures if f.metric == metric and f.rank == rank)

    def op_type(self, op_type: str, rank: int | None = None) -> OpTypeChange:
        """The change of ``op_type`` (of ``rank``, default the first); KeyError if absent."""
        rank = self.ranks[0] if rank is None else rank
        for o in self.op_types:
            if o.op_type == op_type and o.rank == rank:
                return o
        raise KeyError(op_type)

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe document (``msprof diff --json``); relative changes from 0 are null."""
        return {
            "base": self.base_path,
            "new": self.new_path,
            "ranks": self.ranks,
            "changed": self.changed,
            "warnings": self.warnings,
            "figures": [f.to_dict() for f in self.figures],
            "op_types": [o.to_dict() for o in self.op_types],
        }


def program(command: str) -> str:
    """The program a recorded command ran: its script (``train.py``) or module (``-m pkg``),
    without the interpreter, launcher options or the script's own arguments."""
    words = command.split()
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            if words[i + 1] != "torch.distributed.run":
                return f"-m {words[i + 1]}"
        elif word.endswith(".py"):
            return word
    return words[0] if words else ""


def comparability(
    base: dict[int, GateFigures],
    new: dict[int, GateFigures],
    names: tuple[str, str] = ("BASE", "NEW"),
) -> tuple[list[str], list[str]]:
    """Why ``base`` and ``new`` (figures per rank) cannot be compared, and what to warn
    about even when they can: ``(reasons, warnings)``."""
    b, n = names
    reasons: list[str] = []
    warnings: list[str] = []
    if sorted(base) != sorted(new):
        reasons.append(f"different ranks: {b} has {sorted(base)}, {n} has {sorted(new)}")
    devices = ({f.device for f in base.values()}, {f.device for f in new.values()})
    if devices[0] != devices[1]:
        reasons.append(
            f"different device presets: {b} ran on {', '.join(sorted(devices[0]))}, "
            f"{n} on {', '.join(sorted(devices[1]))}"
        )
    for rank in sorted(set(base) & set(new)):
        if base[rank].steps != new[rank].steps:
            where = f"rank {rank}: " if len(base) > 1 else ""
            reasons.append(
                f"{where}different step counts: {b} has {base[rank].steps} analysed steps, "
                f"{n} has {new[rank].steps}"
            )
            break
    programs = (
        {program(f.command) for f in base.values()} - {""},
        {program(f.command) for f in new.values()} - {""},
    )
    if programs[0] and programs[1] and programs[0] != programs[1]:
        warnings.append(
            f"different programs: {b} ran {', '.join(sorted(programs[0]))}, {n} ran "
            f"{', '.join(sorted(programs[1]))} (a diff of two programs compares more than a "
            "change)"
        )
    warnings += _host_time_warnings(base, new, b, n)
    return reasons, warnings


def _host_time_warnings(
    base: dict[int, GateFigures], new: dict[int, GateFigures], b: str, n: str
) -> list[str]:
    """What the two profiles' host time means for their step times (modelled, measured by
    ``--host-time measured``, or measured by the profiler an imported profile came from)."""

    def how(figs: dict[int, GateFigures]) -> str:
        imported = sorted({f.source_format for f in figs.values() if f.imported})
        if imported:
            return f"measured (an imported {'/'.join(imported)} profile)"
        return "/".join(sorted({f.host_time for f in figs.values()}))

    said = (how(base), how(new))
    if said[0] != said[1] and not all(s.startswith("measured") for s in said):
        return [
            f"host time is {said[0]} in {b} and {said[1]} in {n}: step times are not measured "
            "the same way"
        ]
    if any(f.imported for f in [*base.values(), *new.values()]):
        where = (
            f"{said[0]} in both" if said[0] == said[1] else f"{said[0]} in {b}, {said[1]} in {n}"
        )
        return [
            f"host time is {where}: the imported times were measured on the run (no "
            "--host-time applies), so the diff compares measured times, run-to-run noise "
            "included"
        ]
    if said[0] == "measured":
        return [
            "both profiles were recorded with --host-time measured: their step times include "
            "wall-clock noise"
        ]
    return []


def diff_figures(
    base: dict[int, GateFigures],
    new: dict[int, GateFigures],
    *,
    force: bool = False,
    base_path: str = "BASE",
    new_path: str = "NEW",
) -> Diff:
    """Compare figures per rank (see :func:`msprof_py.gates.figures.all_ranks`).

    Raises :class:`NotComparable` when they differ in device, ranks or step counts, unless
    ``force`` (then the reasons are warnings and only the common ranks are compared)."""
    reasons, warnings = comparability(base, new)
    if reasons and not force:
        raise NotComparable(reasons)
    ranks = sorted(set(base) & set(new))
    if not ranks:
        raise NotComparable([f"no rank in common ({sorted(base)} vs {sorted(new)})"])
    figures = [
        FigureChange(
            metric, r, float(getattr(base[r], metric)), float(getattr(new[r], metric)), unit
        )
        for r in ranks
        for metric, unit in FIGURES.items()
    ]
    figures.sort(key=_impact)
    op_types = []
    for r in ranks:
        b, n = base[r], new[r]
        for op_type in sorted(set(b.op_type_time_ms) | set(n.op_type_time_ms)):
            op_types.append(
                OpTypeChange(
                    op_type,
                    r,
                    b.op_type_time_ms.get(op_type, 0.0),
                    n.op_type_time_ms.get(op_type, 0.0),
                    b.op_type_count_per_step.get(op_type, 0.0),
                    n.op_type_count_per_step.get(op_type, 0.0),
                )
            )
    op_types.sort(key=lambda o: (-abs(o.delta_ms), -abs(o.delta_count), o.op_type, o.rank))
    return Diff(base_path, new_path, ranks, figures, op_types, reasons + warnings)


def _impact(f: FigureChange) -> tuple[bool, bool, float]:
    """The step time first, then the times by how much they moved (ms per step), then the
    other figures by their relative change."""
    if f.unit == "ms":
        return (f.metric != HEADLINE, False, -abs(f.delta))
    return (True, True, -_size(f.relative))


def _size(relative: float | None) -> float:
    return math.inf if relative is None else abs(relative)


def diff(
    base: Any,
    new: Any,
    *,
    force: bool = False,
    warmup: int | None = None,
) -> Diff:
    """Compare two profiles (paths, :class:`~msprof_py.profile.Profile` objects or
    :class:`~msprof_py.analyzers.api.Analysis` results) rank by rank."""
    from msprof_py.analyzers.api import Analysis, analyze
    from msprof_py.gates.figures import all_ranks

    def figures_of(item: Any) -> tuple[dict[int, GateFigures], str]:
        analysis = item if isinstance(item, Analysis) else analyze(item, warmup=warmup)
        return all_ranks(analysis), str(analysis.profile["path"])

    (b, b_path), (n, n_path) = figures_of(base), figures_of(new)
    return diff_figures(b, n, force=force, base_path=b_path, new_path=n_path)
