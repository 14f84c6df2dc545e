"""Recompile counting per code object, with Dynamo's limit.

Dynamo compiles a frame again when its guards fail (a new shape, a new dtype ...); after
``torch._dynamo.config.recompile_limit`` compiled versions (8 by default) it stops compiling
that code object and runs it eagerly. The npu backend reports every compile here, keyed by the
Dynamo frame (one code object); :func:`stats` tells how many times each was compiled and
whether it reached the limit, i.e. whether later guard failures run eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class CodeStats:
    """Compiles of one code object.

    ``compiles`` counts Dynamo compiles of the frame (the first and every recompile; one
    compile of a frame may hand several graphs to the backend, one per graph break);
    ``graphs`` the graphs the backend received for it.
    """

    code: str
    compiles: int = 0
    graphs: int = 0
    limit: int = 8
    _frame_compiles: set[int] = field(default_factory=set, repr=False)

    @property
    def recompiles(self) -> int:
        """Compiles after the first."""
        return max(0, self.compiles - 1)

    @property
    def limit_reached(self) -> bool:
        """The code object holds ``limit`` compiled versions: a new guard failure runs eagerly."""
        return self.compiles >= self.limit


_STATS: dict[int, CodeStats] = {}


def _current() -> tuple[int, int, str]:
    """(frame id, compile index of that frame, code label) of the compile in progress."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    frame_id = compile_id.frame_id if compile_id is not None else -1
    frame_compile = compile_id.frame_compile_id if compile_id is not None else 0
    label = f"frame {frame_id}"
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        code = tx.f_code
        label = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    except Exception:  # outside Dynamo (a backend called by hand): the frame id only
        pass
    return frame_id if frame_id is not None else -1, frame_compile or 0, label


def note_graph() -> CodeStats:
    """The backend received a graph: count it (and the compile it belongs to)."""
    frame_id, frame_compile, label = _current()
    entry = _STATS.get(frame_id)
    if entry is None:
        entry = _STATS[frame_id] = CodeStats(label)
    entry.limit = int(torch._dynamo.config.recompile_limit)
    entry.graphs += 1
    if frame_compile not in entry._frame_compiles:
        entry._frame_compiles.add(frame_compile)
        entry.compiles += 1
    return entry


def stats() -> dict[str, CodeStats]:
    """Compile statistics per code object (label: ``name (file:line)``)."""
    return {entry.code: entry for entry in _STATS.values()}


def reset() -> None:
    """Forget every count (pair with ``torch._dynamo.reset()``)."""
    _STATS.clear()
