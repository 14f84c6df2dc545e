"""The instruction pipeline of a launch as a Chrome trace (``trace.json``, opens in Perfetto),
and the per-instruction table (``instr_exe.csv``).

As ``msprof op simulator`` draws it: one process per physical core, one thread per pipe (S, V,
M, MTE1, MTE2, MTE3, FIX), one complete ("X") slice per instruction that took cycles, at the
chip clock (timestamps in microseconds from the kernel's start). Flags and queue events (no
cycles) are instant ("i") events on their pipe's thread. Every slice's args name the block, the
cycles, the bytes moved and the operands. A split mix launch has one thread per sub-core and
pipe ("aic MTE2", "aiv0 V", "aiv1 V"...).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from msprof_py.kernels.results import LaunchResult
from msprof_py.kernels.timeline import PIPES

PIPE_TID = {p.value: i for i, p in enumerate(PIPES)}
#: thread-id offset of each sub-core of a split mix block
UNIT_TID = {"": 0, "aic": 0, "aiv0": 10, "aiv1": 20}


def _tid(unit: str, pipe: str) -> int:
    return UNIT_TID.get(unit, 0) + PIPE_TID[pipe]


def trace_events(result: LaunchResult, *, syncs: bool = True) -> list[dict[str, Any]]:
    """The trace's events: metadata naming cores and pipes, then the instructions."""
    us = result.chip.cycles_to_ns(1) / 1000
    events: list[dict[str, Any]] = []
    for cr in result.core_results:
        events.append(
            {"ph": "M", "name": "process_name", "pid": cr.core, "tid": 0,
             "args": {"name": f"core{cr.core} ({result.core_type}) blocks {cr.blocks}"}}
        )  # fmt: skip
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": cr.core, "tid": 0,
             "args": {"sort_index": cr.core}}
        )  # fmt: skip
        units = ("aic", "aiv0", "aiv1") if result.split_mix else ("",)
        for unit in units:
            for pipe in PIPE_TID:
                events.append(
                    {"ph": "M", "name": "thread_name", "pid": cr.core, "tid": _tid(unit, pipe),
                     "args": {"name": f"{unit} {pipe}".strip()}}
                )  # fmt: skip
    for r in result.instructions(syncs=syncs):
        base = {"name": r.name, "pid": r.core, "tid": _tid(r.unit, r.pipe), "ts": r.start * us}
        args = {"block": r.block, "cycles": r.cycles, "bytes": r.nbytes, "detail": r.detail}
        if r.unit:
            args["unit"] = r.unit
        if r.cycles:
            events.append({**base, "ph": "X", "dur": r.cycles * us, "cat": r.pipe, "args": args})
        else:
            events.append({**base, "ph": "i", "s": "t", "cat": "sync", "args": args})
    return events


def write_trace(result: LaunchResult, path: Path) -> Path:
    """Write ``trace.json`` (Chrome trace format, ``{"traceEvents": [...]}``)."""
    doc = {
        "traceEvents": trace_events(result),
        "displayTimeUnit": "ns",
        "otherData": {
            "kernel": result.name,
            "chip": result.chip.name,
            "block_dim": result.block_dim,
            "clock_hz": result.chip.clock_hz,
        },
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


INSTR_COLUMNS = ("core", "block", "pipe", "instruction", "start_cycle", "end_cycle", "cycles",
                 "bytes", "detail")  # fmt: skip


def write_instr_table(result: LaunchResult, path: Path) -> Path:
    """Write ``instr_exe.csv``: every instruction that took cycles, in launch time."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(INSTR_COLUMNS)
        for r in result.instructions():
            writer.writerow(
                (r.core, r.block, r.pipe, r.name, r.start, r.end, r.cycles, r.nbytes, r.detail)
            )
    return path
