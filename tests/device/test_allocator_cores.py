"""The compiled caching-allocator core (``device/native/allocator_core.c``) against the Python
one: random malloc/free/empty_cache programs that fill the 64 MiB device (so segments are
released and out-of-memory errors raised) give the same addresses, snapshots, statistics,
memory records and error texts; handles free their block when they die."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings
from test_memory_properties import ALLOC, CAPACITY, caching_ops, run_caching

from msprof_py.device import DeviceError, native
from msprof_py.device.caching import CachingAllocator, PythonCachingAllocator
from msprof_py.device.memory import HbmAllocator
from msprof_py.device.records import MemoryAction, RecordBus

COMPILED = native.load()
needs_compiled = pytest.mark.skipif(
    COMPILED is None, reason=f"compiled allocator core: {native.status()}"
)
BOTH = [PythonCachingAllocator, CachingAllocator]


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(caching_ops)
def test_the_compiled_allocator_answers_as_the_python_one(ops: list[tuple[Any, ...]]) -> None:
    assert issubclass(CachingAllocator, COMPILED.AllocatorCore)  # type: ignore[union-attr]
    for subscribe in (True, False):
        python: list[Any] = []
        compiled: list[Any] = []
        expected = run_caching(
            ops, subscribe=subscribe, allocator_type=PythonCachingAllocator, seen=python
        )
        assert run_caching(ops, subscribe=subscribe, seen=compiled) == expected
        assert compiled == python


@pytest.mark.parametrize("allocator_type", BOTH)
def test_a_handle_frees_its_block_when_it_dies(allocator_type: type) -> None:
    bus = RecordBus()
    records: list[Any] = []
    bus.subscribe(records.append)
    ca = allocator_type(HbmAllocator(CAPACITY, ALLOC), ALLOC, bus=bus)
    handle = ca.hold(1000, 0, "weights")
    assert ca.block_size(handle.address) == 1024
    assert ca.allocated_bytes == 1024
    address = handle.address
    del handle
    gc.collect()
    assert ca.allocated_bytes == 0
    assert [(r.action, r.address, r.tag) for r in records[-2:]] == [
        (MemoryAction.MALLOC, address, "weights"),
        (MemoryAction.FREE, address, "weights"),
    ]
    assert ca.hold(0) is None


@pytest.mark.parametrize("allocator_type", BOTH)
def test_a_handle_of_a_block_freed_already_dies_quietly(allocator_type: type) -> None:
    ca = allocator_type(HbmAllocator(CAPACITY, ALLOC), ALLOC)
    handle = ca.hold(4096, stream_id=1, tag="t")
    ca.free(handle.address)
    del handle  # its free fails: dropped, as a __del__ would
    with pytest.raises(DeviceError, match="is not a live block"):
        ca.free(0x1234)
    with pytest.raises(DeviceError, match="size must be >= 0"):
        ca.malloc(-1)


@needs_compiled
def test_an_interrupt_raised_while_a_handle_dies_reaches_the_next_call() -> None:
    """Ctrl-C's handler can run in the record callback of a block freed by a dying handle:
    the compiled core keeps the KeyboardInterrupt for the next call instead of losing it, as
    a ``__del__`` would (the script would train on after Ctrl-C)."""
    bus = RecordBus()
    interrupted: list[Any] = []

    def on_record(record: Any) -> None:
        if record.action is MemoryAction.FREE and not interrupted:
            interrupted.append(record)
            raise KeyboardInterrupt

    bus.subscribe(on_record)
    ca = CachingAllocator(HbmAllocator(CAPACITY, ALLOC), ALLOC, bus=bus)
    handle = ca.hold(1000)
    del handle
    assert interrupted and ca.allocated_bytes == 0  # the block was freed all the same
    with pytest.raises(KeyboardInterrupt):
        ca.hold(1000)
    assert ca.hold(1000) is not None  # raised once
