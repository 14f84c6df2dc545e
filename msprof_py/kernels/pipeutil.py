"""PipeUtilization.csv: per block, each pipe's busy time and its share of the core's cycles.

The columns are those of CANN's ``msprof op`` PipeUtilization.csv (``block_id``,
``sub_block_id``, ``aic_*`` for the cube core, ``aiv_*`` for the vector core, ``*_ratio`` =
unit cycles / core cycles). The simulator runs a mix block as ONE core holding every buffer,
so its instructions are split by side: M, MTE1, FIX and GM->L1 copies (MTE2) are the cube
core's (aic), V, MTE3 and GM->UB copies (MTE2) the vector core's (aiv); each side's scalar
time is one dispatch cycle per instruction of that side, the kernel's own scalar work
(``ScalarWork``, GetValue / SetValue) counts on the cube side of a mix block. Both sides of a
mix block share the block's cycles as core time; ``sub_block_id`` is 0. A vector-only (aiv)
kernel has ``N/A`` in its aic columns.

A split mix launch (``kernel_type="mix_aic_1_2"``: each block is an AIC and two AIVs with their
own pipes) has one row per AIV sub-block: ``sub_block_id`` 0 and 1, the ``aiv_*`` columns of
that vector core (its own cycles: from the block's start to its last pipe finishing) and the
``aic_*`` columns of the block's cube core (its own cycles), the same on both rows of a block
[U: which rows carry the shared AIC's figures is our reading of the published column list].
``icache_miss_rate`` is ``N/A``: instruction caches are not modelled.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from msprof_py.kernels import costs
from msprof_py.kernels.results import BlockResult, LaunchResult
from msprof_py.kernels.timeline import Instr, Pipe

#: (column stem, pipe) of the cube-core units, in CSV order
AIC_UNITS: tuple[tuple[str, str], ...] = (
    ("cube", "M"),
    ("scalar", "S"),
    ("mte1", "MTE1"),
    ("mte2", "MTE2"),
    ("mte3", "MTE3"),
    ("fixpipe", "FIX"),
)
#: (column stem, pipe) of the vector-core units, in CSV order
AIV_UNITS: tuple[tuple[str, str], ...] = (
    ("vec", "V"),
    ("scalar", "S"),
    ("mte2", "MTE2"),
    ("mte3", "MTE3"),
)


def _side_columns(side: str, units: Sequence[tuple[str, str]]) -> list[str]:
    cols = [f"{side}_time(us)", f"{side}_total_cycles"]
    for stem, _ in units:
        cols += [f"{side}_{stem}_time(us)", f"{side}_{stem}_ratio"]
    return cols


COLUMNS: tuple[str, ...] = (
    "block_id",
    "sub_block_id",
    *_side_columns("aic", AIC_UNITS),
    *_side_columns("aiv", AIV_UNITS),
    "icache_miss_rate",
)

NA = "N/A"


def instr_side(instr: Instr) -> str:
    """``aic`` or ``aiv``: which core of a mix block an instruction belongs to."""
    if instr.pipe in (Pipe.M, Pipe.MTE1, Pipe.FIX):
        return "aic"
    if instr.pipe is Pipe.MTE2:
        return "aic" if "->L1" in instr.detail else "aiv"
    if instr.pipe is Pipe.S:
        return "aic"
    return "aiv"


def side_cycles(block: BlockResult, mix: bool) -> dict[str, dict[str, int]]:
    """Busy cycles per pipe of each side (``aic`` / ``aiv``) of one block."""
    sides: dict[str, dict[str, int]] = {"aic": {}, "aiv": {}}
    if not mix:
        sides["aiv"] = dict(block.pipe_busy)
        return sides
    for instr in block.instructions:
        if not instr.cycles and not instr.nbytes and instr.pipe is not Pipe.S:
            continue
        side = instr_side(instr)
        busy = sides[side]
        busy[instr.pipe.value] = busy.get(instr.pipe.value, 0) + instr.cycles
        if instr.pipe is not Pipe.S:
            busy["S"] = busy.get("S", 0) + costs.ISSUE_CYCLES
    return sides


def _side(row: dict[str, object], side: str, busy: dict[str, int], total: int, ns: float) -> None:
    units = AIC_UNITS if side == "aic" else AIV_UNITS
    row[f"{side}_time(us)"] = _us(total, ns)
    row[f"{side}_total_cycles"] = total
    for stem, pipe in units:
        cycles = busy.get(pipe, 0)
        row[f"{side}_{stem}_time(us)"] = _us(cycles, ns)
        row[f"{side}_{stem}_ratio"] = f"{cycles / total:.3f}" if total else "0.000"


def split_rows(result: LaunchResult) -> list[dict[str, object]]:
    """One row per AIV sub-block of a split mix launch (see module docstring)."""
    ns_per_cycle = result.chip.cycles_to_ns(1)
    out: list[dict[str, object]] = []
    for block in sorted(result.blocks, key=lambda b: b.block_idx):
        aic = next(sb for sb in block.sub_blocks if sb.unit == "aic")
        for aiv in (sb for sb in block.sub_blocks if sb.unit == "aiv"):
            row: dict[str, object] = {"block_id": block.block_idx,
                                      "sub_block_id": aiv.sub_block_idx}  # fmt: skip
            _side(row, "aic", aic.pipe_busy, aic.cycles, ns_per_cycle)
            _side(row, "aiv", aiv.pipe_busy, aiv.cycles, ns_per_cycle)
            row["icache_miss_rate"] = NA
            out.append({c: row[c] for c in COLUMNS})
    return out


def rows(result: LaunchResult) -> list[dict[str, object]]:
    """One PipeUtilization row per block, or per AIV sub-block of a split mix launch (values
    as written: strings for times and ratios)."""
    if result.split_mix:
        return split_rows(result)
    mix = result.core_type != "aiv"
    ns_per_cycle = result.chip.cycles_to_ns(1)
    out: list[dict[str, object]] = []
    for block in sorted(result.blocks, key=lambda b: b.block_idx):
        total = block.cycles
        sides = side_cycles(block, mix)
        row: dict[str, object] = {"block_id": block.block_idx, "sub_block_id": 0}
        for side, units in (("aic", AIC_UNITS), ("aiv", AIV_UNITS)):
            active = side == "aiv" or mix
            row[f"{side}_time(us)"] = _us(total, ns_per_cycle) if active else NA
            row[f"{side}_total_cycles"] = total if active else NA
            for stem, pipe in units:
                busy = sides[side].get(pipe, 0)
                row[f"{side}_{stem}_time(us)"] = _us(busy, ns_per_cycle) if active else NA
                row[f"{side}_{stem}_ratio"] = (
                    f"{busy / total:.3f}" if active and total else ("0.000" if active else NA)
                )
        row["icache_miss_rate"] = NA
        out.append(row)
    return out


def _us(cycles: int, ns_per_cycle: float) -> str:
    return f"{cycles * ns_per_cycle / 1000:.3f}"


def write(result: LaunchResult, path: Path) -> Path:
    """Write ``PipeUtilization.csv`` for one launch; returns the path."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows(result))
    return path
