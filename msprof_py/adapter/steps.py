"""Training-step boundaries: marked by ``prof.step()``, ``optimizer.step()`` or the user.

Each mark is emitted on the device's record bus as a host record named ``step:<source>`` at the
current host time, so whatever records the run (the collectors) sees the boundaries in order
and decides how to number them.
"""

from __future__ import annotations

from msprof_py.adapter import runtime
from msprof_py.device import HostKind, HostRecord

STEP_PREFIX = "step:"


def mark_step(source: str) -> None:
    """End the current training step (``source``: optimizer, torch_npu.profiler, user)."""
    state = runtime.state()
    bus = state.npu.bus
    if bus.active:
        now = state.npu.engine.host_ns
        bus.emit(HostRecord(HostKind.API, f"{STEP_PREFIX}{source}", now, now, -1, -1))
