"""The simulated Ascend-like NPU: spec, virtual-time engine, cost model, memory, formats, HCCL.

This layer imports nothing else of msprof_py and never imports torch, so it can be used, tested
and benchmarked on its own. The names below are imported on first use (PEP 562): a process
that needs one light module (the launcher checks a device preset with ``spec``) does not load
the engine, the allocator and the simulator with it.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
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

#: where each package attribute comes from
_SOURCES = {
    "CachingAllocator": "msprof_py.device.caching",
    "CopyKind": "msprof_py.device.records",
    "DEFAULT_PRESET": "msprof_py.device.spec",
    "DeviceError": "msprof_py.device.errors",
    "DeviceSpec": "msprof_py.device.spec",
    "Engine": "msprof_py.device.engine",
    "Event": "msprof_py.device.engine",
    "EventNotReadyError": "msprof_py.device.errors",
    "GraphRecord": "msprof_py.device.records",
    "GraphTask": "msprof_py.device.engine",
    "HbmAllocator": "msprof_py.device.memory",
    "HostKind": "msprof_py.device.records",
    "HostRecord": "msprof_py.device.records",
    "MallocPolicy": "msprof_py.device.memory",
    "MemoryAction": "msprof_py.device.records",
    "MemoryRecord": "msprof_py.device.records",
    "NpuOutOfMemoryError": "msprof_py.device.memory",
    "PlannedKernel": "msprof_py.device.records",
    "PlannedPass": "msprof_py.device.records",
    "RecordBus": "msprof_py.device.records",
    "SimulatedNpu": "msprof_py.device.simulator",
    "SpecError": "msprof_py.device.spec",
    "Stream": "msprof_py.device.engine",
    "TaskKind": "msprof_py.device.records",
    "TaskLog": "msprof_py.device.tasklog",
    "TaskRecord": "msprof_py.device.records",
    "TaskType": "msprof_py.device.records",
    "preset_names": "msprof_py.device.spec",
}

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


def __getattr__(name: str) -> object:
    """A package attribute, imported from its module on first use (then a plain global)."""
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value
