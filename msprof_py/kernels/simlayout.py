"""``msprof op simulator`` output layout: one folder per compute unit, as CANN's tool writes.

For each profiled launch, ``<launch folder>/simulator/`` holds::

    core{i}.cubecore0/   core{i}.cubecore0_instr_exe.csv, core{i}.cubecore0_code_exe.csv,
                         trace.json
    core{i}.veccore{j}/  core{i}.veccore{j}_instr_exe.csv, ..._code_exe.csv, trace.json
    trace.json           (every unit of the launch)

Units: a split mix block (``kernel_type="mix_aic_1_2"``) on cube core i is ``core{i}.cubecore0``
(its AIC) and ``core{i}.veccore0`` / ``veccore1`` (its AIVs); a mix block without the split is
cut by side (M / MTE1 / FIX / GM->L1 on the cubecore, the rest on veccore0, as
PipeUtilization does); a vector-only kernel's block on vector core v is ``core{v // 2}.veccore
{v % 2}`` (two vector cores per cube core on 910B); on a coupled chip (910A) every block runs
on ``core{i}.aicore0``. ``*_instr_exe.csv``: every instruction that took cycles (start / end
cycle in launch time, pipe, bytes, the kernel source line that issued it). ``*_code_exe.csv``:
per kernel source line, the instructions it issued and their cycles per pipe (the tool's code
hotspot view; ours maps to Python lines, the tool's ``-g`` maps to C++ lines). ``trace.json``:
the instruction pipeline (see :mod:`optrace`). Not written: ``dump/`` (raw simulator dumps)
and ``visualize_data.bin`` (the MindStudio Insight binary).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

from msprof_py.kernels import pipeutil
from msprof_py.kernels.optrace import trace_events
from msprof_py.kernels.results import InstrRecord, LaunchResult
from msprof_py.kernels.timeline import PIPES

INSTR_COLUMNS = ("block", "pipe", "instruction", "start_cycle", "end_cycle", "cycles", "bytes",
                 "source", "detail")  # fmt: skip
CODE_COLUMNS = ("source", "instructions", "cycles", *(f"{p.value}_cycles" for p in PIPES))


def unit_of(result: LaunchResult, r: InstrRecord) -> str:
    """The simulator folder name of the unit that ran instruction ``r``."""
    if result.core_type == "aicore":
        return f"core{r.core}.aicore0"
    if result.core_type == "aiv":
        return f"core{r.core // 2}.veccore{r.core % 2}"
    if r.unit:
        return f"core{r.core}.cubecore0" if r.unit == "aic" else f"core{r.core}.veccore{r.unit[3:]}"
    side = _side(r)
    return f"core{r.core}.cubecore0" if side == "aic" else f"core{r.core}.veccore0"


def _side(r: InstrRecord) -> str:
    if r.pipe in ("M", "MTE1", "FIX"):
        return "aic"
    if r.pipe == "MTE2":
        return "aic" if "->L1" in r.detail else "aiv"
    return "aic" if r.pipe == "S" else "aiv"


def by_unit(result: LaunchResult) -> dict[str, list[InstrRecord]]:
    """Every instruction that took cycles, grouped by unit folder name (sorted)."""
    units: dict[str, list[InstrRecord]] = defaultdict(list)
    for r in result.instructions():
        units[unit_of(result, r)].append(r)
    return dict(sorted(units.items()))


def code_rows(instrs: list[InstrRecord]) -> list[dict[str, object]]:
    """Per source line: instructions, total cycles and cycles per pipe (most cycles first)."""
    lines: dict[str, dict[str, int]] = {}
    for r in instrs:
        row = lines.setdefault(r.source or "?", defaultdict(int))
        row["instructions"] += 1
        row["cycles"] += r.cycles
        row[f"{r.pipe}_cycles"] += r.cycles
    out = [{"source": src, **{c: row.get(c, 0) for c in CODE_COLUMNS[1:]}}
           for src, row in lines.items()]  # fmt: skip
    out.sort(key=lambda row: (-int(row["cycles"]), str(row["source"])))  # type: ignore[arg-type]
    return out


def write_simulator(result: LaunchResult, folder: Path) -> Path:
    """Write ``folder/simulator/`` for one launch (see module docstring); returns it."""
    sim = folder / "simulator"
    sim.mkdir(parents=True, exist_ok=True)
    events = trace_events(result)
    meta = [e for e in events if e.get("ph") == "M"]
    slices = [e for e in events if e.get("ph") == "X"]
    for unit, instrs in by_unit(result).items():
        d = sim / unit
        d.mkdir(exist_ok=True)
        with (d / f"{unit}_instr_exe.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(INSTR_COLUMNS)
            for r in instrs:
                w.writerow((r.block, r.pipe, r.name, r.start, r.end, r.cycles, r.nbytes,
                            r.source, r.detail))  # fmt: skip
        with (d / f"{unit}_code_exe.csv").open("w", newline="", encoding="utf-8") as fh:
            w2 = csv.DictWriter(fh, fieldnames=list(CODE_COLUMNS))
            w2.writeheader()
            w2.writerows(code_rows(instrs))
        mine = [e for e in slices if _event_unit(result, e) == unit]
        doc = {"traceEvents": meta + mine, "displayTimeUnit": "ns"}
        (d / "trace.json").write_text(json.dumps(doc), encoding="utf-8")
    doc = {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"kernel": result.name}}
    (sim / "trace.json").write_text(json.dumps(doc), encoding="utf-8")
    pipeutil.write(result, folder / "PipeUtilization.csv")
    return sim


def _event_unit(result: LaunchResult, e: dict) -> str:
    args = e["args"]
    r = InstrRecord(args["block"], e["pid"], e["cat"], e["name"], 0, 0, args["bytes"],
                    args["detail"], args.get("unit", ""))  # fmt: skip
    return unit_of(result, r)
