"""The caching allocator a framework puts on top of the driver (torch's, modelled for the NPU).

It reserves large segments from :class:`~msprof_py.device.memory.HbmAllocator`, splits them into
blocks, caches freed blocks per stream and gives whole free segments back on
:meth:`CachingAllocator.empty_cache` or when the driver runs out of memory. The blocks, pools
and statistics live in a core: :mod:`msprof_py.device.caching_core` in Python, or the same
compiled (``device/native/allocator_core.c``) when it is built.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from msprof_py.device import native
from msprof_py.device.caching_core import Block, PythonAllocatorCore
from msprof_py.device.errors import DeviceError
from msprof_py.device.memory import (
    HbmAllocator,
    MallocPolicy,
    NpuOutOfMemoryError,
    format_bytes,
)
from msprof_py.device.records import MemoryAction, MemoryRecord, RecordBus
from msprof_py.device.spec import AllocationSpec

_ACTIONS = (
    MemoryAction.MALLOC,
    MemoryAction.FREE,
    MemoryAction.SEGMENT_ALLOC,
    MemoryAction.SEGMENT_FREE,
)


@dataclass(frozen=True)
class MemoryStats:
    """Caching-allocator statistics (the torch.cuda.memory_stats figures, in bytes/counts)."""

    allocated_bytes: int
    requested_bytes: int
    reserved_bytes: int
    active_bytes: int
    inactive_split_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_active_bytes: int
    peak_requested_bytes: int
    num_allocs: int
    num_frees: int
    num_segments: int
    num_alloc_retries: int
    num_ooms: int
    largest_free_cached_block: int


def _zero_clock() -> int:
    return 0


class _AllocatorMethods:
    """A torch-style caching allocator over an :class:`HbmAllocator`.

    Requests round up to ``caching_round_bytes``. Small requests (<= ``small_request_max_bytes``)
    come from ``small_segment_bytes`` segments; larger ones from ``large_segment_bytes`` segments,
    or from a segment of their own (rounded up to ``huge_page_bytes``) from
    ``large_segment_threshold_bytes`` on. Free blocks are cached per pool and stream, picked best
    fit, split when the rest is big enough, and merged with free neighbours on :meth:`free`.
    With ``bus`` active, every event emits a :class:`MemoryRecord` stamped with ``clock()``.

    ``malloc(size, *, stream_id=0, tag="")`` returns the block (read it, do not change it, do
    not use it after freeing its address); ``size == 0`` gives a block at address 0 of size 0
    and reserves nothing (torch returns a null pointer); out of memory raises
    :class:`NpuOutOfMemoryError` after the cache was released. ``hold`` is ``malloc`` returned
    as a handle that frees the block when it dies; ``free(address)`` returns a block (address 0
    is a no-op, like nullptr).
    """

    def __init__(
        self,
        driver: HbmAllocator,
        alloc: AllocationSpec,
        *,
        clock: Callable[[], int] = _zero_clock,
        bus: RecordBus | None = None,
    ) -> None:
        self.driver = driver
        self._alloc = alloc
        self._clock = clock
        self._bus = bus
        self._core_setup(
            alloc.caching_round_bytes,
            alloc.small_request_max_bytes,
            alloc.small_segment_bytes,
            alloc.large_segment_bytes,
            alloc.large_segment_threshold_bytes,
            alloc.huge_page_bytes,
            _ACTIONS,
            DeviceError,
        )

    # ---- what the core calls back --------------------------------------------------------------

    def _segment_address(self, segment_size: int, size: int, stream_id: int, tag: str) -> int:
        """A segment from the driver (retrying once after emptying the cache)."""
        try:
            return self.driver.malloc(segment_size, MallocPolicy.HUGE_FIRST, align32=True)
        except NpuOutOfMemoryError:
            self.empty_cache()
            self._num_alloc_retries += 1
            try:
                return self.driver.malloc(segment_size, MallocPolicy.HUGE_FIRST, align32=True)
            except NpuOutOfMemoryError:
                self._num_ooms += 1
                bus = self._bus
                if bus is not None and bus.active:
                    self._emit(bus, MemoryAction.OOM, 0, size, stream_id, tag)
                raise self._oom_error(size, segment_size) from None

    def _release_segment(self, address: int) -> None:
        self.driver.free(address)

    def _emit_event(
        self, action: MemoryAction, address: int, size: int, stream_id: int, tag: str
    ) -> None:
        bus = self._bus
        if bus is not None and bus.active:
            self._emit(bus, action, address, size, stream_id, tag)

    def _emit(
        self, bus: RecordBus, action: MemoryAction, address: int, size: int, stream: int, tag: str
    ) -> None:
        a = self._allocated
        bus.emit(
            MemoryRecord(self._clock(), action, address, size, a, self._reserved, a, stream, tag)
        )

    def _oom_error(self, size: int, segment_size: int) -> NpuOutOfMemoryError:
        detail = ""
        if segment_size != size:
            detail = f"It needed a new segment of {format_bytes(segment_size)}"
        largest = heapq.nlargest(3, self._live_list(), key=lambda b: (b.size, -b.address))
        free, total = self.driver.get_mem_info()
        return NpuOutOfMemoryError(
            requested=size,
            allocated=self._allocated,
            reserved=self._reserved,
            free=free,
            total=total,
            holders=tuple((b.size, b.tag) for b in largest),
            device=f"npu:{self.driver.device_id}",
            detail=detail,
        )

    # ---- statistics ------------------------------------------------------------------------------

    @property
    def allocated_bytes(self) -> int:
        """Bytes in live blocks (``torch.npu.memory_allocated``)."""
        return self._allocated

    @property
    def reserved_bytes(self) -> int:
        """Bytes in segments reserved from the driver (``torch.npu.memory_reserved``)."""
        return self._reserved

    def stats(self) -> MemoryStats:
        """A snapshot of the allocator's statistics."""
        largest = self._largest_free()
        return MemoryStats(
            allocated_bytes=self._allocated,
            requested_bytes=self._requested,
            reserved_bytes=self._reserved,
            active_bytes=self._allocated,
            inactive_split_bytes=self._inactive_split,
            peak_allocated_bytes=self._peak_allocated,
            peak_reserved_bytes=self._peak_reserved,
            peak_active_bytes=self._peak_allocated,
            peak_requested_bytes=self._peak_requested,
            num_allocs=self._num_allocs,
            num_frees=self._num_frees,
            num_segments=self._segment_count(),
            num_alloc_retries=self._num_alloc_retries,
            num_ooms=self._num_ooms,
            largest_free_cached_block=largest,
        )

    def reset_peak_stats(self) -> None:
        """Set every peak to its current value."""
        self._peak_allocated = self._allocated
        self._peak_reserved = self._reserved
        self._peak_requested = self._requested

    def memory_stats(self) -> dict[str, int]:
        """The statistics under ``torch.cuda.memory_stats`` key names."""
        return {
            "allocated_bytes.all.current": self._allocated,
            "allocated_bytes.all.peak": self._peak_allocated,
            "reserved_bytes.all.current": self._reserved,
            "reserved_bytes.all.peak": self._peak_reserved,
            "active_bytes.all.current": self._allocated,
            "active_bytes.all.peak": self._peak_allocated,
            "requested_bytes.all.current": self._requested,
            "requested_bytes.all.peak": self._peak_requested,
            "inactive_split_bytes.all.current": self._inactive_split,
            "num_alloc_retries": self._num_alloc_retries,
            "num_ooms": self._num_ooms,
            "num_device_alloc": self._num_device_alloc,
            "num_device_free": self._num_device_free,
            "allocation.all.current": self._live_count(),
            "segment.all.current": self._segment_count(),
        }

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` device bytes as the driver reports them."""
        return self.driver.get_mem_info()

    def snapshot(self) -> list[dict[str, Any]]:
        """Segments by address, each with its blocks in address order (``torch.cuda.snapshot``)."""
        return [
            {
                "address": address,
                "total_size": size,
                "allocated_size": allocated,
                "stream": stream,
                "segment_type": "small" if small else "large",
                "blocks": [
                    {
                        "address": b_address,
                        "size": b_size,
                        "requested_size": requested,
                        "allocated": b_allocated,
                        "tag": tag,
                    }
                    for b_address, b_size, requested, b_allocated, tag in blocks
                ],
            }
            for address, size, allocated, stream, small, blocks in self._segments_by_address()
        ]

    def live_blocks(self) -> Iterator[Block]:
        """Every live block, by address."""
        yield from self._live_list()


def _compiled_core() -> type | None:
    """The compiled allocator core (``device/native``) as a base class, or None."""
    module = native.load()
    if module is None:
        return None
    return type("CompiledAllocatorCore", (module.AllocatorCore,), {"__slots__": ()})


class PythonCachingAllocator(_AllocatorMethods, PythonAllocatorCore):
    """The caching allocator on the pure-Python core (the reference the compiled core is
    tested against)."""


class CachingAllocator(_AllocatorMethods, _compiled_core() or PythonAllocatorCore):  # type: ignore[misc]
    """A torch-style caching allocator over an :class:`HbmAllocator` (on the compiled core when
    it is built, else on the Python one: identical blocks, records and statistics)."""
