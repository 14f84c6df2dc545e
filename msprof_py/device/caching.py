"""The caching allocator a framework puts on top of the driver (torch's, modelled for the NPU).

It reserves large segments from :class:`~msprof_py.device.memory.HbmAllocator`, splits them into
blocks, caches freed blocks per stream and gives whole free segments back on
:meth:`CachingAllocator.empty_cache` or when the driver runs out of memory.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from msprof_py.device.errors import DeviceError
from msprof_py.device.memory import (
    HbmAllocator,
    MallocPolicy,
    NpuOutOfMemoryError,
    format_bytes,
    round_up,
)
from msprof_py.device.records import MemoryAction, MemoryRecord, RecordBus
from msprof_py.device.spec import AllocationSpec


@dataclass(slots=True, eq=False)
class Segment:
    """Memory the caching allocator reserved from the driver in one ``aclrtMalloc`` call."""

    address: int
    size: int
    stream_id: int
    small: bool
    #: bytes of the live blocks inside this segment.
    allocated_bytes: int = 0
    #: the block at the segment's start; the others follow through ``Block.next``.
    head: Block | None = field(default=None, repr=False)


@dataclass(slots=True, eq=False)
class Block:
    """A piece of a segment: what :meth:`CachingAllocator.malloc` returns.

    ``size`` is the block size (the request rounded up, possibly more when the rest of a block
    was too small to split off); ``requested`` the bytes asked for. The object belongs to the
    allocator: read it, do not change it, and do not use it after freeing its address.
    """

    address: int
    size: int
    requested: int
    stream_id: int
    tag: str = ""
    allocated: bool = True
    segment: Segment | None = field(default=None, repr=False)
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)


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


class CachingAllocator:
    """A torch-style caching allocator over an :class:`HbmAllocator`.

    Requests round up to ``caching_round_bytes``. Small requests (<= ``small_request_max_bytes``)
    come from ``small_segment_bytes`` segments; larger ones from ``large_segment_bytes`` segments,
    or from a segment of their own (rounded up to ``huge_page_bytes``) from
    ``large_segment_threshold_bytes`` on. Free blocks are cached per pool and stream, picked best
    fit, split when the rest is big enough, and merged with free neighbours on :meth:`free`.

    With ``bus`` active, every event emits a :class:`MemoryRecord` stamped with ``clock()``.
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
        self._round = alloc.caching_round_bytes
        self._small_max = alloc.small_request_max_bytes
        # (small pool?, stream) -> sorted (size, address) of free cached blocks.
        self._pools: dict[tuple[bool, int], list[tuple[int, int]]] = {}
        self._free_blocks: dict[int, Block] = {}
        self._live: dict[int, Block] = {}
        self._segments: dict[int, Segment] = {}
        self._allocated = 0
        self._requested = 0
        self._reserved = 0
        self._inactive_split = 0
        self._peak_allocated = 0
        self._peak_reserved = 0
        self._peak_requested = 0
        self._num_allocs = 0
        self._num_frees = 0
        self._num_device_alloc = 0
        self._num_device_free = 0
        self._num_alloc_retries = 0
        self._num_ooms = 0

    # ---- allocation ----------------------------------------------------------------------------

    def malloc(self, size: int, *, stream_id: int = 0, tag: str = "") -> Block:
        """Allocate ``size`` bytes for use on ``stream_id``; ``tag`` names the holder.

        ``size == 0`` returns a block at address 0 of size 0 and reserves nothing (torch returns
        a null pointer). Raises :class:`NpuOutOfMemoryError` when the driver cannot supply a
        segment even after the cache was released.
        """
        if size <= 0:
            if size == 0:
                return Block(0, 0, 0, stream_id, tag)
            raise DeviceError(f"caching allocator: size must be >= 0, got {size}")
        rnd = self._round
        rounded = -(-size // rnd) * rnd
        small = rounded <= self._small_max
        pool = self._pools.get((small, stream_id))
        block = None
        if pool:
            i = bisect.bisect_left(pool, (rounded, -1))
            if i < len(pool):
                block = self._free_blocks.pop(pool.pop(i)[1])
        if block is None:
            block = self._new_segment(rounded, small, stream_id, size, tag)
        seg = block.segment
        assert seg is not None
        rest_size = block.size - rounded
        if (rest_size >= rnd) if small else (rest_size > self._small_max):
            rest = Block(block.address + rounded, rest_size, 0, stream_id, "", False, seg, block)
            rest.next = block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = rounded
            self._cache(rest)
        block.allocated = True
        block.requested = size
        block.tag = tag
        self._live[block.address] = block

        if seg.allocated_bytes:
            self._inactive_split -= block.size
        else:
            self._inactive_split += seg.size - block.size
        seg.allocated_bytes += block.size
        self._allocated += block.size
        self._requested += size
        self._num_allocs += 1
        if self._allocated > self._peak_allocated:
            self._peak_allocated = self._allocated
        if self._requested > self._peak_requested:
            self._peak_requested = self._requested
        bus = self._bus
        if bus is not None and bus.active:
            self._emit(bus, MemoryAction.MALLOC, block.address, block.size, stream_id, tag)
        return block

    def free(self, address: int) -> None:
        """Return the block at ``address`` to the cache (``address`` 0 is a no-op, like nullptr)."""
        block = self._live.pop(address, None)
        if block is None:
            if address == 0:
                return
            raise DeviceError(
                f"caching allocator: 0x{address:x} is not a live block "
                "(never allocated by this allocator, or already freed)"
            )
        seg = block.segment
        assert seg is not None
        size, stream_id, tag = block.size, block.stream_id, block.tag
        seg.allocated_bytes -= size
        if seg.allocated_bytes:
            self._inactive_split += size
        else:
            self._inactive_split -= seg.size - size  # the segment is entirely free again
        self._allocated -= size
        self._requested -= block.requested
        self._num_frees += 1
        block.allocated = False
        block.requested = 0
        block.tag = ""

        prev = block.prev
        if prev is not None and not prev.allocated:
            self._uncache(prev)
            prev.size += block.size
            prev.next = block.next
            if block.next is not None:
                block.next.prev = prev
            block = prev
        nxt = block.next
        if nxt is not None and not nxt.allocated:
            self._uncache(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        self._cache(block)
        bus = self._bus
        if bus is not None and bus.active:
            self._emit(bus, MemoryAction.FREE, address, size, stream_id, tag)

    def empty_cache(self) -> None:
        """Give every entirely free segment back to the driver."""
        for seg in [s for s in self._segments.values() if not s.allocated_bytes]:
            assert seg.head is not None and seg.head.size == seg.size
            self._uncache(seg.head)
            self.driver.free(seg.address)
            del self._segments[seg.address]
            self._reserved -= seg.size
            self._num_device_free += 1
            bus = self._bus
            if bus is not None and bus.active:
                self._emit(bus, MemoryAction.SEGMENT_FREE, seg.address, seg.size, seg.stream_id, "")

    def _new_segment(self, rounded: int, small: bool, stream_id: int, size: int, tag: str) -> Block:
        """Reserve a segment from the driver (retrying once after emptying the cache)."""
        a = self._alloc
        if small:
            seg_size = a.small_segment_bytes
        elif rounded < a.large_segment_threshold_bytes:
            seg_size = a.large_segment_bytes
        else:
            seg_size = round_up(rounded, a.huge_page_bytes)
        if seg_size < rounded:  # only with an odd custom spec
            seg_size = round_up(rounded, a.huge_page_bytes)
        try:
            address = self.driver.malloc(seg_size, MallocPolicy.HUGE_FIRST, align32=True)
        except NpuOutOfMemoryError:
            self.empty_cache()
            self._num_alloc_retries += 1
            try:
                address = self.driver.malloc(seg_size, MallocPolicy.HUGE_FIRST, align32=True)
            except NpuOutOfMemoryError:
                self._num_ooms += 1
                bus = self._bus
                if bus is not None and bus.active:
                    self._emit(bus, MemoryAction.OOM, 0, size, stream_id, tag)
                raise self._oom_error(size, seg_size) from None
        seg = Segment(address, seg_size, stream_id, small)
        block = Block(address, seg_size, 0, stream_id, "", False, seg)
        seg.head = block
        self._segments[address] = seg
        self._reserved += seg_size
        self._num_device_alloc += 1
        if self._reserved > self._peak_reserved:
            self._peak_reserved = self._reserved
        bus = self._bus
        if bus is not None and bus.active:
            self._emit(bus, MemoryAction.SEGMENT_ALLOC, address, seg_size, stream_id, "")
        return block

    def _cache(self, block: Block) -> None:
        seg = block.segment
        assert seg is not None
        key = (seg.small, seg.stream_id)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = []
        bisect.insort(pool, (block.size, block.address))
        self._free_blocks[block.address] = block

    def _uncache(self, block: Block) -> None:
        seg = block.segment
        assert seg is not None
        pool = self._pools[(seg.small, seg.stream_id)]
        del pool[bisect.bisect_left(pool, (block.size, block.address))]
        del self._free_blocks[block.address]

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
        largest = heapq.nlargest(3, self._live.values(), key=lambda b: (b.size, -b.address))
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
        largest = max((pool[-1][0] for pool in self._pools.values() if pool), default=0)
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
            num_segments=len(self._segments),
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
            "allocation.all.current": len(self._live),
            "segment.all.current": len(self._segments),
        }

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` device bytes as the driver reports them."""
        return self.driver.get_mem_info()

    def snapshot(self) -> list[dict[str, Any]]:
        """Segments by address, each with its blocks in address order (``torch.cuda.snapshot``)."""
        out = []
        for address in sorted(self._segments):
            seg = self._segments[address]
            blocks = []
            block = seg.head
            while block is not None:
                blocks.append(
                    {
                        "address": block.address,
                        "size": block.size,
                        "requested_size": block.requested,
                        "allocated": block.allocated,
                        "tag": block.tag,
                    }
                )
                block = block.next
            out.append(
                {
                    "address": seg.address,
                    "total_size": seg.size,
                    "allocated_size": seg.allocated_bytes,
                    "stream": seg.stream_id,
                    "segment_type": "small" if seg.small else "large",
                    "blocks": blocks,
                }
            )
        return out

    def block_size(self, address: int) -> int:
        """Size of the live block at ``address`` (0 when none is live there)."""
        block = self._live.get(address)
        return block.size if block is not None else 0

    def live_blocks(self) -> Iterator[Block]:
        """Every live block, by address."""
        for address in sorted(self._live):
            yield self._live[address]
