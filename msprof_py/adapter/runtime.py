"""Process-wide state of the npu adapter: the simulated device, modes and the current stream."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from msprof_py.device import SimulatedNpu, Stream

NUMERICS = ("cpu", "none")
HOST_TIMES = ("modeled", "measured")


@dataclass(frozen=True)
class Settings:
    """How the adapter was installed."""

    device: str
    numerics: str
    host_time: str


@dataclass(eq=False)
class AdapterState:
    """Everything the backend needs per op: the device, the modes, the current stream.

    With ``host_time="measured"`` the real time the application spent between two device
    calls (excluding the adapter's own work) is added to the simulated host clock.
    """

    settings: Settings
    npu: SimulatedNpu
    stream: Stream = field(init=False)
    measured: bool = field(init=False)
    meta: bool = field(init=False)
    steps_marked: int = field(init=False, default=0)
    _outside_since: int = field(init=False, default=0)
    _depth: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.stream = self.npu.engine.default_stream
        self.measured = self.settings.host_time == "measured"
        self.meta = self.settings.numerics == "none"
        self._outside_since = time.perf_counter_ns()

    def enter(self) -> None:
        """The application called into the device: charge its time since the last call."""
        if self._depth == 0 and self.measured:
            now = time.perf_counter_ns()
            self.npu.engine.advance_host(max(0, now - self._outside_since), "python")
        self._depth += 1

    def leave(self) -> None:
        """The device call returned to the application."""
        self._depth -= 1
        if self._depth == 0 and self.measured:
            self._outside_since = time.perf_counter_ns()


STATE: AdapterState | None = None


def state() -> AdapterState:
    """The installed adapter state; raises if :func:`msprof_py.adapter.install` was not called."""
    if STATE is None:
        raise RuntimeError("the npu device is not installed: call msprof_py.adapter.install()")
    return STATE
