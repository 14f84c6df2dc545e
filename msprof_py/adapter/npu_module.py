"""``torch.npu``: the device module of the simulated NPU (registered by ``install``).

Mirrors ``torch.cuda``/``torch_npu.npu`` for what training scripts use: devices, streams and
events, synchronisation, memory statistics from the simulated caching allocator, and seeds (the
npu random stream is the CPU generator's, so npu and CPU programs draw the same numbers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from msprof_py.adapter import runtime
from msprof_py.adapter.streams import (
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from msprof_py.device.memory import format_bytes

__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device_count",
    "empty_cache",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_peak_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]

_current_device = 0


# ---- devices -------------------------------------------------------------------------------


def is_available() -> bool:
    """True: the simulated device is always there once installed."""
    return runtime.STATE is not None


def is_initialized() -> bool:
    """True once the device is installed."""
    return runtime.STATE is not None


def init() -> None:
    """Nothing to do: ``msprof_py.adapter.install`` initialises the device."""


def _lazy_init() -> None:
    """Called by torch before using a device; nothing to do."""


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """Visible devices: one, or the local world size under a distributed launcher.

    Every rank's tensors live on its own simulated device, addressed as ``npu:0`` in-process.
    """
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def current_device() -> int:
    """The index set by :func:`set_device` (the local rank under torchrun)."""
    return _current_device


def set_device(device: int | str | torch.device) -> None:
    """Select the device index (tensors always live on this process's simulated device)."""
    global _current_device
    index = torch.device(device).index if not isinstance(device, int) else device
    index = 0 if index is None else index
    # under mp.spawn, set_device(rank) may come before init_process_group tells the world
    # size: accept any index of one server's NPUs
    limit = max(device_count(), runtime.state().npu.spec.hccl.ranks_per_server)
    if not 0 <= index < limit:
        raise RuntimeError(f"invalid npu device index {index}: {limit} device(s) visible")
    _current_device = index


def synchronize(device: Any = None) -> None:
    """Block the host until all work on the device has finished."""
    state = runtime.state()
    state.enter()
    try:
        state.npu.engine.synchronize_device()
    finally:
        state.leave()


def get_device_name(device: Any = None) -> str:
    """E.g. ``"Ascend910B2 (simulated)"``."""
    return f"{runtime.state().npu.spec.soc_version} (simulated)"


@dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.npu.get_device_properties`` reports."""

    name: str
    total_memory: int
    cube_core_num: int
    vector_core_num: int
    aicpu_num: int
    preset: str

    @property
    def multi_processor_count(self) -> int:
        return self.cube_core_num


def get_device_properties(device: Any = None) -> DeviceProperties:
    """Name, memory and core counts of the simulated device."""
    spec = runtime.state().npu.spec
    return DeviceProperties(
        name=spec.soc_version,
        total_memory=spec.memory.usable_bytes,
        cube_core_num=spec.cube.cores,
        vector_core_num=spec.vector.cores,
        aicpu_num=spec.aicpu.cores,
        preset=spec.name,
    )


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Low-precision dtypes autocast may use on npu."""
    return [torch.float16, torch.bfloat16]


# ---- seeds ---------------------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    """Seed the npu generator (the CPU default generator, shared with CPU code)."""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Same as :func:`manual_seed` (one device per process). Never calls torch.manual_seed."""
    torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the generator from a non-deterministic source."""
    torch.default_generator.seed()


def seed_all() -> None:
    """Same as :func:`seed`."""
    torch.default_generator.seed()


def initial_seed() -> int:
    """The seed the generator started from."""
    return torch.default_generator.initial_seed()


def get_rng_state(device: Any = None) -> torch.Tensor:
    """The generator state (a CPU byte tensor)."""
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    """Restore a generator state from :func:`get_rng_state`."""
    torch.default_generator.set_state(new_state)


# ---- memory --------------------------------------------------------------------------------


def _memory() -> Any:
    return runtime.state().npu.memory


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live npu tensors (caching-allocator blocks)."""
    return _memory().stats().allocated_bytes


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since the start or the last reset."""
    return _memory().stats().peak_allocated_bytes


def memory_reserved(device: Any = None) -> int:
    """Bytes the caching allocator holds from the device (allocated plus cached)."""
    return _memory().stats().reserved_bytes


def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved`."""
    return _memory().stats().peak_reserved_bytes


def memory_stats(device: Any = None) -> dict[str, int]:
    """torch.cuda.memory_stats-style counters of the simulated caching allocator."""
    return _memory().memory_stats()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` device bytes, like ``aclrtGetMemInfo``."""
    return _memory().mem_get_info()


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset the peaks to the current values."""
    _memory().reset_peak_stats()


def reset_max_memory_allocated(device: Any = None) -> None:
    """Same as :func:`reset_peak_memory_stats`."""
    _memory().reset_peak_stats()


def empty_cache() -> None:
    """Give cached, unused segments back to the device."""
    _memory().empty_cache()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A readable table of the allocator's statistics."""
    s = _memory().stats()
    free, total = _memory().mem_get_info()
    rows = [
        ("Allocated memory", s.allocated_bytes, s.peak_allocated_bytes),
        ("Active memory", s.active_bytes, s.peak_active_bytes),
        ("Requested memory", s.requested_bytes, s.peak_requested_bytes),
        ("Reserved memory", s.reserved_bytes, s.peak_reserved_bytes),
        ("Non-releasable memory", s.inactive_split_bytes, s.inactive_split_bytes),
    ]
    lines = [
        "=" * 64,
        f" simulated NPU memory summary ({runtime.state().npu.spec.name}, npu:0)",
        "-" * 64,
        f" {'Metric':<26}{'Cur Usage':>18}{'Peak Usage':>18}",
        "-" * 64,
    ]
    lines += [
        f" {name:<26}{format_bytes(cur):>18}{format_bytes(peak):>18}" for name, cur, peak in rows
    ]
    lines += [
        "-" * 64,
        f" Allocations: {s.num_allocs}   Frees: {s.num_frees}   Segments: {s.num_segments}",
        f" Alloc retries: {s.num_alloc_retries}   OOMs: {s.num_ooms}",
        f" Device free / total: {format_bytes(free)} / {format_bytes(total)}",
        "=" * 64,
    ]
    return "\n".join(lines)
