"""Process-wide state of the npu adapter: the simulated device, modes and the current stream."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from msprof_py.adapter import op_disk_cache
from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu, Stream
from msprof_py.device.costmodel import KernelCost

NUMERICS = ("cpu", "none", "fast")
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
    calls is added to the simulated host clock. Left out of it: the adapter's and the
    recorder's own work inside each call (between :meth:`enter` and :meth:`leave`) and the
    profiler hooks' work outside calls that :meth:`discount` is told of (module-path and
    step hooks, record_function ranges); :attr:`discounted_ns` sums the latter.
    """

    settings: Settings
    npu: SimulatedNpu
    stream: Stream = field(init=False)
    measured: bool = field(init=False)
    meta: bool = field(init=False)
    #: numerics "fast": low-precision matmuls and convolutions computed widened
    #: (:mod:`msprof_py.adapter.fast_numerics`)
    fast: bool = field(init=False)
    #: plain ops may take the compiled per-op path (:mod:`msprof_py.adapter.native`), when
    #: it is built: not on shapes only (meta views)
    native: bool = field(init=False)
    #: the collectors' host-op observer (None: nothing records host ops)
    observer: OpObserver | None = field(init=False, default=None)
    #: graph capture (:mod:`msprof_py.graph.capture`): while set, kernels the backend would
    #: launch are appended here as :class:`CapturedKernel` instead of reaching the engine, and
    #: tensors created meanwhile take no device memory of their own (the graph's workspace
    #: holds them)
    capture: list[CapturedKernel] | None = field(init=False, default=None)
    #: the op compile cache and compile mode (:mod:`msprof_py.adapter.compile_cache`)
    compiled: CompileCache = field(init=False)
    #: ``torch.npu.config.allow_internal_format``: convolutions keep NPU-private formats
    #: (:mod:`msprof_py.adapter.npu_config`)
    internal_format: bool = field(init=False, default=True)
    #: measured host time: the profiler hooks' own time left out of the application's
    discounted_ns: int = field(init=False, default=0)
    _op_open: bool = field(init=False, default=False)
    _outside_since: int = field(init=False, default=0)
    _depth: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.stream = self.npu.engine.default_stream
        disk = op_disk_cache.from_env(self.npu.spec.soc_version)
        self.compiled = CompileCache(self.npu.spec.compile, disk)
        self.measured = self.settings.host_time == "measured"
        self.meta = self.settings.numerics == "none"
        self.fast = self.settings.numerics == "fast"
        self.native = not self.meta
        self._outside_since = time.perf_counter_ns()

    def enter(self, name: str = "", args: tuple = ()) -> None:
        """The application called into the device: charge its time since the last call.

        ``name`` (an ATen op, ``aten::copy_`` ...) opens a host op for the observer, if any.
        """
        if self._depth == 0:
            if self.measured:
                now = time.perf_counter_ns()
                self.npu.engine.advance_host(max(0, now - self._outside_since), "python")
            if name and self.observer is not None:
                self.observer.op_begin(name, args)
                self._op_open = True
        self._depth += 1

    def catch_up(self) -> None:
        """Measured host time: charge the application's time since the last device call now,
        so that a range that begins or ends here (an annotation) spans the real time in it.
        Nothing in modelled mode or inside a device call."""
        if self.measured and self._depth == 0:
            now = time.perf_counter_ns()
            self.npu.engine.advance_host(max(0, now - self._outside_since), "python")
            self._outside_since = now

    def discount(self, since: int) -> None:
        """Measured host time: the profiler's own work from ``since`` (``perf_counter_ns``) to
        now is not the application's; leave it out of the next charge (the part after the
        last device call, which already ended the charged time)."""
        if self.measured and self._depth == 0:
            now = time.perf_counter_ns()
            spent = max(0, now - max(since, self._outside_since))
            self._outside_since += spent
            self.discounted_ns += spent

    def leave(self) -> None:
        """The device call returned to the application."""
        self._depth -= 1
        if self._depth == 0:
            if self._op_open:
                self._op_open = False
                if self.observer is not None:
                    self.observer.op_end()
            if self.measured:
                self._outside_since = time.perf_counter_ns()


@dataclass(frozen=True, slots=True)
class CapturedKernel:
    """A kernel the backend launched while a graph was being captured: its task-record name,
    op type, cost and the (shape, dtype, format) keys of the tensors it reads and writes."""

    name: str
    op_type: str
    cost: KernelCost
    inputs: tuple = ()
    outputs: tuple = ()


class OpObserver(Protocol):
    """Receives the host ops of the application (the collectors' recorder implements it)."""

    def op_begin(self, name: str, args: tuple) -> None:
        """An op the application called starts (host clock: the engine's ``host_ns``)."""

    def op_end(self) -> None:
        """The op started last returned to the application."""


STATE: AdapterState | None = None


def state() -> AdapterState:
    """The installed adapter state; raises if :func:`msprof_py.adapter.install` was not called."""
    if STATE is None:
        raise RuntimeError("the npu device is not installed: call msprof_py.adapter.install()")
    return STATE
