"""Synchronisation and block identity: SetFlag / WaitFlag / PipeBarrier, GetBlockIdx, scalar work.

``SetFlag(HardEvent.MTE2_V, 0)`` then ``WaitFlag(HardEvent.MTE2_V, 0)``: V waits until what
was issued to MTE2 before the set has finished. Ids run 0-7 on A2 (910B), 0-3 on 910A. A wait
with no set before it in program order raises (the device would hang).
"""

from __future__ import annotations

from msprof_py.kernels.core import current
from msprof_py.kernels.timeline import HardEvent, Pipe


def SetFlag(event: HardEvent, event_id: int = 0) -> None:
    """Set ``event`` (SRC_DST) once the source pipe's earlier instructions are done."""
    current().timeline.set_flag(event, event_id)


def WaitFlag(event: HardEvent, event_id: int = 0) -> None:
    """Hold the destination pipe of ``event`` until its matching SetFlag fired."""
    current().timeline.wait_flag(event, event_id)


def PipeBarrier(pipe: Pipe | str = Pipe.ALL) -> None:
    """Order a pipe's instructions (free here) or, with ALL, drain every pipe."""
    current().timeline.barrier(Pipe(pipe))


def GetBlockIdx() -> int:
    """This block's index, 0 .. block_dim - 1."""
    return current().block_idx


def GetBlockNum() -> int:
    """The launch's block_dim."""
    return current().block_dim


def ScalarWork(cycles: int, name: str = "scalar") -> None:
    """Charge ``cycles`` of scalar-unit work (address arithmetic, tiling math, loop control)."""
    current().issue(Pipe.S, name, cycles)
