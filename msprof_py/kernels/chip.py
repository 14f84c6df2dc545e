"""`Chip`: what a kernel sees of one simulated NPU - cores, per-core buffers, alignment, events.

Built from a device preset (:class:`msprof_py.device.spec.DeviceSpec`): core counts, buffer
sizes, clock and cube fractals come from the preset (each with its source there). What a preset
does not hold - alignment, event ids, whether a block is one AI Core or a cube core plus its
vector cores - is kept here per SoC, with its source.

Sources named in words:
- Alignment (UB and L1 32 B; L0A and L0B 512 B; L0C 64 B) and the position -> buffer map: the
  Ascend C API reference (TPosition / memory alignment pages) [V] for A2 (910B). 910A and 310P
  use the same figures [U] (no separate source read).
- Event ids per hardware event: 0-7 on A2, 0-3 on 910A: the Ascend C SetFlag/WaitFlag
  reference [V]; 310P: 0-3 [U] (assumed like 910A, the other coupled chip).
- 910B: 2 vector cores per cube core in mix kernels (CANN platform config, vector_core_cnt=48
  against ai_core_cnt=24) [V].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from msprof_py.device.spec import DeviceSpec


class Buffer(str, Enum):
    """A memory a tensor lives in: global memory or one of a core's on-chip buffers."""

    GM = "GM"
    L1 = "L1"
    L0A = "L0A"
    L0B = "L0B"
    L0C = "L0C"
    UB = "UB"


#: byte alignment of tensor addresses and transfer lengths per buffer (see module docstring)
ALIGNMENT: Mapping[Buffer, int] = {
    Buffer.GM: 1,
    Buffer.UB: 32,
    Buffer.L1: 32,
    Buffer.L0A: 512,
    Buffer.L0B: 512,
    Buffer.L0C: 64,
}

#: event ids per hardware event (SetFlag/WaitFlag), by preset name; a preset missing here gets 4
EVENT_IDS: Mapping[str, int] = {"ascend910b": 8, "ascend910a": 4, "ascend310p": 4}


@dataclass(frozen=True)
class Chip:
    """The kernel-level view of one NPU. Build with :meth:`load`.

    ``capacity`` holds each on-chip buffer's bytes per core (GM is unbounded here: the HBM
    allocator lives in :mod:`msprof_py.device.memory`). In split mode (910B) a block that uses
    the cube runs on a cube core together with its vector cores (a "mix" block, one core in this
    model); a vector-only kernel's blocks run on the vector cores.
    """

    name: str
    soc_version: str
    clock_hz: float
    cube_cores: int
    vector_cores: int
    split: bool
    capacity: Mapping[Buffer, int]
    alignment: Mapping[Buffer, int]
    event_ids: int
    fractal: Mapping[str, tuple[int, int, int]]
    #: bytes one vector repeat processes (256 B: 128 fp16 / 64 fp32 lanes)
    repeat_bytes: int
    spec: DeviceSpec = field(compare=False, repr=False)

    @classmethod
    def load(cls, spec: str | DeviceSpec | Chip | None = None) -> Chip:
        """A chip from a preset name (default ``ascend910b``), a spec file, a spec or a chip."""
        if isinstance(spec, Chip):
            return spec
        dev = DeviceSpec.load(spec)
        buffers = dev.buffers
        return cls(
            name=dev.name,
            soc_version=dev.soc_version,
            clock_hz=dev.cube.clock_hz,
            cube_cores=dev.cube.cores,
            vector_cores=dev.vector.cores,
            split=not dev.shares_core_pool,
            capacity={
                Buffer.UB: buffers.ub_bytes,
                Buffer.L1: buffers.l1_bytes,
                Buffer.L0A: buffers.l0a_bytes,
                Buffer.L0B: buffers.l0b_bytes,
                Buffer.L0C: buffers.l0c_bytes,
            },
            alignment=dict(ALIGNMENT),
            event_ids=EVENT_IDS.get(dev.name, 4),
            fractal=dict(dev.cube.fractal),
            repeat_bytes=dev.vector.bytes_per_cycle,
            spec=dev,
        )

    def cores_for(self, uses_cube: bool) -> int:
        """Physical cores a launch spreads its blocks over: cube cores when a block uses the
        cube (or on a coupled chip, where every AI Core has both units), else vector cores."""
        return self.cube_cores if uses_cube or not self.split else self.vector_cores

    def cycles_to_ns(self, cycles: float) -> float:
        """Nanoseconds of ``cycles`` at the core clock."""
        return cycles * 1e9 / self.clock_hz
