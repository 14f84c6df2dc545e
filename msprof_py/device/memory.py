"""Device memory at the driver level: ``aclrtMalloc`` over the HBM, and the OOM error.

:class:`HbmAllocator` models ``aclrtMalloc``/``aclrtFree`` over one device address space: size
rounding, the huge/normal page policies and first-fit placement with coalescing on free (S9).
The caching allocator frameworks put on top lives in :mod:`msprof_py.device.caching`. Both raise
:class:`NpuOutOfMemoryError` when a request cannot be placed.
"""

from __future__ import annotations

import bisect
import enum
import heapq
from collections.abc import Iterator
from typing import Any, Literal

from msprof_py.device.errors import DeviceError
from msprof_py.device.spec import AllocationSpec

PageKind = Literal["huge", "normal"]


def format_bytes(n: int) -> str:
    """Human-readable size: ``"512 B"``, ``"1.50 KiB"``, ``"3.00 MiB"``, ``"2.00 GiB"``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``."""
    return -(-n // multiple) * multiple


class MallocPolicy(enum.IntEnum):
    """aclrtMalloc page policies; values are the ACL constants (``ACL_MEM_MALLOC_HUGE_FIRST`` ...).

    The spec's ``allocation.default_policy`` string converts with ``MallocPolicy[name]``.
    """

    HUGE_FIRST = 0
    HUGE_ONLY = 1
    NORMAL_ONLY = 2


class NpuOutOfMemoryError(DeviceError, MemoryError):
    """A device allocation could not be placed (like ``torch.OutOfMemoryError``).

    Attributes: ``requested`` (bytes asked for), ``allocated`` and ``reserved`` (bytes in use and
    reserved at the time; both the driver's used bytes for a driver-level OOM), ``free`` and
    ``total`` (the device's free and usable bytes), ``holders`` (up to three ``(size, tag)`` pairs
    of the largest live allocations) and ``device`` (e.g. ``"npu:0"``).
    """

    def __init__(
        self,
        requested: int,
        allocated: int,
        reserved: int,
        free: int,
        total: int,
        holders: tuple[tuple[int, str], ...] = (),
        device: str = "npu:0",
        reserved_by: str = "the caching allocator",
        detail: str = "",
    ) -> None:
        self.requested = requested
        self.allocated = allocated
        self.reserved = reserved
        self.free = free
        self.total = total
        self.holders = tuple(holders)
        self.device = device
        self.reserved_by = reserved_by
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        fb = format_bytes
        text = (
            f"NPU out of memory. Tried to allocate {fb(self.requested)} ({self.device}; "
            f"{fb(self.total)} total capacity; {fb(self.allocated)} already allocated; "
            f"{fb(self.free)} free; {fb(self.reserved)} reserved in total by {self.reserved_by})."
        )
        if self.detail:
            text += f" {self.detail}."
        if self.holders:
            names = (
                f"{fb(size)} '{tag}'" if tag else f"{fb(size)} (untagged)"
                for size, tag in self.holders
            )
            text += f" Largest holders: {', '.join(names)}."
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.requested, self.allocated, self.reserved, self.free, self.total)
        return (type(self), (*args, self.holders, self.device, self.reserved_by, self.detail))


# --------------------------------------------------------------------------------------------
# Driver level: aclrtMalloc
# --------------------------------------------------------------------------------------------


