"""Checking gate figures against limits: one :class:`Check` per metric, with its verdict.

Absolute limits name a figure of :class:`~msprof_py.gates.figures.GateFigures` (``LIMITS``
says which figure each budget key reads and whether it is a ceiling or a floor);
``op_type_time_ms`` limits take one op type each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from msprof_py.gates.figures import GateFigures
from msprof_py.gates.numbers import with_unit


@dataclass(frozen=True)
class Limit:
    """What a budget key checks: the figure it reads, its unit, and ceiling (max) or floor."""

    figure: str
    unit: str
    ceiling: bool = True
    description: str = ""


#: absolute budget keys -> the figure they limit
LIMITS: dict[str, Limit] = {
    "step_time_ms": Limit("step_time_ms", "ms", description="mean step time"),
    "device_time_ms": Limit("device_time_ms", "ms", description="device busy time per step"),
    "peak_memory_mb": Limit("peak_memory_mb", "MiB", description="peak reserved device memory"),
    "peak_allocated_mb": Limit("peak_allocated_mb", "MiB", description="peak allocated memory"),
    "copy_ratio": Limit("copy_ratio", "", description="copy time / step time"),
    "exposed_copy_ms": Limit("exposed_copy_ms", "ms", description="copy time not hidden"),
    "copy_bytes_per_step": Limit("copy_bytes_per_step", "B", description="bytes copied"),
    "min_utilization": Limit(
        "utilization", "", ceiling=False, description="device busy time / step time"
    ),
    "launches_per_step": Limit("launches_per_step", "", description="kernel launches per step"),
    "syncs_per_step": Limit("syncs_per_step", "", description="host synchronisations per step"),
    "sync_time_ms": Limit("sync_time_ms", "ms", description="host time blocked per step"),
    "communication_ms": Limit("communication_ms", "ms", description="communication per step"),
    "communication_not_overlapped_ms": Limit(
        "communication_not_overlapped_ms", "ms", description="exposed communication per step"
    ),
}
#: the table-valued absolute key: device time per step of one op type
OP_TYPE_TIME = "op_type_time_ms"


@dataclass(frozen=True)
class Check:
    """One checked metric: its value, the limit, and whether it passed."""

    metric: str
    value: float
    limit: float
    ceiling: bool
    passed: bool
    kind: str = "absolute"
    unit: str = ""
    baseline: float | None = None
    rank: int = 0
    note: str = ""

    @property
    def verdict(self) -> str:
        """``pass`` or ``FAIL``."""
        return "pass" if self.passed else "FAIL"

    def describe(self) -> str:
        """One line: ``step_time_ms = 13.1 ms > limit 12.5 ms``."""
        relation = (
            ("<=" if self.ceiling else ">=") if self.passed else (">" if self.ceiling else "<")
        )
        value, limit = with_unit(self.value, self.unit), with_unit(self.limit, self.unit)
        text = f"{self.metric} = {value} {relation} limit {limit}"
        return f"{text} ({self.note})" if self.note else text

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict, with the verdict."""
        return asdict(self) | {"verdict": self.verdict}


def within(value: float, limit: float, ceiling: bool) -> bool:
    """Whether ``value`` respects ``limit`` (a ceiling or a floor); exact, no tolerance."""
    return value <= limit if ceiling else value >= limit


def check_absolute(
    figs: GateFigures,
    limits: dict[str, float],
    op_type_limits: dict[str, float] | None = None,
) -> list[Check]:
    """Check ``figs`` against absolute ``limits`` (keys of :data:`LIMITS`) and per-op-type
    device-time limits; an op type absent from the profile has 0 ms."""
    checks: list[Check] = []
    for key, limit_value in limits.items():
        limit = LIMITS[key]
        value = float(getattr(figs, limit.figure))
        checks.append(
            Check(
                metric=key,
                value=value,
                limit=float(limit_value),
                ceiling=limit.ceiling,
                passed=within(value, float(limit_value), limit.ceiling),
                unit=limit.unit,
                rank=figs.rank,
            )
        )
    for op_type, limit_value in (op_type_limits or {}).items():
        value = figs.op_type_time_ms.get(op_type, 0.0)
        checks.append(
            Check(
                metric=f"{OP_TYPE_TIME}.{op_type}",
                value=value,
                limit=float(limit_value),
                ceiling=True,
                passed=within(value, float(limit_value), True),
                unit="ms",
                rank=figs.rank,
            )
        )
    return checks


#: what a relative budget key checks: the figure compared with the baseline's (for a floor,
#: the allowed drop)
Relative = Limit

