"""Property tests: random malloc/free/empty_cache sequences keep the allocators consistent."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from msprof_py.device.caching import CachingAllocator
from msprof_py.device.memory import (
    HbmAllocator,
    MallocPolicy,
    NpuOutOfMemoryError,
)
from msprof_py.device.records import MemoryAction, MemoryRecord, RecordBus
from msprof_py.device.spec import DeviceSpec

ALLOC = DeviceSpec.load("ascend910b").allocation
MiB = 1024**2
CAPACITY = 64 * MiB
BASE = 0x1_0000_0000


def _size(mib: int, small: int, jitter: int) -> int:
    """mib 0..8: about that many MiB (the jitter makes it unaligned); 9..11: up to 2 MiB."""
    return small if mib > 8 else min(max(mib * MiB + jitter, 0), 8 * MiB)


# sampled_from draws evenly, unlike integers over a wide range (which favours small values)
sizes = st.builds(
    _size, st.sampled_from(range(12)), st.integers(0, 2 * MiB), st.integers(-1024, 1024)
)
_ops: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "malloc": st.tuples(st.just("malloc"), sizes, st.integers(0, 1)),
    "driver_malloc": st.tuples(
        st.just("malloc"),
        sizes.map(lambda n: max(n, 1)),
        st.sampled_from(MallocPolicy),
        st.booleans(),
    ),
    "free": st.tuples(st.just("free"), st.integers(0, 1000)),
    "empty_cache": st.just(("empty_cache",)),
}


def sequences(*kinds: str) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Lists of 5..60 operations drawn from ``kinds`` (repeat a kind to draw it more often)."""
    op = st.sampled_from(kinds).flatmap(_ops.__getitem__)
    return st.sampled_from(range(5, 61)).flatmap(lambda n: st.lists(op, min_size=n, max_size=n))


# more mallocs than frees, so that the 64 MiB device fills up and the OOM paths run
caching_ops = sequences("malloc", "malloc", "malloc", "free", "free", "empty_cache")
driver_ops = sequences("driver_malloc", "driver_malloc", "free")


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def check_driver(d: HbmAllocator) -> None:
    live = list(d.live())
    end = BASE
    for address, size in live:  # sorted by address
        assert address >= end, "driver reservations overlap"
        assert address % ALLOC.alignment_bytes == 0
        page = ALLOC.huge_page_bytes if d.page_kind(address) == "huge" else ALLOC.normal_page_bytes
        assert address % page == 0
        assert size % page == 0
        end = address + size
    assert end <= BASE + CAPACITY
    assert d.used == sum(size for _, size in live)
    free, total = d.get_mem_info()
    assert (free + d.used, total) == (CAPACITY, CAPACITY)
    assert 0 <= d.largest_free_block <= free


