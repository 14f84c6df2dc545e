"""Unit tests for the driver-level HBM allocator and the caching allocator (hand-computed)."""

from __future__ import annotations

import pickle

import pytest

from msprof_py.device.caching import CachingAllocator
from msprof_py.device.errors import DeviceError
from msprof_py.device.memory import (
    HbmAllocator,
    MallocPolicy,
    NpuOutOfMemoryError,
    format_bytes,
)
from msprof_py.device.records import MemoryAction, MemoryRecord, RecordBus
from msprof_py.device.spec import DeviceSpec

SPEC = DeviceSpec.load("ascend910b")
ALLOC = SPEC.allocation
KiB = 1024
MiB = 1024**2
GiB = 1024**3
BASE = 0x1_0000_0000


def device(capacity: int | None = None) -> HbmAllocator:
    return HbmAllocator(SPEC.memory.usable_bytes if capacity is None else capacity, ALLOC)


def caching(capacity: int = 64 * MiB, **kwargs: object) -> CachingAllocator:
    return CachingAllocator(device(capacity), ALLOC, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# helpers and policy
# --------------------------------------------------------------------------------------------


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * MiB) == "3.00 MiB"
    assert format_bytes(2 * GiB + GiB // 10) == "2.10 GiB"


def test_policy_values_match_acl_constants() -> None:
    assert (MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_ONLY, MallocPolicy.NORMAL_ONLY) == (0, 1, 2)
    assert MallocPolicy[ALLOC.default_policy] is MallocPolicy.HUGE_FIRST


# --------------------------------------------------------------------------------------------
# HbmAllocator (aclrtMalloc)
# --------------------------------------------------------------------------------------------


def test_small_malloc_rounds_to_a_normal_page() -> None:
    d = device()
    # round_up(100, 32) + 32 = 160 bytes -> one 4 KiB normal page
    a = d.malloc(100)
    assert a == BASE
    assert d.allocation_size(a) == 4096
    assert d.page_kind(a) == "normal"
    assert d.used == 4096
    assert d.total == SPEC.memory.usable_bytes
    assert d.get_mem_info() == (d.total - 4096, d.total)
    assert d.free_bytes == d.total - 4096
    assert list(d.live()) == [(BASE, 4096)]


def test_size_rounding_and_align32_boundaries() -> None:
    d = device()
    a = d.malloc(4064)  # 4064 + 32 = 4096: one page
    b = d.malloc(4065)  # 4096 + 32 = 4128: two pages
    c = d.malloc(4065, align32=True)  # 4096: one page
    assert [d.allocation_size(x) for x in (a, b, c)] == [4096, 8192, 4096]
    assert (a, b, c) == (BASE, BASE + 4096, BASE + 3 * 4096)


def test_huge_first_threshold() -> None:
    d = device()
    at_threshold = d.malloc(1 * MiB)  # not above 1 MiB: normal pages, 1 MiB + 32 -> 1 MiB + 4 KiB
    assert d.page_kind(at_threshold) == "normal"
    assert d.allocation_size(at_threshold) == 1 * MiB + 4096
    above = d.malloc(1 * MiB + 1)  # above 1 MiB: huge pages, 1 MiB + 64 -> 2 MiB
    assert d.page_kind(above) == "huge"
    assert d.allocation_size(above) == 2 * MiB
    assert above == BASE + 2 * MiB  # the first 2 MiB-aligned address after the normal block
    exact = d.malloc(2 * MiB - 32)  # 2 MiB - 32 + 32 = exactly one huge page
    assert d.allocation_size(exact) == 2 * MiB
    over = d.malloc(2 * MiB - 31)  # rounds to 2 MiB, + 32 -> two huge pages
    assert d.allocation_size(over) == 4 * MiB
    aligned32 = d.malloc(2 * MiB, align32=True)  # no extra 32 B: one huge page
    assert d.allocation_size(aligned32) == 2 * MiB


def test_huge_first_3mib_takes_4mib_of_huge_pages_2mib_aligned() -> None:
    d = device()
    small = d.malloc(100)
    big = d.malloc(3 * MiB)  # 3 MiB + 32 -> 4 MiB of huge pages
    assert big == BASE + 2 * MiB
    assert big % (2 * MiB) == 0
    assert d.allocation_size(big) == 4 * MiB
    assert d.page_kind(big) == "huge"
    assert d.used == 4096 + 4 * MiB
    # first fit: the gap left below the huge block is reused
    assert d.malloc(100) == small + 4096


def test_normal_only_and_huge_only() -> None:
    d = device()
    normal = d.malloc(3 * MiB, MallocPolicy.NORMAL_ONLY)  # 3 MiB + 32 -> 3 MiB + 4 KiB
    assert normal == BASE
    assert d.allocation_size(normal) == 3 * MiB + 4096
    assert d.page_kind(normal) == "normal"
    huge = d.malloc(100, MallocPolicy.HUGE_ONLY)  # a whole huge page
    assert d.allocation_size(huge) == 2 * MiB
    assert d.page_kind(huge) == "huge"
    assert huge == BASE + 4 * MiB
    assert d.malloc(100, 2) == BASE + 3 * MiB + 4096  # a plain int policy is accepted


def fragmented() -> tuple[HbmAllocator, list[int]]:
    """A 64 MiB device filled with 1 MiB normal blocks, every other one freed."""
    d = device(64 * MiB)
    blocks = [d.malloc(1 * MiB - 32, MallocPolicy.NORMAL_ONLY) for _ in range(64)]
    assert blocks == [BASE + i * MiB for i in range(64)]
    assert d.free_bytes == 0
    for addr in blocks[1::2]:
        d.free(addr)
    return d, blocks


def test_huge_only_fails_when_only_fragmented_normal_space_is_left() -> None:
    d, _ = fragmented()
    assert d.free_bytes == 32 * MiB
    assert d.largest_free_block == 1 * MiB
    with pytest.raises(NpuOutOfMemoryError) as info:
        d.malloc(1, MallocPolicy.HUGE_ONLY)
    err = info.value
    assert (err.requested, err.free, err.total) == (1, 32 * MiB, 64 * MiB)
    assert err.allocated == err.reserved == 32 * MiB
    assert "HUGE_ONLY" in str(err)
    assert "largest free block is 1.00 MiB" in str(err)
    # HUGE_FIRST above the threshold: no huge range, and no normal range of 1 MiB + 4 KiB either
    with pytest.raises(NpuOutOfMemoryError):
        d.malloc(1 * MiB + 1)
    # a normal 1 MiB block still fits into the first hole
    assert d.malloc(1 * MiB - 32, MallocPolicy.NORMAL_ONLY) == BASE + 1 * MiB
    assert d.used == 33 * MiB


def test_huge_first_falls_back_to_normal_pages() -> None:
    d = device(64 * MiB)
    blocks = [d.malloc(1 * MiB - 32, MallocPolicy.NORMAL_ONLY) for _ in range(64)]
    d.free(blocks[1])
    d.free(blocks[2])  # free: [1 MiB, 3 MiB) - 2 MiB long but holds no 2 MiB-aligned huge page
    assert d.largest_free_block == 2 * MiB
    addr = d.malloc(1 * MiB + MiB // 2)  # 1.5 MiB + 32 -> 1.5 MiB + 4 KiB of normal pages
    assert addr == BASE + 1 * MiB
    assert d.page_kind(addr) == "normal"
    assert d.allocation_size(addr) == 1 * MiB + MiB // 2 + 4096
    with pytest.raises(NpuOutOfMemoryError):
        d.malloc(2 * MiB, MallocPolicy.HUGE_ONLY)


def test_free_coalesces_neighbours() -> None:
    d = device(8 * MiB)
    a, b, c = (d.malloc(1 * MiB - 32, MallocPolicy.NORMAL_ONLY) for _ in range(3))
    assert d.largest_free_block == 5 * MiB
    d.free(b)
    assert d.largest_free_block == 5 * MiB
    d.free(a)  # merges with b's range: [0, 2 MiB) and [3 MiB, 8 MiB)
    assert d.largest_free_block == 5 * MiB
    d.free(c)  # joins everything
    assert d.largest_free_block == 8 * MiB
    assert d.used == 0
    assert d.malloc(8 * MiB - 32, MallocPolicy.NORMAL_ONLY) == BASE


def test_driver_errors() -> None:
    d = device()
    for bad in (0, -1):
        with pytest.raises(DeviceError, match="size must be positive"):
            d.malloc(bad)
    with pytest.raises(DeviceError, match="0x123"):
        d.free(0x123)
    a = d.malloc(100)
    d.free(a)
    with pytest.raises(DeviceError, match="already freed"):
        d.free(a)
    with pytest.raises(DeviceError):
        d.allocation_size(a)
    with pytest.raises(DeviceError):
        d.page_kind(a)


def test_driver_oom_reports_driver_usage() -> None:
    d = device(64 * MiB)
    big = d.malloc(60 * MiB)  # 60 MiB + 32 -> 62 MiB of huge pages
    assert d.allocation_size(big) == 62 * MiB
    with pytest.raises(NpuOutOfMemoryError) as info:
        d.malloc(4 * MiB)
    err = info.value
    assert isinstance(err, DeviceError)
    assert isinstance(err, MemoryError)
    assert (err.requested, err.allocated, err.reserved, err.free, err.total) == (
        4 * MiB,
        62 * MiB,
        62 * MiB,
        2 * MiB,
        64 * MiB,
    )
    assert err.holders == ((62 * MiB, f"aclrtMalloc@0x{BASE:x}"),)
    assert str(err).startswith(
        "NPU out of memory. Tried to allocate 4.00 MiB (npu:0; 64.00 MiB total capacity; "
        "62.00 MiB already allocated; 2.00 MiB free; 62.00 MiB reserved in total by aclrtMalloc)."
    )
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)
    assert again.holders == err.holders


# --------------------------------------------------------------------------------------------
# CachingAllocator
# --------------------------------------------------------------------------------------------


def test_two_small_mallocs_share_one_segment() -> None:
    ca = caching()
    b1 = ca.malloc(1000, tag="x")
    b2 = ca.malloc(1000)
    assert b1.address == BASE
    assert b2.address == b1.address + 1024
    assert (b1.size, b1.requested, b1.tag, b1.stream_id) == (1024, 1000, "x", 0)
    s = ca.stats()
    assert s.allocated_bytes == s.active_bytes == 2048
    assert s.requested_bytes == 2000
    assert s.reserved_bytes == 2 * MiB
    assert s.num_segments == 1
    assert s.inactive_split_bytes == 2 * MiB - 2048
    assert s.largest_free_cached_block == 2 * MiB - 2048
    assert (s.num_allocs, s.num_frees) == (2, 0)
    assert ca.driver.used == 2 * MiB
    assert ca.driver.page_kind(BASE) == "huge"
    assert ca.mem_get_info() == (62 * MiB, 64 * MiB)
    assert [b.address for b in ca.live_blocks()] == [b1.address, b2.address]


def test_free_then_malloc_reuses_the_address() -> None:
    ca = caching()
    b1 = ca.malloc(1000)
    ca.malloc(1000)
    ca.free(b1.address)
    assert ca.stats().allocated_bytes == 1024
    b3 = ca.malloc(700)  # best fit: the 1024-byte hole, not the large tail
    assert b3.address == BASE
    assert b3.size == 1024
    assert ca.stats().num_segments == 1


def test_block_split_and_merge() -> None:
    ca = caching()
    a, b, c = (ca.malloc(1000) for _ in range(3))
    ca.free(b.address)
    ca.free(a.address)  # merges with b
    snap = ca.snapshot()
    assert len(snap) == 1
    assert [(x["address"] - BASE, x["size"], x["allocated"]) for x in snap[0]["blocks"]] == [
        (0, 2048, False),
        (2048, 1024, True),
        (3072, 2 * MiB - 3072, False),
    ]
    assert snap[0]["segment_type"] == "small"
    assert snap[0]["allocated_size"] == 1024
    assert ca.stats().inactive_split_bytes == 2 * MiB - 1024
    d = ca.malloc(1500)  # 1536: splits the merged 2048-byte block, 512 left
    assert d.address == BASE
    assert d.size == 1536
    ca.free(d.address)
    ca.free(c.address)  # everything merges back into one free block
    snap = ca.snapshot()
    assert [(x["size"], x["allocated"]) for x in snap[0]["blocks"]] == [(2 * MiB, False)]
    s = ca.stats()
    assert (s.allocated_bytes, s.inactive_split_bytes, s.reserved_bytes) == (0, 0, 2 * MiB)
    assert s.largest_free_cached_block == 2 * MiB


def test_large_requests() -> None:
    ca = caching(128 * MiB)
    a = ca.malloc(3 * MiB, tag="a")  # < 10 MiB: a 20 MiB segment, split (17 MiB > 1 MiB)
    assert (a.address, a.size) == (BASE, 3 * MiB)
    assert ca.stats().reserved_bytes == 20 * MiB
    assert ca.stats().largest_free_cached_block == 17 * MiB
    b = ca.malloc(16 * MiB + 1)  # 16 MiB + 512 from the 17 MiB block; rest < 1 MiB: no split
    assert (b.address, b.size, b.requested) == (BASE + 3 * MiB, 17 * MiB, 16 * MiB + 1)
    c = ca.malloc(15 * MiB)  # >= 10 MiB: own segment of 16 MiB; the 1 MiB rest is not split off
    assert (c.address, c.size, c.requested) == (BASE + 20 * MiB, 16 * MiB, 15 * MiB)
    assert ca.stats().reserved_bytes == 36 * MiB
    d = ca.malloc(1 * MiB + 1)  # 1 MiB + 512: large pool, nothing cached -> new 20 MiB segment
    assert (d.address, d.size) == (BASE + 36 * MiB, 1 * MiB + 512)
    small = ca.malloc(512)  # small pool: its own 2 MiB segment despite the large free space
    assert small.address == BASE + 56 * MiB
    s = ca.stats()
    assert (s.num_segments, s.reserved_bytes) == (4, 58 * MiB)
    assert [x["segment_type"] for x in ca.snapshot()] == ["large", "large", "large", "small"]
    assert s.inactive_split_bytes == (20 * MiB - 1 * MiB - 512) + (2 * MiB - 512)


def test_blocks_are_per_stream() -> None:
    ca = caching()
    a = ca.malloc(1000, stream_id=0)
    b = ca.malloc(1000, stream_id=1)
    assert b.address == a.address + 2 * MiB
    assert ca.stats().num_segments == 2
    assert [s["stream"] for s in ca.snapshot()] == [0, 1]


def test_empty_cache_returns_free_segments() -> None:
    ca = caching(128 * MiB)
    keep = ca.malloc(1000)
    big = ca.malloc(12 * MiB)
    other = ca.malloc(4 * MiB)
    assert ca.stats().reserved_bytes == 2 * MiB + 12 * MiB + 20 * MiB
    ca.free(big.address)
    ca.free(other.address)
    ca.empty_cache()  # the small segment still holds `keep`
    s = ca.stats()
    assert (s.reserved_bytes, s.allocated_bytes, s.num_segments) == (2 * MiB, 1024, 1)
    assert s.peak_reserved_bytes == 34 * MiB
    assert ca.driver.used == 2 * MiB
    ms = ca.memory_stats()
    assert (ms["num_device_alloc"], ms["num_device_free"]) == (3, 2)
    ca.free(keep.address)
    ca.empty_cache()
    assert ca.stats().reserved_bytes == 0
    assert ca.driver.used == 0
    assert ca.snapshot() == []


def test_zero_size_and_bad_frees() -> None:
    ca = caching()
    z = ca.malloc(0, tag="empty")
    assert (z.address, z.size, z.requested) == (0, 0, 0)
    ca.free(0)  # nullptr: no-op
    s = ca.stats()
    assert (s.allocated_bytes, s.reserved_bytes, s.num_allocs, s.num_frees) == (0, 0, 0, 0)
    with pytest.raises(DeviceError):
        ca.malloc(-1)
    with pytest.raises(DeviceError, match="0xdead"):
        ca.free(0xDEAD)
    b = ca.malloc(10)
    ca.free(b.address)
    with pytest.raises(DeviceError, match="already freed"):
        ca.free(b.address)


def test_peaks_and_memory_stats() -> None:
    ca = caching()
    a = ca.malloc(3000)  # 3072
    ca.malloc(1000)
    ca.free(a.address)
    s = ca.stats()
    assert (s.allocated_bytes, s.peak_allocated_bytes, s.peak_active_bytes) == (1024, 4096, 4096)
    assert (s.requested_bytes, s.peak_requested_bytes) == (1000, 4000)
    ca.reset_peak_stats()
    s = ca.stats()
    assert (s.peak_allocated_bytes, s.peak_requested_bytes) == (1024, 1000)
    assert s.peak_reserved_bytes == 2 * MiB
    assert ca.memory_stats() == {
        "allocated_bytes.all.current": 1024,
        "allocated_bytes.all.peak": 1024,
        "reserved_bytes.all.current": 2 * MiB,
        "reserved_bytes.all.peak": 2 * MiB,
        "active_bytes.all.current": 1024,
        "active_bytes.all.peak": 1024,
        "requested_bytes.all.current": 1000,
        "requested_bytes.all.peak": 1000,
        "inactive_split_bytes.all.current": 2 * MiB - 1024,
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "num_device_alloc": 1,
        "num_device_free": 0,
        "allocation.all.current": 1,
        "segment.all.current": 1,
    }
    assert (ca.allocated_bytes, ca.reserved_bytes) == (1024, 2 * MiB)


def test_oom_message() -> None:
    bus = RecordBus()
    records: list[MemoryRecord] = []
    bus.subscribe(records.append)  # type: ignore[arg-type]
    ca = caching(64 * MiB, bus=bus)
    ca.malloc(30 * MiB, tag="activations")
    ca.malloc(20 * MiB, tag="weights")
    with pytest.raises(NpuOutOfMemoryError) as info:
        ca.malloc(16 * MiB, stream_id=2, tag="grad")
    err = info.value
    assert str(err) == (
        "NPU out of memory. Tried to allocate 16.00 MiB (npu:0; 64.00 MiB total capacity; "
        "50.00 MiB already allocated; 14.00 MiB free; 50.00 MiB reserved in total by the caching "
        "allocator). Largest holders: 30.00 MiB 'activations', 20.00 MiB 'weights'."
    )
    assert (err.requested, err.allocated, err.reserved, err.free, err.total) == (
        16 * MiB,
        50 * MiB,
        50 * MiB,
        14 * MiB,
        64 * MiB,
    )
    assert err.holders == ((30 * MiB, "activations"), (20 * MiB, "weights"))
    s = ca.stats()
    assert (s.num_ooms, s.num_alloc_retries, s.allocated_bytes) == (1, 1, 50 * MiB)
    oom = records[-1]
    assert oom.action is MemoryAction.OOM
    assert (oom.size, oom.allocated, oom.reserved, oom.stream_id, oom.tag) == (
        16 * MiB,
        50 * MiB,
        50 * MiB,
        2,
        "grad",
    )


def test_oom_retry_releases_the_cache_first() -> None:
    ca = caching(64 * MiB)
    ca.malloc(20 * MiB, tag="b")  # [0, 20 MiB)
    a = ca.malloc(30 * MiB, tag="a")  # [20, 50 MiB)
    ca.free(a.address)  # cached: reserved stays 50 MiB, 14 MiB free on the device
    assert ca.mem_get_info() == (14 * MiB, 64 * MiB)
    c = ca.malloc(40 * MiB)  # driver OOM -> release a's segment -> [20, 64 MiB) fits
    assert c.address == BASE + 20 * MiB
    s = ca.stats()
    assert (s.num_alloc_retries, s.num_ooms) == (1, 0)
    assert (s.reserved_bytes, s.allocated_bytes) == (60 * MiB, 60 * MiB)
    assert ca.memory_stats()["num_device_free"] == 1


def test_memory_records_only_when_subscribed() -> None:
    ticks: list[int] = []

    def clock() -> int:
        ticks.append(len(ticks))
        return 100 * len(ticks)

    bus = RecordBus()
    ca = caching(bus=bus, clock=clock)
    ca.malloc(1000)  # nobody listens: no records, no clock reads
    assert ticks == []
    records: list[MemoryRecord] = []
    bus.subscribe(records.append)  # type: ignore[arg-type]
    b = ca.malloc(1000, stream_id=3, tag="t")  # new stream -> new segment
    ca.free(b.address)
    ca.empty_cache()
    got = [
        (r.time_ns, r.action, r.address - BASE, r.size, r.allocated, r.reserved, r.active)
        for r in records
    ]
    assert got == [
        (100, MemoryAction.SEGMENT_ALLOC, 2 * MiB, 2 * MiB, 1024, 4 * MiB, 1024),
        (200, MemoryAction.MALLOC, 2 * MiB, 1024, 2048, 4 * MiB, 2048),
        (300, MemoryAction.FREE, 2 * MiB, 1024, 1024, 4 * MiB, 1024),
        (400, MemoryAction.SEGMENT_FREE, 2 * MiB, 2 * MiB, 1024, 2 * MiB, 1024),
    ]
    assert [(r.stream_id, r.tag) for r in records] == [(3, ""), (3, "t"), (3, "t"), (3, "")]
    bus.unsubscribe(records.append)  # type: ignore[arg-type]
    ca.malloc(10)
    assert len(records) == 4
    assert len(ticks) == 4


def test_caching_without_bus() -> None:
    ca = CachingAllocator(device(), ALLOC)
    b = ca.malloc(5 * GiB)
    assert b.size == 5 * GiB
    ca.free(b.address)
    ca.empty_cache()
    assert ca.mem_get_info() == (SPEC.memory.usable_bytes, SPEC.memory.usable_bytes)


def test_oom_names_the_segment_size_and_untagged_holders() -> None:
    ca = caching(8 * MiB)
    ca.malloc(1000)  # untagged, in a 2 MiB segment
    with pytest.raises(NpuOutOfMemoryError) as info:
        ca.malloc(5 * MiB)  # needs a 20 MiB large segment, though 6 MiB are free
    assert str(info.value) == (
        "NPU out of memory. Tried to allocate 5.00 MiB (npu:0; 8.00 MiB total capacity; "
        "1.00 KiB already allocated; 6.00 MiB free; 2.00 MiB reserved in total by the caching "
        "allocator). It needed a new segment of 20.00 MiB. Largest holders: 1.00 KiB (untagged)."
    )
