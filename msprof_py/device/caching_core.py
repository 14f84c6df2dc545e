"""The caching allocator's core in Python: blocks, segments, free pools and statistics.

:class:`~msprof_py.device.caching.CachingAllocator` subclasses a core and adds what does not
depend on how blocks are kept (driver calls, records, statistics views). This is the reference
core; ``device/native/allocator_core.c`` is the same state and arithmetic compiled, used when it
is built (:mod:`msprof_py.device.native`). A property test runs random malloc/free/empty_cache
programs on both and compares every answer, record and statistic.

A core calls back into its allocator for three things: ``_segment_address(segment_size, size,
stream_id, tag)`` for a new segment from the driver (it retries after emptying the cache and
raises the out-of-memory error), ``_release_segment(address)`` to give a segment back, and
``_emit(bus, action, address, size, stream_id, tag)`` for a memory record while the bus has
subscribers (``_emit_event`` checks that first).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from msprof_py.device.errors import DeviceError
from msprof_py.device.records import MemoryAction


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


class Handle:
    """Device memory held until this handle dies (then freed to the allocator): what
    :meth:`PythonAllocatorCore.hold` returns for one npu storage."""

    __slots__ = ("_memory", "address")

    def __init__(self, memory: PythonAllocatorCore, address: int) -> None:
        self._memory = memory
        self.address = address

    def __del__(self) -> None:
        # at interpreter shutdown the allocator may already be gone: nothing to return then
        # (try/except rather than contextlib.suppress: this runs once per freed npu storage)
        try:  # noqa: SIM105
            self._memory.free(self.address)
        except Exception:
            pass


class PythonAllocatorCore:
    """The caching allocator's state and arithmetic, in Python (see the module docstring)."""

    _bus: Any

    def _core_setup(
        self,
        round_bytes: int,
        small_max: int,
        small_segment: int,
        large_segment: int,
        large_threshold: int,
        huge_page: int,
        actions: tuple[MemoryAction, MemoryAction, MemoryAction, MemoryAction],
        device_error: type[Exception],
    ) -> None:
        """Configure the core (rounding, pool and segment sizes) and empty it."""
        self._round = round_bytes
        self._small_max = small_max
        self._segment_sizes = (small_segment, large_segment, large_threshold, huge_page)
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

    def _segment_address(self, segment_size: int, size: int, stream_id: int, tag: str) -> int:
        raise NotImplementedError  # the allocator's

    def _release_segment(self, address: int) -> None:
        raise NotImplementedError  # the allocator's

    def _emit_event(
        self, action: MemoryAction, address: int, size: int, stream_id: int, tag: str
    ) -> None:
        raise NotImplementedError  # the allocator's

    def _emit(
        self, bus: Any, action: MemoryAction, address: int, size: int, stream: int, tag: str
    ) -> None:
        raise NotImplementedError  # the allocator's

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

    def hold(self, size: int, stream_id: int = 0, tag: str = "") -> Handle | None:
        """:meth:`malloc`, returned as a handle that frees the block when it dies (None for
        size 0)."""
        block = self.malloc(size, stream_id=stream_id, tag=tag)
        return Handle(self, block.address) if block.size else None

    def empty_cache(self) -> None:
        """Give every entirely free segment back to the driver."""
        for seg in [s for s in self._segments.values() if not s.allocated_bytes]:
            assert seg.head is not None and seg.head.size == seg.size
            self._uncache(seg.head)
            self._release_segment(seg.address)
            del self._segments[seg.address]
            self._reserved -= seg.size
            self._num_device_free += 1
            self._emit_event(MemoryAction.SEGMENT_FREE, seg.address, seg.size, seg.stream_id, "")

    def _new_segment(self, rounded: int, small: bool, stream_id: int, size: int, tag: str) -> Block:
        """Reserve a segment from the driver (:meth:`_segment_address`)."""
        small_segment, large_segment, large_threshold, huge_page = self._segment_sizes
        if small:
            seg_size = small_segment
        elif rounded < large_threshold:
            seg_size = large_segment
        else:
            seg_size = -(-rounded // huge_page) * huge_page
        if seg_size < rounded:  # only with an odd custom spec
            seg_size = -(-rounded // huge_page) * huge_page
        address = self._segment_address(seg_size, size, stream_id, tag)
        seg = Segment(address, seg_size, stream_id, small)
        block = Block(address, seg_size, 0, stream_id, "", False, seg)
        seg.head = block
        self._segments[address] = seg
        self._reserved += seg_size
        self._num_device_alloc += 1
        if self._reserved > self._peak_reserved:
            self._peak_reserved = self._reserved
        self._emit_event(MemoryAction.SEGMENT_ALLOC, address, seg_size, stream_id, "")
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

    def block_size(self, address: int) -> int:
        """Size of the live block at ``address`` (0 when none is live there)."""
        block = self._live.get(address)
        return block.size if block is not None else 0

    def _live_list(self) -> list[Block]:
        """Every live block, by address."""
        return [self._live[address] for address in sorted(self._live)]

    def _segments_by_address(self) -> list[tuple]:
        """Segments by address: (address, size, allocated bytes, stream, small, blocks), each
        block (address, size, requested, allocated, tag) in address order."""
        out = []
        for address in sorted(self._segments):
            seg = self._segments[address]
            blocks = []
            block = seg.head
            while block is not None:
                blocks.append(
                    (block.address, block.size, block.requested, block.allocated, block.tag)
                )
                block = block.next
            out.append(
                (seg.address, seg.size, seg.allocated_bytes, seg.stream_id, seg.small, blocks)
            )
        return out

    def _largest_free(self) -> int:
        return max((pool[-1][0] for pool in self._pools.values() if pool), default=0)

    def _live_count(self) -> int:
        return len(self._live)

    def _segment_count(self) -> int:
        return len(self._segments)
