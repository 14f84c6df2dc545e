"""Checking gate figures against limits: one :class:`Check` per metric, with its verdict.

Absolute limits name a figure of :class:`~msprof_py.gates.figures.GateFigures` (``LIMITS``
says which figure each budget key reads and whether it is a ceiling or a floor);
``op_type_time_ms`` limits take one op type each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from msprof_py.gates.figures import GateFigures


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
        unit = f" {self.unit}" if self.unit else ""
        relation = (
            ("<=" if self.ceiling else ">=") if self.passed else (">" if self.ceiling else "<")
        )
        text = f"{self.metric} = {self.value:.6g}{unit} {relation} limit {self.limit:.6g}{unit}"
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
