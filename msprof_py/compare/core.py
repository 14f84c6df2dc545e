"""``compare(base, new)``: two profiles side by side, as ``msprof-analyze compare`` does.

Every table is per compared step (means over each side's analysed steps, or the one step
asked for). When a side has no device work (a CPU-only trace), its host op time stands in for
device time and the comparison is a **projection**: every table says so (:attr:`label`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from msprof_py.compare import communication, memory, modules, operators, overall
from msprof_py.compare.records import device_op_names
from msprof_py.compare.side import CompareError, Side, load_profile, make_side
from msprof_py.profile import Profile

DEVICE_LABEL = "device time (NPU vs NPU)"
PROJECTION_LABEL = "projection (CPU host time vs NPU device time)"
HOST_LABEL = "host time (no device work on either side)"

#: sheet (CSV file stem) -> (attribute of :class:`Comparison`, key -> header of its columns)
SHEETS: dict[str, tuple[str, dict[str, str]]] = {
    "OverallMetrics": ("overall", overall.COLUMNS),
    "OperatorCompare": ("operators", operators.COLUMNS),
    "OperatorCompareStatistic": ("operator_statistic", operators.STATISTIC_COLUMNS),
    "ModuleCompare": ("modules", modules.COLUMNS),
    "MemoryCompare": ("memory", memory.COLUMNS),
    "MemoryCompareStatistic": ("memory_statistic", memory.STATISTIC_COLUMNS),
    "CommunicationCompare": ("communication", communication.COLUMNS),
}


@dataclass
class Comparison:
    """The result of :func:`compare`: both sides, the tables (DataFrames whose columns are
    the keys of :data:`SHEETS`' column maps) and the warnings."""

    base: Side
    new: Side
    overall: pd.DataFrame
    operators: pd.DataFrame
    operator_statistic: pd.DataFrame
    modules: pd.DataFrame
    memory: pd.DataFrame
    memory_statistic: pd.DataFrame
    communication: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def projection(self) -> bool:
        """A side has no device work: host time is compared with device time."""
        return not (self.base.on_device and self.new.on_device)

    @property
    def label(self) -> str:
        """What the times compare (:data:`PROJECTION_LABEL` for a projection)."""
        if self.base.on_device and self.new.on_device:
            return DEVICE_LABEL
        if self.base.on_device or self.new.on_device:
            if self.base.on_device:
                return "projection (NPU device time vs CPU host time)"
            return PROJECTION_LABEL
        return HOST_LABEL

    def table(self, sheet: str) -> pd.DataFrame:
        """The table of ``sheet`` (a key of :data:`SHEETS`)."""
        return getattr(self, SHEETS[sheet][0])

    def to_json(self) -> dict[str, Any]:
        """The machine-readable document (``msprof compare --json``); keys are stable."""
        return {
            "mode": "projection" if self.projection else "device",
            "label": self.label,
            "base": _side_json(self.base),
            "new": _side_json(self.new),
            "warnings": list(self.warnings),
            **{attr: _records(self.table(sheet)) for sheet, (attr, _) in SHEETS.items()},
        }


def _side_json(side: Side) -> dict[str, Any]:
    allocated, reserved = memory.peaks(side)
    return {
        "path": side.path,
        "rank": side.data.rank,
        "source": side.source,
        "steps": side.steps,
        "device": side.meta.get("device") or "",
        "command": side.meta.get("command") or "",
        "peak_allocated_bytes": allocated,
        "peak_reserved_bytes": reserved,
    }


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in frame.to_dict(orient="records"):
        out.append({k: _plain(v) for k, v in row.items()})
    return out


def _plain(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value


def _warnings(base: Side, new: Side) -> list[str]:
    from msprof_py.gates.diff import program

    out = []
    programs = (
        program(str(base.meta.get("command") or "")),
        program(str(new.meta.get("command") or "")),
    )
    if programs[0] and programs[1] and programs[0] != programs[1]:
        out.append(
            f"different programs: BASE ran {programs[0]}, NEW ran {programs[1]} (a comparison "
            "of two programs compares more than a change)"
        )
    devices = (str(base.meta.get("device") or ""), str(new.meta.get("device") or ""))
    if base.on_device and new.on_device and all(devices) and devices[0] != devices[1]:
        out.append(f"different devices: BASE ran on {devices[0]}, NEW on {devices[1]}")
    for side in (base, new):
        if not side.on_device:
            out.append(
                f"{side.label} has no device tasks: its host op time is compared with the "
                "other side's device time (a projection, not a measurement)"
            )
        if side.data.step_source.startswith("whole run"):
            out.append(f"{side.label} has no steps: the whole recording counts as one step")
    return out


def common_rank(base: Profile, new: Profile, rank: int | None) -> int:
    """``rank``, or the first rank both profiles have."""
    if rank is not None:
        return rank
    shared = sorted(set(base.ranks) & set(new.ranks))
    if shared:
        return shared[0]
    if not base.ranks or not new.ranks:
        empty = "BASE" if not base.ranks else "NEW"
        raise CompareError(f"{empty} has no ranks")
    raise CompareError(
        f"no rank in common (BASE has {base.ranks}, NEW has {new.ranks}); pick one with --rank"
    )


def compare(
    base: Profile | str | Path,
    new: Profile | str | Path,
    *,
    base_step: int | None = None,
    new_step: int | None = None,
    rank: int | None = None,
    warmup: int | None = None,
    op_name_map: Mapping[str, str] | None = None,
) -> Comparison:
    """Compare ``new`` with ``base`` (Profiles or their paths): per step, the overall split,
    operators, modules, memory and communication. ``base_step``/``new_step``: compare only
    that step of a side (default: the mean over its analysed steps). ``op_name_map``: base op
    names -> the names they match on the new side."""
    b_prof, n_prof = load_profile(base), load_profile(new)
    r = common_rank(b_prof, n_prof, rank)
    b = make_side("BASE", b_prof, r, base_step, warmup)
    n = make_side("NEW", n_prof, r, new_step, warmup)
    if not b.on_device and n.on_device:
        b.peer_names = device_op_names(n)
    elif not n.on_device and b.on_device:
        n.peer_names = device_op_names(b)
    ops = operators.operator_table(b, n, op_name_map)
    return Comparison(
        base=b,
        new=n,
        overall=overall.overall_table(b, n),
        operators=ops,
        operator_statistic=operators.statistic_table(ops),
        modules=modules.module_table(b, n),
        memory=memory.memory_table(b, n),
        memory_statistic=memory.statistic_table(b, n),
        communication=communication.communication_table(b, n),
        warnings=_warnings(b, n),
    )
