"""Eager kernels read what the previous kernel wrote from L2 while it fits there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from msprof_py.device import SimulatedNpu, TaskLog
from msprof_py.device.l2 import L2Residency

MIB = 1 << 20
#: a small L2 for the test (the 910B's is 192 MiB): tensors of a few MiB cross it
CAPACITY = 8 * MIB


@pytest.fixture
def l2(npu: SimulatedNpu) -> Iterator[L2Residency]:
    """L2 reuse switched on for one test, as ``memory.l2_reuse = true`` does, cold."""
    assert npu.spec.name == "ascend910b" and npu.l2 is None
    npu.l2 = L2Residency(CAPACITY)
    yield npu.l2
    npu.l2 = None


def _relu_chain(log: TaskLog, l2: L2Residency, numel: int) -> tuple:
    x = torch.empty(numel, device="npu")
    l2.clear()
    start = len(log.tasks)
    y = torch.relu(x)
    z = torch.relu(y)
    first, second = [t for t in log.tasks[start:] if t.kind.value == "kernel"]
    assert (first.op_type, second.op_type) == ("Relu", "Relu")
    assert z.shape == (numel,)
    return first, second


def test_a_consumer_reads_its_producers_output_from_l2(
    npu: SimulatedNpu, log: TaskLog, l2: L2Residency
) -> None:
    first, second = _relu_chain(log, l2, MIB)  # fp32: 4 MiB in, 4 MiB out
    # x was never written by a kernel (cold): both bytes from HBM at 1.6 TB/s x 0.8
    assert first.duration_ns == 3000 + round(8 * MIB / 1.28e12 * 1e9)  # 9,554 ns
    # y (4 MiB) was the last buffer written, 8 MiB resident <= 8 MiB: its read costs the
    # 4.75 TB/s of L2, the write of z still HBM (vector time 237 ns stays below)
    hit = 4 * MIB / 1.28e12 * 1e9 + 4 * MIB / 4.75e12 * 1e9  # 3,276.8 + 883.0 ns
    assert second.bytes == first.bytes == 8 * MIB
    assert second.duration_ns == 3000 + round(hit)  # 7,160 ns
    assert second.memory_ns == round(hit)


def test_a_buffer_larger_than_l2_is_read_from_hbm(
    npu: SimulatedNpu, log: TaskLog, l2: L2Residency
) -> None:
    first, second = _relu_chain(log, l2, 4 * MIB)  # fp32: 16 MiB > the 8 MiB of L2
    eager = 3000 + round(32 * MIB / 1.28e12 * 1e9)  # 29,214 ns
    assert first.duration_ns == second.duration_ns == eager