class HbmAllocator:
    """aclrtMalloc semantics over one device address space of ``capacity`` bytes.

    Sizes round up to ``size_round_bytes`` plus ``size_extra_bytes`` (omitted by
    ``aclrtMallocAlign32``), then to whole pages. Huge-page reservations start 2 MiB-aligned
    (``huge_page_bytes``), normal ones page-aligned; every address is ``alignment_bytes``-aligned.
    Placement is first fit over a sorted list of free ranges; :meth:`free` coalesces neighbours.
    """

    def __init__(
        self,
        capacity: int,
        alloc: AllocationSpec,
        base_address: int = 0x1_0000_0000,
        *,
        device_id: int = 0,
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"device capacity must be positive, got {capacity}")
        self.device_id = device_id
        self._alloc = alloc
        self._capacity = capacity
        self.base_address = base_address
        self._default_policy = MallocPolicy[alloc.default_policy]
        self._page = {
            "normal": (
                alloc.normal_page_bytes,
                max(alloc.normal_page_bytes, alloc.alignment_bytes),
            ),
            "huge": (alloc.huge_page_bytes, max(alloc.huge_page_bytes, alloc.alignment_bytes)),
        }
        # Free ranges: sorted start addresses, and start -> end (exclusive).
        self._starts: list[int] = [base_address]
        self._ends: dict[int, int] = {base_address: base_address + capacity}
        # Live reservations: address -> (reserved size, page kind).
        self._live: dict[int, tuple[int, PageKind]] = {}
        self._used = 0

    # ---- allocation ----------------------------------------------------------------------------

    def malloc(
        self, size: int, policy: MallocPolicy | None = None, *, align32: bool = False
    ) -> int:
        """Reserve device memory for ``size`` bytes and return its address (``aclrtMalloc``).

        ``policy`` defaults to the spec's ``default_policy``. With ``HUGE_FIRST`` only requests
        above ``huge_threshold_bytes`` try huge pages (falling back to normal pages when no huge
        range is free). ``align32=True`` is ``aclrtMallocAlign32`` (no extra 32 bytes).
        Raises :class:`DeviceError` for ``size <= 0`` and :class:`NpuOutOfMemoryError` when no
        free range fits.
        """
        if size <= 0:
            raise DeviceError(f"aclrtMalloc: size must be positive, got {size}")
        a = self._alloc
        policy = self._default_policy if policy is None else MallocPolicy(policy)
        need = round_up(size, a.size_round_bytes) + (0 if align32 else a.size_extra_bytes)
        kinds: tuple[PageKind, ...]
        if policy is MallocPolicy.HUGE_ONLY:
            kinds = ("huge",)
        elif policy is MallocPolicy.NORMAL_ONLY or size <= a.huge_threshold_bytes:
            kinds = ("normal",)
        else:
            kinds = ("huge", "normal")
        for kind in kinds:
            page, align = self._page[kind]
            reserve = round_up(need, page)
            address = self._take(reserve, align)
            if address is not None:
                self._live[address] = (reserve, kind)
                self._used += reserve
                return address
        raise self._oom(size, need, policy, kinds)

    def free(self, address: int) -> None:
        """Release a reservation made by :meth:`malloc` (``aclrtFree``)."""
        entry = self._live.pop(address, None)
        if entry is None:
            raise DeviceError(
                f"aclrtFree: 0x{address:x} is not a live device allocation "
                "(never allocated by this device, or already freed)"
            )
        start, end = address, address + entry[0]
        self._used -= entry[0]
        starts, ends = self._starts, self._ends
        i = bisect.bisect_left(starts, start)
        if i < len(starts) and starts[i] == end:  # merge with the following free range
            end = ends.pop(end)
            del starts[i]
        if i > 0 and ends[starts[i - 1]] == start:  # merge with the preceding free range
            ends[starts[i - 1]] = end
        else:
            starts.insert(i, start)
            ends[start] = end

    def _take(self, size: int, align: int) -> int | None:
        """First fit: carve ``size`` bytes at an ``align``-aligned address out of a free range."""
        starts, ends = self._starts, self._ends
        for i, start in enumerate(starts):
            end = ends[start]
            address = round_up(start, align)
            if address + size <= end:
                del ends[start]
                pieces = []
                if address > start:
                    pieces.append(start)
                    ends[start] = address
                if address + size < end:
                    pieces.append(address + size)
                    ends[address + size] = end
                starts[i : i + 1] = pieces
                return address
        return None

    def _oom(
        self, size: int, need: int, policy: MallocPolicy, kinds: tuple[PageKind, ...]
    ) -> NpuOutOfMemoryError:
        wanted = " or ".join(
            f"{format_bytes(round_up(need, self._page[k][0]))} of {k} pages" for k in kinds
        )
        detail = (
            f"aclrtMalloc policy {policy.name} found no free range for {wanted}; "
            f"largest free block is {format_bytes(self.largest_free_block)}"
        )
        largest = heapq.nlargest(3, self._live.items(), key=lambda kv: (kv[1][0], -kv[0]))
        return NpuOutOfMemoryError(
            requested=size,
            allocated=self._used,
            reserved=self._used,
            free=self.free_bytes,
            total=self._capacity,
            holders=tuple((res[0], f"aclrtMalloc@0x{addr:x}") for addr, res in largest),
            device=f"npu:{self.device_id}",
            reserved_by="aclrtMalloc",
            detail=detail,
        )

    # ---- queries -------------------------------------------------------------------------------

    @property
    def total(self) -> int:
        """Usable device bytes (the capacity this allocator manages)."""
        return self._capacity

    @property
    def used(self) -> int:
        """Bytes reserved by live allocations, including page rounding."""
        return self._used

    @property
    def free_bytes(self) -> int:
        """Bytes not reserved (possibly fragmented; see :attr:`largest_free_block`)."""
        return self._capacity - self._used

    @property
    def largest_free_block(self) -> int:
        """Size of the largest contiguous free range."""
        return max((self._ends[s] - s for s in self._starts), default=0)

    def get_mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes, like ``aclrtGetMemInfo(ACL_HBM_MEM)``."""
        return self._capacity - self._used, self._capacity

    def allocation_size(self, address: int) -> int:
        """Bytes reserved for the live allocation at ``address`` (after all rounding)."""
        return self._entry(address)[0]

    def page_kind(self, address: int) -> PageKind:
        """``"huge"`` or ``"normal"``: the pages backing the live allocation at ``address``."""
        return self._entry(address)[1]

    def live(self) -> Iterator[tuple[int, int]]:
        """``(address, reserved_size)`` of every live allocation, by address."""
        for address in sorted(self._live):
            yield address, self._live[address][0]

    def _entry(self, address: int) -> tuple[int, PageKind]:
        try:
            return self._live[address]
        except KeyError:
            raise DeviceError(f"0x{address:x} is not a live device allocation") from None