#: relative budget keys (growth allowed against a baseline; a drop for floors) -> figure
RELATIVE: dict[str, Relative] = {
    "step_time": Relative("step_time_ms", "ms", description="mean step time"),
    "device_time": Relative("device_time_ms", "ms", description="device busy time per step"),
    "peak_memory": Relative("peak_memory_mb", "MiB", description="peak reserved memory"),
    "peak_allocated": Relative("peak_allocated_mb", "MiB", description="peak allocated memory"),
    "copy_ratio": Relative("copy_ratio", "", description="copy time / step time"),
    "exposed_copy": Relative("exposed_copy_ms", "ms", description="copy time not hidden"),
    "copy_bytes": Relative("copy_bytes_per_step", "B", description="bytes copied per step"),
    "utilization": Relative(
        "utilization", "", ceiling=False, description="device busy time / step time (drop)"
    ),
    "launches_per_step": Relative("launches_per_step", "", description="kernel launches"),
    "syncs_per_step": Relative("syncs_per_step", "", description="host synchronisations"),
    "sync_time": Relative("sync_time_ms", "ms", description="host time blocked per step"),
    "communication": Relative("communication_ms", "ms", description="communication per step"),
    "communication_not_overlapped": Relative(
        "communication_not_overlapped_ms", "ms", description="exposed communication per step"
    ),
}
#: the figure names work as relative keys too (``step_time_ms = "2%"``)
RELATIVE_ALIASES: dict[str, str] = {
    spec.figure: key for key, spec in RELATIVE.items() if spec.figure != key
}
#: the table-valued relative key: growth of one op type's device time per step ("*": every
#: op type of either profile)
OP_TYPE_GROWTH = "op_type_time"


def parse_growth(value: object) -> float:
    """An allowed change as a fraction: ``"2%"`` -> 0.02, ``0.02`` -> 0.02.

    Raises ValueError (with the reason) for anything else or a negative amount."""
    if isinstance(value, bool):
        raise ValueError('expected a percentage such as "2%" or a fraction such as 0.02')
    if isinstance(value, str):
        text = value.strip()
        if not text.endswith("%"):
            raise ValueError(f'expected a percentage such as "2%", got "{value}"')
        try:
            fraction = float(text[:-1].strip()) / 100
        except ValueError:
            raise ValueError(f'expected a percentage such as "2%", got "{value}"') from None
    elif isinstance(value, (int, float)):
        fraction = float(value)
    else:
        raise ValueError('expected a percentage such as "2%" or a fraction such as 0.02')
    if not fraction >= 0 or fraction == float("inf"):
        raise ValueError(f"the allowed change must be a finite amount >= 0, got {value!r}")
    return fraction


def _relative_check(
    metric: str,
    value: float,
    base: float,
    allowed: float,
    ceiling: bool,
    unit: str,
    rank: int,
) -> Check:
    limit = base * (1 + allowed) if ceiling else base * (1 - allowed)
    sign = "+" if ceiling else "-"
    shown = with_unit(base, unit)
    if base:
        note = f"{(value - base) / base:+.2%} vs baseline {shown}; allowed {sign}{allowed:.2%}"
    else:
        note = f"baseline {shown}; allowed {sign}{allowed:.2%}"
    return Check(
        metric=metric,
        value=value,
        limit=limit,
        ceiling=ceiling,
        passed=within(value, limit, ceiling),
        kind="relative",
        unit=unit,
        baseline=base,
        rank=rank,
        note=note,
    )


def check_relative(
    figs: GateFigures,
    baseline: GateFigures,
    growth: dict[str, float | str],
    op_type_growth: dict[str, float | str] | None = None,
) -> list[Check]:
    """Check ``figs`` against ``baseline``'s figures: each key of :data:`RELATIVE` (or its
    figure name) may grow by the given amount (``"2%"`` or 0.02); floors (utilisation) may
    drop by it. ``op_type_growth`` limits the growth of op types' device time per step
    (``"*"``: every op type of either profile; an op type new in ``figs`` has baseline 0,
    so any time of it fails). The metric of a check is its budget key."""
    checks: list[Check] = []
    for key, amount in growth.items():
        name = RELATIVE_ALIASES.get(key, key)
        spec = RELATIVE[name]
        checks.append(
            _relative_check(
                key,
                float(getattr(figs, spec.figure)),
                float(getattr(baseline, spec.figure)),
                parse_growth(amount),
                spec.ceiling,
                spec.unit,
                figs.rank,
            )
        )
    op_type_growth = dict(op_type_growth or {})
    default = op_type_growth.pop("*", None)
    types = dict.fromkeys(op_type_growth)
    if default is not None:
        every = sorted(set(figs.op_type_time_ms) | set(baseline.op_type_time_ms))
        types |= dict.fromkeys(every)
    for op_type in types:
        amount = op_type_growth.get(op_type, default)
        checks.append(
            _relative_check(
                f"{OP_TYPE_GROWTH}.{op_type}",
                figs.op_type_time_ms.get(op_type, 0.0),
                baseline.op_type_time_ms.get(op_type, 0.0),
                parse_growth(amount),
                True,
                "ms",
                figs.rank,
            )
        )
    return checks
