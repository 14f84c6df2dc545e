"""The simulated Ascend-like NPU: spec, virtual-time engine, cost model, memory, formats, HCCL.

This layer imports nothing else of msprof_py and never imports torch, so it can be used, tested
and benchmarked on its own.
"""

from msprof_py.device.caching import CachingAllocator
from msprof_py.device.engine import Engine, Event, GraphTask, Stream
from msprof_py.device.errors import DeviceError, EventNotReadyError
from msprof_py.device.memory import (
    HbmAllocator,
    MallocPolicy,
    NpuOutOfMemoryError,
)
from msprof_py.device.records import (
    CopyKind,
    GraphRecord,
    HostKind,
    HostRecord,
    MemoryAction,
    MemoryRecord,
    PlannedKernel,
    PlannedPass,
    RecordBus,
    TaskKind,
    TaskRecord,
    TaskType,
)
from msprof_py.device.simulator import SimulatedNpu
from msprof_py.device.spec import DEFAULT_PRESET, DeviceSpec, SpecError, preset_names
from msprof_py.device.tasklog import TaskLog

__all__ = [
    "DEFAULT_PRESET",
    "CachingAllocator",
    "CopyKind",
    "DeviceError",
    "DeviceSpec",
    "Engine",
    "Event",
    "EventNotReadyError",
    "GraphRecord",
    "GraphTask",
    "HbmAllocator",
    "HostKind",
    "HostRecord",
    "MallocPolicy",
    "MemoryAction",
    "MemoryRecord",
    "NpuOutOfMemoryError",
    "PlannedKernel",
    "PlannedPass",
    "RecordBus",
    "SimulatedNpu",
    "SpecError",
    "Stream",
    "TaskKind",
    "TaskLog",
    "TaskRecord",
    "TaskType",
    "preset_names",
]
