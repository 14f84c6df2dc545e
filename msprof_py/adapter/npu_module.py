"""``torch.npu``: the device module of the simulated NPU (registered by ``install``).

Mirrors ``torch.cuda``/``torch_npu.npu`` for what training scripts use: devices, streams and
events, synchronisation, memory statistics from the simulated caching allocator, and seeds (the
npu random stream is the CPU generator's, so npu and CPU programs draw the same numbers).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from msprof_py.adapter import npu_random as random
from msprof_py.adapter import runtime
from msprof_py.adapter.npu_config import config
from msprof_py.adapter.npu_random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
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
    "config",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "init",
    "initial_seed",
    "ipc_collect",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "random",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "synchronize",
]

#: the npu generators: the CPU default generator (see :mod:`msprof_py.adapter.npu_random`)
default_generators: tuple[torch.Generator, ...] = (torch.default_generator,)

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
    """Dtypes autocast may use on npu (bfloat16 only where the cube runs it, as torch_npu)."""
    if is_bf16_supported():
        return [torch.float16, torch.bfloat16, torch.float32]
    return [torch.float16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True where the device's cube multiplies bfloat16 (A2-class presets; not 910A or 310P)."""
    return "bfloat16" in runtime.state().npu.spec.cube.fractal


_CAPABILITY = re.compile(r"^(\d+)\.(\d+)$")


def get_device_capability(device: Any = None) -> tuple[int, int] | None:
    """None, as torch_npu answers: an NPU has no CUDA compute capability.

    Like torch_npu, the environment variable ``TORCH_NPU_DEVICE_CAPABILITY="major.minor"``
    sets the answer for libraries that insist on one.
    """
    configured = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY", "")
    match = _CAPABILITY.match(configured)
    if match is None:
        if configured:
            warnings.warn(
                f"TORCH_NPU_DEVICE_CAPABILITY={configured!r} is not 'major.minor'; ignored",
                stacklevel=2,
            )
        return None
    return int(match.group(1)), int(match.group(2))


def is_current_stream_capturing() -> bool:
    """False: the simulated device has no graph capture (NPUGraph)."""
    return False


class device:
    """Context manager that selects a device index for its block, as ``torch.cuda.device``."""

    def __init__(self, device: Any) -> None:
        if isinstance(device, (str, torch.device)):
            device = torch.device(device).index
        self.idx = -1 if device is None else int(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = current_device()
        if self.idx >= 0:
            set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0:
            set_device(self.prev_idx)


def device_of(obj: Any) -> device:
    """:class:`device` of an npu tensor (a no-op context for anything else)."""
    if isinstance(obj, torch.Tensor) and obj.device.type == "npu":
        return device(obj.device)
    return device(-1)


_sync_debug_mode = 0


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Accepted for compatibility (0/"default", 1/"warn", 2/"error"); syncs are on the timeline."""
    global _sync_debug_mode
    names = {"default": 0, "warn": 1, "error": 2}
    _sync_debug_mode = names[debug_mode] if isinstance(debug_mode, str) else int(debug_mode)


def get_sync_debug_mode() -> int:
    """The value set by :func:`set_sync_debug_mode`."""
    return _sync_debug_mode


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


def memory_cached(device: Any = None) -> int:
    """Deprecated torch name of :func:`memory_reserved`."""
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated torch name of :func:`max_memory_reserved`."""
    return max_memory_reserved(device)


def reset_max_memory_cached(device: Any = None) -> None:
    """Same as :func:`reset_peak_memory_stats`."""
    _memory().reset_peak_stats()


def memory_snapshot() -> list[dict[str, Any]]:
    """The caching allocator's segments and blocks (``torch.cuda.memory_snapshot`` shape)."""
    return _memory().snapshot()


_memory_fraction = 1.0


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Accepted for compatibility (0 < fraction <= 1); the simulated HBM size does not change."""
    global _memory_fraction
    if not 0.0 < float(fraction) <= 1.0:
        raise ValueError(f"invalid memory fraction {fraction}: must be in (0, 1]")
    _memory_fraction = float(fraction)


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The value set by :func:`set_per_process_memory_fraction` (1.0 by default)."""
    return _memory_fraction


def ipc_collect() -> None:
    """Nothing to collect: the simulated device shares no memory between processes."""


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