def run_driver(ops: list[tuple[Any, ...]]) -> list[int | None]:
    d = HbmAllocator(CAPACITY, ALLOC)
    live: list[tuple[int, int, bool]] = []
    trace: list[int | None] = []
    for op in ops:
        if op[0] == "malloc":
            _, size, policy, align32 = op
            try:
                address = d.malloc(size, policy, align32=align32)
            except NpuOutOfMemoryError as err:
                assert err.free == d.free_bytes
                trace.append(None)
            else:
                need = -(-size // 32) * 32 + (0 if align32 else 32)
                assert d.allocation_size(address) >= need
                kind = d.page_kind(address)
                if policy is MallocPolicy.HUGE_ONLY:
                    assert kind == "huge"
                elif policy is MallocPolicy.NORMAL_ONLY or size <= ALLOC.huge_threshold_bytes:
                    assert kind == "normal"
                live.append((address, size, align32))
                trace.append(address)
        elif live:
            address = live.pop(op[1] % len(live))[0]
            d.free(address)
        check_driver(d)
    for address, _, _ in live:
        d.free(address)
    assert d.used == 0
    assert d.largest_free_block == CAPACITY  # every free coalesced back
    return trace


@settings(max_examples=200, deadline=None)
@given(driver_ops)
def test_driver_sequences(ops: list[tuple[Any, ...]]) -> None:
    assert run_driver(ops) == run_driver(ops)


# --------------------------------------------------------------------------------------------
# Caching allocator
# --------------------------------------------------------------------------------------------


def check_caching(ca: CachingAllocator, expected_live: dict[int, int]) -> None:
    d = ca.driver
    check_driver(d)
    s = ca.stats()
    snap = ca.snapshot()
    live = list(ca.live_blocks())
    assert {b.address: b.requested for b in live} == expected_live

    segment_end = 0
    free_cached = inactive_split = largest_free = 0
    allocated_in_segments: dict[int, int] = {}
    for seg in snap:  # by address
        start, size = seg["address"], seg["total_size"]
        assert start >= segment_end, "segments overlap"
        assert d.allocation_size(start) == size
        segment_end = start + size
        cursor, prev_free, allocated = start, False, 0
        for block in seg["blocks"]:
            assert block["address"] == cursor, "blocks do not tile their segment"
            assert block["size"] > 0
            assert block["size"] % ALLOC.caching_round_bytes == 0
            cursor += block["size"]
            if block["allocated"]:
                allocated += block["size"]
                allocated_in_segments[block["address"]] = block["size"]
                prev_free = False
            else:
                assert not prev_free, "two adjacent free blocks were not merged"
                prev_free = True
                free_cached += block["size"]
                largest_free = max(largest_free, block["size"])
                if seg["allocated_size"]:
                    inactive_split += block["size"]
        assert cursor == segment_end
        assert seg["allocated_size"] == allocated

    # every live block lies inside its segment (they tile the segments), no two overlap
    assert allocated_in_segments == {b.address: b.size for b in live}
    for b in live:
        assert b.size >= b.requested > 0
        assert b.size % ALLOC.caching_round_bytes == 0

    assert s.allocated_bytes == s.active_bytes == sum(b.size for b in live)
    assert s.requested_bytes == sum(b.requested for b in live)
    assert s.reserved_bytes == sum(seg["total_size"] for seg in snap) == d.used
    assert s.reserved_bytes - s.allocated_bytes == free_cached
    assert s.inactive_split_bytes == inactive_split
    assert s.largest_free_cached_block == largest_free
    assert s.num_segments == len(snap)
    assert s.peak_allocated_bytes >= s.allocated_bytes
    assert s.peak_active_bytes >= s.active_bytes
    assert s.peak_reserved_bytes >= s.reserved_bytes
    assert s.peak_requested_bytes >= s.requested_bytes
    assert s.num_allocs - s.num_frees == len(live)
    free, total = ca.mem_get_info()
    assert free + d.used == total == CAPACITY
    ms = ca.memory_stats()
    assert ms["num_device_alloc"] - ms["num_device_free"] == len(snap)


def run_caching(
    ops: list[tuple[Any, ...]],
    *,
    subscribe: bool,
    allocator_type: type = CachingAllocator,
    seen: list[Any] | None = None,
) -> list[int | None]:
    """Run ``ops``, checking the allocator after each; the addresses malloc returned (None for
    out of memory). ``seen`` collects after each op what an observer can see (snapshot,
    statistics, the op's records, the error text)."""
    bus = RecordBus()
    records: list[MemoryRecord] = []
    if subscribe:
        bus.subscribe(records.append)  # type: ignore[arg-type]
    ca = allocator_type(HbmAllocator(CAPACITY, ALLOC), ALLOC, bus=bus)
    expected_live: dict[int, int] = {}
    order: list[int] = []
    trace: list[int | None] = []
    for op in ops:
        before = len(records)
        error = ""
        if op[0] == "malloc":
            _, size, stream = op
            try:
                block = ca.malloc(size, stream_id=stream, tag=f"t{len(trace)}")
            except NpuOutOfMemoryError as err:
                error = str(err)
                assert err.requested == size
                assert (err.allocated, err.reserved) == (ca.allocated_bytes, ca.reserved_bytes)
                assert ca.stats().num_ooms >= 1
                assert len(err.holders) <= 3
                trace.append(None)
                if subscribe:
                    assert records[-1].action is MemoryAction.OOM
            else:
                trace.append(block.address)
                if size:
                    assert block.address not in expected_live
                    expected_live[block.address] = size
                    order.append(block.address)
                    if subscribe:
                        assert records[-1].action is MemoryAction.MALLOC
                        assert records[-1].address == block.address
                else:
                    assert (block.address, block.size) == (0, 0)
        elif op[0] == "free":
            if order:
                address = order.pop(op[1] % len(order))
                del expected_live[address]
                ca.free(address)
        else:
            ca.empty_cache()
            assert all(seg["allocated_size"] for seg in ca.snapshot())
        check_caching(ca, expected_live)
        if seen is not None:
            seen.append((ca.snapshot(), ca.memory_stats(), ca.stats(), records[before:], error))
        if subscribe and len(records) > before:
            last = records[-1]
            assert (last.allocated, last.reserved, last.active) == (
                ca.allocated_bytes,
                ca.reserved_bytes,
                ca.allocated_bytes,
            )
    if not subscribe:
        assert records == []
    for address in order:
        ca.free(address)
    ca.empty_cache()
    assert ca.driver.used == 0
    assert ca.driver.largest_free_block == CAPACITY
    return trace


@settings(max_examples=200, deadline=None)
@given(caching_ops)
def test_caching_sequences(ops: list[tuple[Any, ...]]) -> None:
    # the same sequence gives the same addresses, with or without a subscriber
    assert run_caching(ops, subscribe=False) == run_caching(ops, subscribe=True)
