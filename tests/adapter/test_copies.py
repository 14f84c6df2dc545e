"""Pinned and pageable copies, DataLoader(pin_memory=True)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from msprof_py.device import SimulatedNpu, TaskLog


def test_pin_memory_marks_tensors_pinned(npu: SimulatedNpu) -> None:
    x = torch.randn(4, 4)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned.is_pinned() and torch.equal(pinned, x)


def test_non_blocking_from_pinned_memory_is_asynchronous(npu: SimulatedNpu, log: TaskLog) -> None:
    engine = npu.engine
    host = torch.randn(1024, 1024).pin_memory()
    before = engine.host_ns
    device = host.to("npu", non_blocking=True)
    copy = log.tasks[-1]
    assert copy.op_type == "MEMCPY_H2D" and copy.attrs == {
        "copy_kind": "HOST_TO_DEVICE",
        "pinned": True,
    }
    assert engine.host_ns - before < copy.duration_ns  # returned before the copy finished
    assert copy.duration_ns == 10_000 + round(4 * 2**20 / 25e9 * 1e9)
    assert torch.equal(device.cpu(), host)


def test_pageable_and_blocking_copies_wait(npu: SimulatedNpu, log: TaskLog) -> None:
    engine = npu.engine
    pageable = torch.randn(1024, 1024)
    pageable.to("npu", non_blocking=True)  # non_blocking cannot help pageable memory
    copy = log.tasks[-1]
    assert copy.attrs and copy.attrs["pinned"] is False
    assert engine.host_ns >= copy.end_ns
    assert copy.duration_ns == 25_000 + round(4 * 2**20 / 10e9 * 1e9)
    pinned = torch.randn(1024, 1024).pin_memory()
    pinned.to("npu")  # pinned but blocking: waits too
    assert engine.host_ns >= log.tasks[-1].end_ns


def test_device_to_host_non_blocking(npu: SimulatedNpu, log: TaskLog) -> None:
    x = torch.randn(256, 256, device="npu")
    out = x.to("cpu", non_blocking=True)
    copy = log.tasks[-1]
    assert copy.op_type == "MEMCPY_D2H" and copy.attrs and copy.attrs["pinned"] is True
    torch.npu.synchronize()
    assert torch.equal(out, x.cpu())


def test_device_to_device_copies_and_casts(npu: SimulatedNpu, log: TaskLog) -> None:
    x = torch.randn(64, 64, device="npu")
    y = torch.empty(64, 64, device="npu")
    y.copy_(x)
    assert log.tasks[-1].op_type == "MEMCPY_D2D"
    half = x.half()
    assert half.dtype == torch.float16 and log.tasks[-1].op_type == "Cast"
    assert torch.equal(half.cpu(), x.cpu().half())


def test_dataloader_with_pin_memory(npu: SimulatedNpu, log: TaskLog) -> None:
    data = TensorDataset(torch.randn(32, 8), torch.arange(32))
    loader = DataLoader(data, batch_size=8, pin_memory=True)
    seen = 0
    for features, labels in loader:
        assert features.is_pinned() and labels.is_pinned()
        features = features.to("npu", non_blocking=True)
        labels = labels.to("npu", non_blocking=True)
        seen += int(labels.cpu().shape[0])
    assert seen == 32
    pinned_copies = [t for t in log.tasks if t.op_type == "MEMCPY_H2D" and t.attrs["pinned"]]
    assert len(pinned_copies) == 8
