"""SimulatedNpu: one simulated device — its spec, engine, memory and record bus together."""

from __future__ import annotations

from pathlib import Path

from msprof_py.device.caching import CachingAllocator
from msprof_py.device.engine import Engine
from msprof_py.device.l2 import L2Residency
from msprof_py.device.memory import HbmAllocator
from msprof_py.device.records import RecordBus, Subscriber
from msprof_py.device.spec import DeviceSpec


class SimulatedNpu:
    """A simulated Ascend-like NPU.

    ``engine`` schedules tasks in virtual time, ``hbm`` is the driver-level allocator
    (aclrtMalloc semantics) and ``memory`` the caching allocator frameworks use above it. Records
    of all three go to one :class:`RecordBus`; :meth:`subscribe` attaches a consumer. ``l2``
    follows which buffers are in L2 when the spec enables ``memory.l2_reuse`` (else None).
    """

    def __init__(self, spec: DeviceSpec | str | Path | None = None, device_id: int = 0) -> None:
        self.spec = DeviceSpec.load(spec)
        self.device_id = device_id
        self.bus = RecordBus()
        self.engine = Engine(self.spec, self.bus)
        self.hbm = HbmAllocator(self.spec.memory.usable_bytes, self.spec.allocation)
        mem = self.spec.memory
        self.l2 = L2Residency(mem.l2_bytes) if mem.l2_reuse and mem.l2_bytes else None
        self.memory = CachingAllocator(
            self.hbm, self.spec.allocation, clock=self.engine.host_clock(), bus=self.bus
        )

    def replace_engine(self, engine: Engine) -> None:
        """Schedule on ``engine`` from now on (an engine on another scheduling core, for
        tests); the allocator's memory records take their time from its host clock."""
        self.engine = engine
        self.memory._clock = engine.host_clock()

    def subscribe(self, callback: Subscriber) -> None:
        """Deliver every future task, host and memory record to ``callback``."""
        self.bus.subscribe(callback)

    def unsubscribe(self, callback: Subscriber) -> None:
        """Stop delivering records to ``callback``."""
        self.bus.unsubscribe(callback)

    @property
    def name(self) -> str:
        """The preset or spec name, e.g. ``"ascend910b"``."""
        return self.spec.name

    def __repr__(self) -> str:
        return f"SimulatedNpu({self.spec.name!r}, device_id={self.device_id})"
