"""Training-step boundaries: marked by ``prof.step()``, ``optimizer.step()`` or the user.

Each mark is emitted on the device's record bus as a host record named ``step:<n>`` at the
current host time, so whatever records the run (the collectors) sees the boundaries in order.
"""

from __future__ import annotations

from msprof_py.adapter import runtime
from msprof_py.device import HostKind, HostRecord

STEP_PREFIX = "step:"


def mark_step(source: str) -> int:
    """End the current step; return the number of the step that ended (from 0)."""
    state = runtime.state()
    number = state.steps_marked
    state.steps_marked += 1
    bus = state.npu.bus
    if bus.active:
        now = state.npu.engine.host_ns
        bus.emit(HostRecord(HostKind.API, f"{STEP_PREFIX}{number}", now, now, -1, -1))
    return number
