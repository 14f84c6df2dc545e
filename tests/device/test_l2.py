"""L2 reuse between kernels: the LRU residency rule and the re-costed memory term."""

from __future__ import annotations

import pytest

from msprof_py.device import SimulatedNpu
from msprof_py.device.costmodel import vector_cost, with_l2_reads
from msprof_py.device.l2 import L2Residency
from msprof_py.device.spec import DeviceSpec

MIB = 1 << 20


def test_a_written_buffer_is_read_from_l2_until_newer_traffic_evicts_it() -> None:
    l2 = L2Residency(25 * MIB)
    l2.write(0x1000, 10 * MIB)
    l2.write(0x2000, 10 * MIB)
    assert l2.read(0x1000, 10 * MIB) == 10 * MIB  # resident: 20 of 25 MiB; A now newest
    l2.write(0x3000, 10 * MIB)  # 30 MiB > 25: the oldest, B, goes
    assert 0x2000 not in l2
    assert l2.read(0x1000, 4 * MIB) == 4 * MIB  # only the bytes read
    assert l2.read(0x2000, 10 * MIB) == 0  # a miss, which brings B back in (C goes)
    assert 0x3000 not in l2
    assert l2.resident == 20 * MIB


def test_a_buffer_larger_than_l2_evicts_everything_and_never_hits() -> None:
    l2 = L2Residency(25 * MIB)
    l2.write(0x1000, 10 * MIB)
    l2.write(0x2000, 26 * MIB)
    assert len(l2) == 0 and l2.resident == 0
    assert l2.read(0x2000, 26 * MIB) == 0
    assert l2.read(0x1000, 10 * MIB) == 0


def test_reads_served_from_l2_cost_l2_bandwidth() -> None:
    spec = DeviceSpec.preset("ascend910b")
    n = 8 * MIB  # fp16 elements: 16 MiB read, 16 MiB written
    cost = vector_cost(spec, elements=n, dtype="float16", bytes_moved=4 * n)
    # 48 blocks (32 MiB / 16 KiB, capped at the 48 vector cores); HBM at 1.6 TB/s x 0.8
    assert cost.block_dim == 48
    assert cost.memory_ns == pytest.approx(32 * MIB / 1.28e12 * 1e9)  # 26,214.4 ns
    reused = with_l2_reads(spec, cost, 16 * MIB)
    # the write (16 MiB) still at 1.28 TB/s, the read (16 MiB) at the 4.75 TB/s of L2
    memory = 16 * MIB / 1.28e12 * 1e9 + 16 * MIB / 4.75e12 * 1e9  # 13,107.2 + 3,532.0 ns
    assert reused.memory_ns == pytest.approx(memory)
    assert reused.duration_ns == 3000 + round(memory)  # still memory-bound (vector: 948 ns)
    assert reused.bytes == cost.bytes  # the traffic is the same, only where it is served
    # hits beyond the kernel's bytes are capped; nothing hit: the cost is unchanged
    capped = with_l2_reads(spec, cost, 64 * MIB)
    assert capped.memory_ns == pytest.approx(32 * MIB / 4.75e12 * 1e9)
    assert with_l2_reads(spec, cost, 0) is cost


def test_the_spec_switches_l2_reuse_on() -> None:
    assert SimulatedNpu("ascend910b").l2 is None  # the presets leave it off
    raw = DeviceSpec.preset("ascend910b").raw
    raw["memory"] = {**raw["memory"], "l2_reuse": True}
    spec = DeviceSpec.from_mapping(raw)
    l2 = SimulatedNpu(spec).l2
    assert l2 is not None and l2.capacity == 192 * MIB
